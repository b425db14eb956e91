"""The run directory: ``config.toml``, ``episodes.jsonl``, ``summary.json``, and the
side files a resume sets records aside into.

Safety (each a test in tests/test_rundir.py):

- **One writer.** Whoever writes a run directory holds an exclusive OS lock on its
  ``.lock`` file (``fcntl.flock``; released by the OS if the process dies). A second
  writer (a plain eval or a ``--resume``) is refused at once, naming the holder's pid.
- **Nothing lost.** Episodes are appended one JSON line each with one ``os.write`` per
  batch; a write that fails (a full disk) is cut back to where the batch began and
  raises ``OutputError``. Other files are replaced atomically (temp file + rename; the
  temp file is removed when the write fails).
- **Every pair once.** ``tidy`` (run by ``run_eval`` before it plays) sets aside what
  must not stay in ``episodes.jsonl``: damaged lines (with their line numbers) to
  ``damaged.jsonl``, cancelled episodes to ``cancelled.jsonl``, failed ones
  (``_exchange.outcome``) to ``failed.jsonl``, repeats of a pair to
  ``duplicates.jsonl``. Side files are appended and synced before the main file is
  replaced; nothing is deleted. A tidy killed at any point is undone or completed by
  the next one (``_recover``): side files are never appended twice, and no
  ``episodes.jsonl.tmp`` (nor any other temp file) is left behind.
- **Movable.** Nothing in the directory names its own path.
- **Resumes are recorded.** Each ``--resume`` appends a line to ``resumes.jsonl``
  (when, and the options it changed: ``_cli.resume``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson

from taketurns._errors import ConfigError, OutputError
from taketurns._exchange.outcome import record_cause
from taketurns._output.records import parse_record

__all__ = ["RunDir", "Tidied"]

EPISODES = "episodes.jsonl"
CONFIG = "config.toml"
SUMMARY = "summary.json"
CANCELLED = "cancelled.jsonl"
FAILED = "failed.jsonl"
DAMAGED = "damaged.jsonl"
DUPLICATES = "duplicates.jsonl"
RESUMES = "resumes.jsonl"
LOCK = ".lock"
JOURNAL = ".tidy.json"  # a tidy under way: the side files' sizes before it appended
_SIDE = {"cancelled": CANCELLED, "failed": FAILED, "duplicate": DUPLICATES}


@attrs.define
class Tidied:
    """What ``RunDir.tidy`` found: the (task idx, rollout) pairs kept, and the line
    numbers it set aside by kind."""

    pairs: set[tuple[int, int]] = attrs.field(factory=set)
    damaged: list[int] = attrs.field(factory=list)
    cancelled: list[int] = attrs.field(factory=list)
    failed: list[int] = attrs.field(factory=list)
    duplicate: list[int] = attrs.field(factory=list)

    def note(self) -> str | None:
        """One line saying what was set aside, or None when nothing was."""
        parts = []
        for kind, lines in (
            ("damaged line", self.damaged),
            ("cancelled episode", self.cancelled),
            ("failed episode", self.failed),
            ("duplicate record", self.duplicate),
        ):
            if lines:
                name = DAMAGED if kind == "damaged line" else _SIDE[kind.split()[0]]
                plural = "s" if len(lines) > 1 else ""
                parts.append(f"{len(lines)} {kind}{plural} ({_lines(lines)}) to {name}")
        if not parts:
            return None
        return f"{EPISODES}: set aside {', '.join(parts)}; their pairs run again"


def _lines(numbers: list[int], shown: int = 5) -> str:
    head = ", ".join(str(n) for n in numbers[:shown])
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line{'s' if len(numbers) > 1 else ''} {head}{more}"


def compact(record: dict[str, Any]) -> dict[str, Any]:
    """What the summary reads of a record (a resume keeps these, not whole records)."""
    return {
        "task": {"idx": record["task"]["idx"]},
        "rollout": record["rollout"],
        "ok": record.get("ok"),
        "cause": record_cause(record),
        "stop": record.get("stop"),
        "traces": [
            {
                "agent": {"name": (t.get("agent") or {}).get("name", "?")},
                "episode": {"task_idx": (t.get("episode") or {}).get("task_idx")},
                "reward": t.get("reward", 0.0),
                "rewards": t.get("rewards") or {},
                "metrics": t.get("metrics") or {},
                "stop_condition": t.get("stop_condition"),
                "errors": len(t.get("errors") or []),
                "turns": len(t.get("turns") or []),
                "usage": {"total_tokens": (t.get("usage") or {}).get("total_tokens", 0)},
            }
            for t in record.get("traces") or []
            if isinstance(t, dict)
        ],
    }


class RunDir:
    """One eval's output directory. ``prepare`` takes the lock and refuses a non-empty
    directory unless resuming or overwriting; ``open`` / ``close`` bracket the
    episode writer; ``unlock`` lets the next writer in."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._lock_fd: int | None = None

    @property
    def episodes_path(self) -> Path:
        return self.path / EPISODES

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    # -- the lock ----------------------------------------------------------------------

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    def lock(self) -> None:
        """Take the directory's exclusive lock (idempotent; creates the directory).
        Raises ``ConfigError`` naming the holder's pid when another writer has it."""
        if self._lock_fd is not None:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"-o {self.path}: cannot create the directory or its lock ({exc.strerror or exc})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"-o {self.path}: the run directory is in use by another taketurns process "
                f"(pid {holder}, which holds {self.path / LOCK}); wait for it to finish or "
                f"stop it, then continue with --resume -o {self.path}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock (the ``.lock`` file stays: removing it would race)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    # -- preparing ---------------------------------------------------------------------

    def prepare(self, *, resume: bool, overwrite: bool) -> None:
        """Lock the directory, then check it suits the run: a non-empty one needs
        ``resume`` or ``overwrite`` (which removes the previous run's files)."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"-o {self.path}: exists and is not a directory")
        if resume and not self.config_path.exists():  # refused before the lock makes it
            raise ConfigError(f"--resume: {self.path} holds no {CONFIG}; nothing to resume")
        self.lock()
        try:
            busy = any(p.name != LOCK for p in self.path.iterdir())
            if busy and not (resume or overwrite):
                raise ConfigError(
                    f"-o {self.path}: the directory is not empty; pass --resume to continue "
                    "that run or --overwrite to replace it"
                )
            if resume and not self.config_path.exists():
                raise ConfigError(f"--resume: {self.path} holds no {CONFIG}; nothing to resume")
            if overwrite and not resume:
                names = (EPISODES, SUMMARY, CONFIG, RESUMES, "report.html", DAMAGED)
                for name in names + tuple(_SIDE.values()):
                    (self.path / name).unlink(missing_ok=True)
        except BaseException:
            self.unlock()
            raise

    def finished(self) -> list[dict[str, Any]]:
        """Every record in ``episodes.jsonl`` that parses, damaged lines skipped (read
        only: ``tidy`` is what sets lines aside)."""
        return [r for _, _, r in self._scan() if r is not None]

    def _scan(self) -> Iterator[tuple[int, bytes, dict[str, Any] | None]]:
        """(line number, raw line, record or None if damaged), streamed. A torn last
        line (a crash mid-write) does not parse: damaged."""
        if not self.episodes_path.exists():
            return
        with self.episodes_path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                yield number, raw, parse_record(raw)

    def tidy(self, on_kept: Callable[[dict[str, Any]], None] | None = None) -> Tidied:
        """Set aside every line that must not stay in ``episodes.jsonl`` (see the
        module docstring); the writer calls it holding the lock. Each record kept goes
        to ``on_kept`` (the parsed record; ``compact`` keeps what the summary reads),
        streamed. Raises
        ``OutputError`` if the side files or the new main file cannot be written (the
        main file is then left as it was)."""
        self._recover()
        found = Tidied()
        aside: dict[int, str] = {}
        seen = found.pairs
        unterminated = False  # a last record without its newline: rewritten with one
        for number, raw, record in self._scan():
            unterminated = not raw.endswith(b"\n")
            if record is None:
                aside[number] = "damaged"
                continue
            cause = record_cause(record)
            pair = (record["task"]["idx"], record["rollout"])
            if cause is not None:
                aside[number] = "cancelled" if cause == "cancelled" else "failed"
            elif pair in seen:
                aside[number] = "duplicate"
            else:
                seen.add(pair)
                if on_kept is not None:
                    on_kept(record)
        for number, kind in aside.items():
            getattr(found, kind).append(number)
        if aside or unterminated:
            self._rewrite(aside)
        return found

    @property
    def _tmp(self) -> Path:
        return self.episodes_path.with_suffix(".jsonl.tmp")

    def _recover(self) -> None:
        """Finish or undo a tidy that was killed midway (idempotent; the caller holds
        the lock). The journal names each side file's size before the tidy appended
        to it and the main file it was replacing: if that file is still in place the
        appends are cut back (the next tidy appends them once); if it was replaced
        they stay. Temp files of interrupted writes are removed."""
        journal = self.path / JOURNAL
        try:
            entry = json.loads(journal.read_bytes())
        except FileNotFoundError:
            entry = None
        except (OSError, ValueError):
            entry = {}  # unreadable: nothing to undo by it
        try:
            if isinstance(entry, dict) and entry:
                self._undo(entry)
            if entry is not None:
                journal.unlink(missing_ok=True)
            for name in (self._tmp.name, JOURNAL, CONFIG, SUMMARY):
                tmp = self.path / (name if name.endswith(".tmp") else f"{name}.tmp")
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise OutputError(str(journal), str(self.path), exc) from None

    def _undo(self, entry: dict[str, Any]) -> None:
        """Cut the side files back to their sizes in ``entry`` when the main file it
        names is still the one in place (its replacement did not happen)."""
        try:
            main = os.stat(self.episodes_path).st_ino
        except FileNotFoundError:
            main = None
        sides = entry.get("sides")
        if main != entry.get("main") or not isinstance(sides, dict):
            return
        for name, size in sides.items():
            path = self.path / name
            known = name in (DAMAGED, *_SIDE.values()) and isinstance(size, int)
            if known and path.exists() and path.stat().st_size > size:
                with path.open("r+b") as f:
                    f.truncate(size)
                    os.fsync(f.fileno())

    def _journal(self, names: Iterable[str]) -> None:
        sizes = {}
        for name in names:
            path = self.path / name
            sizes[name] = path.stat().st_size if path.exists() else 0
        entry = {"main": os.stat(self.episodes_path).st_ino, "sides": sizes}
        self.replace_file(self.path / JOURNAL, json.dumps(entry).encode())

    def _rewrite(self, aside: dict[int, str]) -> None:
        side: dict[str, list[bytes]] = {}
        tmp = self._tmp
        try:
            with tmp.open("wb") as out:
                for number, raw, _ in self._scan():
                    kind = aside.get(number)
                    if kind is None:
                        out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                    elif kind == "damaged":
                        text = raw.rstrip(b"\n").decode("utf-8", "backslashreplace")
                        entry = {"line": number, "text": text}
                        side.setdefault(DAMAGED, []).append(orjson.dumps(entry) + b"\n")
                    else:
                        side.setdefault(_SIDE[kind], []).append(raw)
                out.flush()
                os.fsync(out.fileno())
            self._journal(side)
            for name, lines in side.items():
                self._append_synced(self.path / name, lines)
            os.replace(tmp, self.episodes_path)
            (self.path / JOURNAL).unlink()
        except OSError as exc:
            with contextlib.suppress(OSError, OutputError):
                self._recover()  # cuts back what was appended, if the main file stayed
            where = str(getattr(exc, "filename", None) or tmp)
            raise OutputError(where, str(self.path), exc) from None

    @staticmethod
    def _append_synced(path: Path, lines: list[bytes]) -> None:
        with path.open("ab") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())

    def set_aside_cancelled(self) -> int:
        """``tidy``, kept for callers of the earlier API: how many cancelled episodes
        were set aside."""
        return len(self.tidy().cancelled)

    # -- writing -----------------------------------------------------------------------

    def record_resume(self, changed: dict[str, Any]) -> None:
        """Append one line to ``resumes.jsonl``: when this resume started and the
        options it changed (``{path: [old, new]}``, ``_cli.resume``). Raises
        ``OutputError``."""
        entry = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": changed}
        try:
            self._append_synced(self.path / RESUMES, [orjson.dumps(entry, default=str) + b"\n"])
        except OSError as exc:
            raise OutputError(str(self.path / RESUMES), str(self.path), exc) from None

    def write_config(self, text: str) -> None:
        self.replace_file(self.config_path, text.encode())

    def replace_file(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically (temp file + rename). On an OS error
        the temp file is removed, ``path`` is as it was and ``OutputError`` is raised."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            with tmp.open("wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise OutputError(str(path), str(self.path), exc) from None

    def open(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.episodes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputError(str(self.episodes_path), str(self.path), exc) from None

    def append_lines(self, lines: Iterable[bytes]) -> None:
        """Append episode JSONL lines (``records.episode_line``, UTF-8, no newline) in
        one write (a page-cache write: microseconds, so done inline rather than through
        a thread). If it fails the file is cut back to where it was and
        ``OutputError`` is raised: a record is on disk whole or not at all."""
        fd = self._fd
        assert fd is not None, "RunDir.open() first"
        data = b"".join(line + b"\n" for line in lines)
        if not data:
            return
        written = 0
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)  # O_APPEND: at the end, which only we move (flock)
                written += n
                view = view[n:]
        except OSError as exc:
            if written:  # where this call began: found only when needed (a syscall)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            raise OutputError(str(self.episodes_path), str(self.path), exc) from None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def write_summary(self, summary: dict[str, Any]) -> None:
        text = json.dumps(summary, indent=2, default=str) + "\n"
        self.replace_file(self.summary_path, text.encode())
