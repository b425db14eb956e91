"""The env's own part of a report: its figures and sections (``Env.report_figures``,
``Env.report_sections``), gathered for the page.

The core knows no env: whatever a run's env wants shown besides the built-in
tables, plots and transcripts it draws itself, through those hooks. The env is the
one the eval ran (``write_report(env=...)``) or one built from the run's
``config.toml``; each hook gets the run's episodes as ``EpisodeView`` values (the
parsed records, read like ``Episode`` values; nothing is structured through cattrs
unless a hook reads a field beyond the view's own).

The hooks are fed, not handed a file (``EnvFeed``): each record goes to them as it
comes, as an eval writes it or as ``env_parts`` reads a finished run's
``episodes.jsonl`` (one pass, whatever the env draws). Each hook reads its records
from a thread of its own, in lockstep (``_Follower``): it is handed the records in
chunks and runs only while the feeder waits for it, so no two of the hooks and the
feeder ever run at the same time, and memory holds one chunk, never the run. An
env that cannot be built here (its plugin is not installed, its config no longer
loads) or a hook that raises or returns the wrong thing costs the report only that
part: the page says why.

``taketurns view`` builds the env once per run (``env_from``) and draws its
sections over one episode too, for that episode's page (``episode_parts``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from taketurns._eval.env import Env
from taketurns._output.records import read_episodes
from taketurns._report.episode_view import EpisodeView
from taketurns._report.parts import Figure, Section

__all__ = ["EnvFeed", "EnvParts", "env_from", "env_parts", "episode_parts"]

HOOKS = ("report_figures", "report_sections")
KINDS: dict[str, type] = {"report_figures": Figure, "report_sections": Section}
Record = dict[str, Any]
Hook = Callable[[Iterable[EpisodeView]], Iterable[Any]]


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


class _Drawn:
    """What one hook came to: its values, or the exception it raised."""

    __slots__ = ("error", "found")

    def __init__(self) -> None:
        self.found: list[Any] = []
        self.error: BaseException | None = None

    def call(self, hook: Hook, episodes: Iterable[EpisodeView]) -> None:
        try:
            self.found = list(hook(episodes))
        except Exception as exc:  # noted by _add
            self.error = exc

    def call_in_thread(self, hook: Hook, episodes: Iterable[EpisodeView]) -> None:
        try:
            self.found = list(hook(episodes))
        except BaseException as exc:  # noted (an Exception) or raised (anything else) by _add
            self.error = exc


class _Follower:
    """A hook that reads the report's pass from a thread of its own, in lockstep
    (module docstring): ``add`` each record of the pass, then ``close``. The hook
    runs only inside ``__init__``, ``add`` (when a chunk is handed over) and
    ``close``, while the caller waits for it; a hook that stops reading early is
    handed nothing more."""

    CHUNK = 512  # records per hand-over: the memory it holds, and two thread switches

    __slots__ = ("_chunk", "_drawn", "_finished", "_given", "_thread", "_to_hook", "_to_pass")

    def __init__(self, hook: Hook) -> None:
        self._chunk: list[Record] = []
        self._given: list[Record] | None = None
        self._to_hook = threading.Semaphore(0)  # released: the hook has records (or the end)
        self._to_pass = threading.Semaphore(0)  # released: the hook wants more, or is done
        self._finished = False
        self._drawn = _Drawn()
        self._thread = threading.Thread(
            target=self._run, args=(hook,), name="taketurns-report-hook", daemon=True
        )
        self._thread.start()
        self._to_pass.acquire()  # until it asks for its first records (or is done)

    def _run(self, hook: Hook) -> None:
        try:
            self._drawn.call_in_thread(hook, self._views())
        finally:
            self._finished = True
            self._to_pass.release()

    def _views(self) -> Iterator[EpisodeView]:
        while True:
            self._to_pass.release()  # asks for the next chunk; the pass runs meanwhile
            self._to_hook.acquire()
            given = self._given
            if given is None:
                return
            for raw in given:
                yield EpisodeView(raw)

    def _hand(self, given: list[Record] | None) -> None:
        if self._finished:
            return
        self._given = given
        self._to_hook.release()
        self._to_pass.acquire()  # the hook runs; back when it wants more or is done

    def add(self, raw: Record) -> None:
        chunk = self._chunk
        chunk.append(raw)
        if len(chunk) >= self.CHUNK:
            self._chunk = []
            self._hand(chunk)

    def close(self) -> _Drawn:
        """The pass is over: the hook gets the last chunk and the end; its result."""
        if self._chunk:
            self._hand(self._chunk)
            self._chunk = []
        self._hand(None)
        self._thread.join()
        return self._drawn


def _hooks(env: Env, names: tuple[str, ...]) -> list[tuple[str, Hook]]:
    """The hooks of ``names`` that ``env``'s class overrides (the default draws
    nothing and reads nothing), in the order of ``HOOKS``."""
    return [
        (name, getattr(env, name))
        for name in HOOKS
        if name in names and getattr(type(env), name) is not getattr(Env, name)
    ]


class EnvFeed:
    """``env``'s report hooks, fed one record at a time: ``add`` each record, then
    ``close`` for what they drew. Each hook reads from a thread of its own, in
    lockstep (module docstring), started here. One thread feeds and closes;
    ``close`` must be called on every path (it ends and joins the hooks' threads),
    once."""

    __slots__ = ("_followers", "_hooks")

    def __init__(self, env: Env | None) -> None:
        self._hooks = _hooks(env, HOOKS) if env is not None else []
        self._followers: list[_Follower] = []
        try:
            for _, hook in self._hooks:
                self._followers.append(_Follower(hook))
        except BaseException:
            self.close("?")
            raise

    def add(self, raw: Record) -> None:
        """``raw`` (a parsed record, ``parse_record``'s) to every hook."""
        for follower in self._followers:
            follower.add(raw)

    def close(self, env_id: str) -> EnvParts:
        """Every hook's input ends; what they drew, or a note per hook that failed
        (``env_id`` names the env in it). Anything a hook raised that is not an
        ``Exception`` is raised here, after every thread is joined."""
        drawn = [f.close() for f in self._followers]
        parts = EnvParts()
        for (name, _), result in zip(self._hooks, drawn, strict=False):
            _add(parts, env_id, name, result)
        return parts


def env_parts(path: Path, config: dict[str, Any], env: Env | None = None) -> EnvParts:
    """What ``env`` (or the env ``config`` names) adds to the report of the run whose
    episodes are in ``path``, from one pass over the file (module docstring); the
    file's damaged lines are skipped."""
    notes: list[str] = []
    if env is None:
        env, notes = env_from(config)
    feed = EnvFeed(env)
    try:
        for raw in read_episodes(path):
            feed.add(raw)
    finally:
        parts = feed.close(str(config.get("env_id") or "?"))
    parts.notes[:0] = notes
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


def episode_parts(record: Record, env: Env, env_id: str) -> EnvParts:
    """The sections ``env`` draws (``report_sections``) over one episode, ``record``:
    for the page that shows that episode. A hook that fails costs only its part."""
    parts = EnvParts()
    for name, hook in _hooks(env, ("report_sections",)):
        result = _Drawn()
        result.call(hook, _episodes([record]))
        _add(parts, env_id, name, result)
    return parts


def _add(parts: EnvParts, env_id: str, name: str, drawn: _Drawn) -> None:
    """``drawn`` (hook ``name``'s result) into ``parts``, or its note: an error, or
    values of the wrong kind. Anything but an ``Exception`` is raised."""
    error, kind = drawn.error, KINDS[name]
    if error is not None and not isinstance(error, Exception):
        raise error
    if error is None:
        wrong = [x for x in drawn.found if not isinstance(x, kind)]
        if not wrong:
            (parts.figures if name == "report_figures" else parts.sections).extend(drawn.found)
            return
        error = TypeError(f"returned {type(wrong[0]).__name__}, not {kind.__name__}")
    parts.notes.append(f"env {env_id!r}: {name} failed ({_why(error)}); left out")


def _why(exc: BaseException) -> str:
    text = re.sub(r"\s+", " ", str(exc)).strip()[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
