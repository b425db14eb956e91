"""One run directory as the viewer sees it: its files, its state, and what has been
read of its ``episodes.jsonl`` so far.

State: **running** while a process holds the directory's lock (``writer``);
otherwise **finished** when ``summary.json`` says the run was not interrupted, else
**interrupted** (stopped by a signal, or killed before it wrote its summary).

Reading is incremental (``follow``): the line index grows by what was appended, and
each new line is parsed once into the live ``Tally`` and the report's ``Scan`` (for
the figures). A finished run with a ``summary.json`` is only read when its page is
opened (``wanted``); running runs and runs without a summary are always followed.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path
from typing import Any

import trio

from taketurns._eval.env import Env
from taketurns._output.records import parse_record
from taketurns._report.env_parts import EnvParts, env_from, env_parts, episode_parts
from taketurns._report.markup import Json, as_dict
from taketurns._report.scan import Scan
from taketurns._view.lines import LineIndex
from taketurns._view.tally import Tally
from taketurns._view.writer import writer_alive

__all__ = ["FINISHED", "INTERRUPTED", "RUNNING", "RunView", "inside"]

RUNNING, FINISHED, INTERRUPTED = "running", "finished", "interrupted"
EPISODES, CONFIG, SUMMARY, LOCK = "episodes.jsonl", "config.toml", "summary.json", ".lock"
BATCH = 32  # lines parsed between checkpoints (~5 ms: pages stay quick during a catch-up)
FIRST_LINE_MAX = 16 << 20  # bytes read looking for the first record's end


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``, symlinks resolved, is ``root`` or under it (``root`` resolved)."""
    try:
        resolved = path.resolve()
    except OSError:
        return False
    return resolved == root or root in resolved.parents


class RunView:
    """See the module docstring. ``id`` is the run's name in URLs (its path under
    ``root``); every file it reads must resolve inside ``root``."""

    def __init__(self, run_id: str, path: Path, root: Path) -> None:
        self.id = run_id
        self.path = path
        self.root = root
        self.index = LineIndex(path / EPISODES)
        self.tally = Tally()
        self.scan = Scan(0)
        self.scanned = 0  # lines of the index parsed into tally and scan
        self.damaged = 0
        self.state = INTERRUPTED
        self.wanted = False
        self.version = 0
        self.config: Json = {}
        self.config_text = ""
        self.summary_file: Json | None = None
        self._stamps: dict[str, float | None] = {}
        self._generation = 0
        self._summary_cache: tuple[int, Json] | None = None
        self._summary_due = 0.0
        self._first: tuple[int, Json] | None = None
        self.reading = trio.Lock()  # held while parsing or summarizing: one at a time
        self._drawing = trio.Lock()
        self._own: tuple[tuple[int, int], EnvParts] | None = None
        self._building = trio.Lock()
        self._env: tuple[str, Env | None, list[str]] | None = None

    # -- files -------------------------------------------------------------------------

    def file(self, name: str) -> Path | None:
        """``path/name`` if it is a regular file resolving inside ``root``, else None."""
        found = self.path / name
        if not inside(self.root, found) or not found.is_file():
            return None
        return found

    def _changed(self, name: str) -> Path | None:
        """``file(name)`` when its mtime changed since last asked (None otherwise)."""
        found = self.file(name)
        stamp = found.stat().st_mtime if found is not None else None
        if self._stamps.get(name, -1.0) == stamp:
            return None
        self._stamps[name] = stamp
        self.version += 1
        return found or self.path / name

    def refresh_meta(self, locks: set[tuple[int, int, int]] | None) -> None:
        """Re-read ``config.toml`` and ``summary.json`` when they changed, and the state."""
        config = self._changed(CONFIG)
        if config is not None:
            self.config_text = _read(config)
            try:
                self.config = tomllib.loads(self.config_text)
            except tomllib.TOMLDecodeError:
                self.config = {}
        summary = self._changed(SUMMARY)
        if summary is not None:
            try:
                found = json.loads(_read(summary) or "null")
            except ValueError:
                found = None
            self.summary_file = found if isinstance(found, dict) else None
        lock = self.file(LOCK)
        if lock is not None and writer_alive(lock, locks):
            state = RUNNING
        elif self.summary_file is not None and not self.summary_file.get("interrupted"):
            state = FINISHED
        else:
            state = INTERRUPTED
        if state != self.state:
            self.state = state
            self.version += 1

    @property
    def followed(self) -> bool:
        return self.wanted or self.state == RUNNING or self.summary_file is None

    @property
    def caught_up(self) -> bool:
        return self.scanned == len(self.index) and self.index.end == self._size()

    def _size(self) -> int:
        found = self.file(EPISODES)
        return found.stat().st_size if found is not None else 0

    # -- reading -----------------------------------------------------------------------

    @property
    def indexed_all(self) -> bool:
        """Whether every complete line of ``episodes.jsonl`` is in the index."""
        return self.index.end == self._size()

    async def index_lines(self, lines: int | None = None, budget_s: float | None = None) -> bool:
        """Extend the line index (``lines.CHUNK`` bytes a step, a checkpoint between
        steps) until ``lines`` lines are indexed, ``budget_s`` seconds have passed, or
        the end of the file; True when it reached the end. A replaced file (a resume
        tidied it) starts the index, and what was read of it, over."""
        if self.file(EPISODES) is None:
            return True
        deadline = None if budget_s is None else time.monotonic() + budget_s
        while True:
            at_end = self.index.extend()
            if self.index.generation != self._generation:
                self._generation = self.index.generation
                self._start_over()
            if at_end:
                return True
            if lines is not None and len(self.index) >= lines:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await trio.lowlevel.checkpoint()

    async def follow(self, budget_s: float) -> bool:
        """Index what was appended and parse new lines for up to ``budget_s`` seconds
        (checkpointing every ``BATCH`` lines); the rest waits for the next call. Each
        batch is read and counted without a checkpoint in between, so what was read
        always matches the index (which may start over at any checkpoint). True when
        the budget ran out before the end of what is there to read."""
        async with self.reading:
            return await self._follow(budget_s)

    def _start_over(self) -> None:
        """Nothing read yet. The report's scan is told the run's rollouts: at one
        rollout it keeps 8 bytes per trace for the interval, not a record per task."""
        rollouts = self.config.get("rollouts")
        self.tally, self.scanned, self.damaged = Tally(), 0, 0
        self.scan = Scan(0, rollouts=rollouts if isinstance(rollouts, int) else None)
        self.version += 1

    async def _follow(self, budget_s: float) -> bool:
        deadline = time.monotonic() + budget_s
        at_end = await self.index_lines(budget_s=budget_s)
        if self.scanned == 0 and len(self.index):
            self._start_over()
        while self.scanned < len(self.index) and time.monotonic() < deadline:
            stop = min(self.scanned + BATCH, len(self.index))
            for n, raw in self.index.read(self.scanned, stop):
                record = parse_record(raw)
                if record is None:
                    self.damaged += 1
                else:
                    self.tally.add(n, record)
                    self.scan.add(record)
                    # the report keeps failed records whole; the viewer pages them instead
                    self.scan.failed.clear()
            self.scanned = stop
            self.version += 1
            await trio.lowlevel.checkpoint()
        return not at_end or self.scanned < len(self.index)

    # -- what pages show ----------------------------------------------------------------

    @property
    def env(self) -> str:
        return str(self.config.get("env_id") or self.scan.env or "?")

    @property
    def planned(self) -> int | None:
        """The (task, rollout) pairs the run plays: its summary's count once written
        (a taskset shorter than ``-n`` plays fewer), else what the config asks."""
        written = (self.summary_file or {}).get("planned")
        if isinstance(written, int):
            return written
        n, r = self.config.get("num_tasks"), self.config.get("rollouts", 1)
        return n * r if isinstance(n, int) and isinstance(r, int) else None

    @property
    def started(self) -> float | None:
        """When the run (its latest session, after a resume) took the lock."""
        for name in (LOCK, CONFIG):
            found = self.file(name)
            if found is not None:
                return found.stat().st_mtime
        return None

    @property
    def duration_s(self) -> float | None:
        if self.state == RUNNING:
            return time.time() - self.started if self.started else None
        wall = as_dict(self.summary_file).get("wall_s")
        return float(wall) if isinstance(wall, int | float) else None

    def models(self) -> dict[str, list[str]]:
        """Models per agent (role): from the episodes read, else from the first line."""
        if self.tally.models:
            return {a: sorted(m) for a, m in sorted(self.tally.models.items())}
        record = self._first_record()
        found: dict[str, list[str]] = {}
        for t in (record or {}).get("traces") or ():
            stamp = as_dict(as_dict(t).get("agent"))
            found.setdefault(str(stamp.get("name", "?")), []).append(str(stamp.get("model")))
        if not found and self.config.get("model"):
            found["*"] = [str(self.config["model"])]
        return found

    def _first_record(self) -> Json | None:
        """The first line's record (read up to its newline only; kept until the file
        is replaced), or None."""
        found = self.file(EPISODES)
        if found is None:
            return None
        try:
            with found.open("rb") as f:
                inode = os.fstat(f.fileno()).st_ino
                if self._first is not None and self._first[0] == inode:
                    return self._first[1]
                line = f.readline(FIRST_LINE_MAX)
        except OSError:
            return None
        record = parse_record(line) if line.endswith(b"\n") else None
        if record is not None:
            self._first = (inode, record)
        return record

    def counts(self) -> dict[str, Any]:
        """Episodes, ok, failed and per-agent means: from ``summary.json`` once the run
        ended (its bootstrap intervals), else live from the episodes read so far (a
        normal-approximation interval, ``interval: normal``)."""
        if self.summary_file is not None and self.state != RUNNING:
            s = as_dict(self.summary_file)
            agents = {
                name: {k: as_dict(v).get(k) for k in ("traces", "reward_mean", "reward_ci95")}
                for name, v in as_dict(s.get("agents")).items()
            }
            return {
                "episodes": s.get("episodes"),
                "ok": s.get("ok"),
                "failed": s.get("failed"),
                "failed_by_cause": as_dict(s.get("failed_by_cause")),
                "agents": agents,
                "interval": "bootstrap",
                "complete": True,
            }
        t = self.tally
        return {
            "episodes": t.episodes,
            "ok": t.ok,
            "failed": t.failed,
            "failed_by_cause": dict(t.causes.most_common()),
            "agents": t.agents(),
            "interval": "normal",
            "complete": self.caught_up,
        }

    def row(self) -> dict[str, Any]:
        """The run as a row of ``/api/runs``."""
        return {
            "id": self.id,
            "path": str(self.path),
            "env": self.env,
            "models": self.models(),
            "state": self.state,
            "planned": self.planned,
            "started": self.started,
            "duration_s": self.duration_s,
            "lines": len(self.index),
            "read": self.scanned,
            **self.counts(),
        }

    @property
    def drawn(self) -> EnvParts | None:
        """The env's own figures and sections if drawn for the file as it is now."""
        own = self._own
        return own[1] if own is not None and own[0] == self._file_key() else None

    def _file_key(self) -> tuple[int, int]:
        return (self.index.generation, self.index.end)

    async def env_parts(self) -> EnvParts:
        """The env's own figures and sections (``_report.env_parts``: its report hooks,
        the env built from ``config.toml``), drawn in a thread by a pass of the env's
        own over ``episodes.jsonl``, once per state of the file. For a run that ended:
        a running one would be drawn again at every episode."""
        async with self._drawing:
            key = self._file_key()
            if self._own is None or self._own[0] != key:
                path = self.file(EPISODES)
                config = dict(self.config)
                parts = EnvParts()
                if path is not None:
                    env, notes = await self.built_env()
                    parts.notes += notes
                    if env is not None:
                        drawn = await trio.to_thread.run_sync(lambda: env_parts(path, config, env))
                        parts.figures, parts.sections = drawn.figures, drawn.sections
                        parts.notes += drawn.notes
                self._own = (key, parts)
            return self._own[1]

    async def built_env(self) -> tuple[Env | None, list[str]]:
        """The env ``config.toml`` names, built once (in a thread) for as long as the
        file says the same (``_report.env_parts.env_from``): None when it draws
        nothing of its own or cannot be built here (the notes say why)."""
        async with self._building:
            if self._env is None or self._env[0] != self.config_text:
                text, config = self.config_text, dict(self.config)
                env, notes = await trio.to_thread.run_sync(lambda: env_from(config))
                self._env = (text, env, notes)
            return self._env[1], self._env[2]

    async def episode_parts(self, record: Json) -> EnvParts:
        """The env's own sections drawn over one episode (``record``), for its page."""
        env, notes = await self.built_env()
        if env is None:
            return EnvParts(notes=list(notes))
        return await trio.to_thread.run_sync(lambda: episode_parts(record, env, self.env))

    async def summary(self) -> Json:
        """``summary.json`` of a finished run; otherwise the summary of the episodes
        read so far (its bootstrap intervals computed in a thread, cached until more
        episodes are read)."""
        if self.summary_file is not None and self.state != RUNNING:
            return self.summary_file
        cached = self._summary_cache
        if cached is not None and (
            cached[0] == self.scanned or time.monotonic() < self._summary_due
        ):
            return cached[1]
        async with self.reading:  # the summarizer does not change while it is read
            summarizer, scanned = self.scan.summary, self.scanned
            rollouts = self.config.get("rollouts")
            summarizer.rollouts = rollouts if isinstance(rollouts, int) else None
            if summarizer.rollouts is None:
                summarizer.rollouts = 1 + self.scan.max_rollout
            began = time.monotonic()
            result: Json = await trio.to_thread.run_sync(summarizer.result)
            took = time.monotonic() - began
        self._summary_cache = (scanned, result)
        # the intervals cost ~0.2 s per 1,000 tasks: on a large live run, recomputed
        # at most every 10x what they took (never more than 10% of a core)
        self._summary_due = time.monotonic() + 10 * took
        return result


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
