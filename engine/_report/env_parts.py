"""The env's own part of a report: its figures and sections (``Env.report_figures``,
``Env.report_sections``), gathered for the page.

The core knows no env: whatever a run's env wants shown besides the built-in
tables, plots and transcripts it draws itself, through those hooks. The env is the
one the eval ran (``write_report(env=...)``) or one built from the run's
``config.toml``; each hook gets the run's episodes as ``Episode`` values, streamed
from ``episodes.jsonl`` (nothing is read for a hook that does not iterate them).
An env that cannot be built here (its plugin is not installed, its config no longer
loads) or a hook that raises or returns the wrong thing costs the report only that
part: the page says why.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._output.records import loads_episode
from taketurns._report.parts import Figure, Section

__all__ = ["EnvParts", "env_parts"]


@attrs.define
class EnvParts:
    figures: list[Figure] = attrs.field(factory=list)
    sections: list[Section] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)


def episodes_of(path: Path) -> Iterator[Episode]:
    """The episodes in ``path``, one at a time; lines that are not an episode record
    (damaged, or of a shape that no longer structures) are skipped."""
    with path.open("rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                yield loads_episode(raw)
            except Exception:  # damaged or foreign: the page's own scan counts them
                continue


HOOKS = ("report_figures", "report_sections")


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


def env_parts(episodes: Path, config: dict[str, Any], env: Env | None = None) -> EnvParts:
    """What ``env`` (or the env ``config`` names) adds to the report of the run
    whose episodes are in ``episodes``."""
    parts = EnvParts()
    env_id = str(config.get("env_id") or "?")
    if env is None:
        try:
            env = _build(config)
        except Exception as exc:
            parts.notes.append(
                f"env {env_id!r} could not be built here ({_why(exc)}): its own figures "
                "and sections are left out"
            )
            return parts
        if env is None:
            return parts
    hooks: tuple[tuple[str, type, list[Any]], ...] = (
        ("report_figures", Figure, parts.figures),
        ("report_sections", Section, parts.sections),
    )
    for name, kind, into in hooks:
        try:
            found = list(getattr(env, name)(episodes_of(episodes)))
            wrong = [x for x in found if not isinstance(x, kind)]
            if wrong:
                raise TypeError(f"returned {type(wrong[0]).__name__}, not {kind.__name__}")
        except Exception as exc:
            parts.notes.append(f"env {env_id!r}: {name} failed ({_why(exc)}); left out")
            continue
        into.extend(found)
    return parts


def _why(exc: BaseException) -> str:
    text = re.sub(r"\s+", " ", str(exc)).strip()[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
