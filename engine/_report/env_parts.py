"""The env's own part of a report: its figures and sections (``Env.report_figures``,
``Env.report_sections``), gathered for the page.

The core knows no env: whatever a run's env wants shown besides the built-in
tables, plots and transcripts it draws itself, through those hooks. The env is the
one the eval ran (``write_report(env=...)``) or one built from the run's
``config.toml``; each hook gets the run's episodes as ``EpisodeView`` values (the
parsed records, read like ``Episode`` values; nothing is structured through cattrs
unless a hook reads a field beyond the view's own), streamed from
``episodes.jsonl``. The first hook reads them from the report's own pass over the
file (``each`` sees every record, however far the hook reads: the rest is read
after it returns), so an env with one hook costs no second pass; a second hook
reads the file again. An env that cannot be built here (its plugin is not
installed, its config no longer loads) or a hook that raises or returns the wrong
thing costs the report only that part: the page says why.

``taketurns view`` builds the env once per run (``env_from``) and draws its
sections over one episode too, for that episode's page (``episode_parts``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from taketurns._eval.env import Env
from taketurns._output.records import read_episodes
from taketurns._report.episode_view import EpisodeView
from taketurns._report.parts import Figure, Section

__all__ = ["EnvParts", "env_from", "env_parts", "episode_parts"]

HOOKS = ("report_figures", "report_sections")
Record = dict[str, Any]


@attrs.define
class EnvParts:
    figures: list[Figure] = attrs.field(factory=list)
    sections: list[Section] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)


def _episodes(records: Iterable[Record]) -> Iterator[EpisodeView]:
    """The records as ``EpisodeView`` values: no record is structured into an
    ``Episode`` unless a hook reads a field the view does not answer itself."""
    for raw in records:
        yield EpisodeView(raw)


def _seen(records: Iterable[Record], each: Callable[[Record], None]) -> Iterator[Record]:
    for raw in records:
        each(raw)
        yield raw


def _build(config: dict[str, Any]) -> Env | None:
    """The env ``config`` names, built from it; None when its class draws nothing of
    its own (no need to build it: a taskset env opens its taskset)."""
    from taketurns._config.settings import load_eval_config
    from taketurns._eval.plan import env_class, make_env

    data = {k: v for k, v in config.items() if k != "output_dir"}
    env_cls = env_class(str(data.get("env_id")), field="env_id")
    if all(getattr(env_cls, hook) is getattr(Env, hook) for hook in HOOKS):
        return None
    return make_env(load_eval_config(env_cls.config_class, file_data=data))


def env_parts(
    path: Path,
    config: dict[str, Any],
    env: Env | None = None,
    *,
    each: Callable[[Record], None] | None = None,
    damaged: list[int] | None = None,
) -> EnvParts:
    """What ``env`` (or the env ``config`` names) adds to the report of the run whose
    episodes are in ``path``. ``each`` is called with every record of the file, once,
    in order (the page's own scan); ``damaged`` collects the numbers of the lines
    that are not records."""
    parts = EnvParts()
    records: Iterator[Record] = read_episodes(path, damaged=damaged)
    if each is not None:
        records = _seen(records, each)
    if env is None:
        env, notes = env_from(config)
        parts.notes.extend(notes)
    if env is not None:
        again = lambda: read_episodes(path)  # noqa: E731
        _draw(env, str(config.get("env_id") or "?"), records, again, HOOKS, parts)
    for _ in records:  # the pass ends at the file's end, however far a hook read
        pass
    return parts


def env_from(config: dict[str, Any]) -> tuple[Env | None, list[str]]:
    """The env ``config`` (a run's ``config.toml``) names, built from it; None when
    its class draws nothing of its own, or (with the note why) when it cannot be
    built here."""
    try:
        return _build(config), []
    except Exception as exc:
        return None, [
            f"env {str(config.get('env_id') or '?')!r} could not be built here "
            f"({_why(exc)}): any figures and sections of its own are left out"
        ]


def episode_parts(record: Record, env: Env, env_id: str) -> EnvParts:
    """The sections ``env`` draws (``report_sections``) over one episode, ``record``:
    for the page that shows that episode. A hook that fails costs only its part."""
    parts = EnvParts()
    _draw(env, env_id, [record], lambda: [record], ("report_sections",), parts)
    return parts


def _draw(
    env: Env,
    env_id: str,
    records: Iterable[Record],
    again: Callable[[], Iterable[Record]],
    names: tuple[str, ...],
    parts: EnvParts,
) -> None:
    """Call each hook of ``names``: the first on ``records`` (the report's pass), the
    next on ``again()`` (a new read)."""
    hooks: tuple[tuple[str, type, list[Any]], ...] = (
        ("report_figures", Figure, parts.figures),
        ("report_sections", Section, parts.sections),
    )
    source: Iterable[Record] = records
    for name, kind, into in hooks:
        if name not in names or getattr(type(env), name) is getattr(Env, name):
            continue  # the default draws nothing and reads nothing
        try:
            found = list(getattr(env, name)(_episodes(source)))
            wrong = [x for x in found if not isinstance(x, kind)]
            if wrong:
                raise TypeError(f"returned {type(wrong[0]).__name__}, not {kind.__name__}")
        except Exception as exc:
            parts.notes.append(f"env {env_id!r}: {name} failed ({_why(exc)}); left out")
        else:
            into.extend(found)
        source = again()


def _why(exc: BaseException) -> str:
    text = re.sub(r"\s+", " ", str(exc)).strip()[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
