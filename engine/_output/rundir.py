"""The run directory: ``config.toml``, ``episodes.jsonl``, ``summary.json``.

Episodes are appended one JSON line each, flushed as each finishes, so a crash
loses at most the line being written (``--resume`` drops such a torn line).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from taketurns._errors import ConfigError
from taketurns._output.records import read_episodes

__all__ = ["RunDir"]

EPISODES = "episodes.jsonl"
CONFIG = "config.toml"
SUMMARY = "summary.json"
CANCELLED = "cancelled.jsonl"


class RunDir:
    """One eval's output directory. ``prepare`` refuses a non-empty directory unless
    resuming or overwriting; ``open`` / ``close`` bracket the episode writer."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None

    @property
    def episodes_path(self) -> Path:
        return self.path / EPISODES

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    def prepare(self, *, resume: bool, overwrite: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"-o {self.path}: exists and is not a directory")
        busy = self.path.is_dir() and any(self.path.iterdir())
        if busy and not (resume or overwrite):
            raise ConfigError(
                f"-o {self.path}: the directory is not empty; pass --resume to continue "
                "that run or --overwrite to replace it"
            )
        if resume and not self.config_path.exists():
            raise ConfigError(f"--resume: {self.path} holds no {CONFIG}; nothing to resume")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"-o {self.path}: cannot create the directory ({exc.strerror or exc})"
            ) from None
        if overwrite and not resume:
            for name in (EPISODES, SUMMARY, CONFIG, CANCELLED, "report.html"):
                (self.path / name).unlink(missing_ok=True)

    def finished(self) -> list[dict[str, Any]]:
        """Episodes already on disk. A torn last line (no newline: the process died
        mid-write) is cut off the file; every complete line is kept as it is."""
        if not self.episodes_path.exists():
            return []
        data = self.episodes_path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            with self.episodes_path.open("r+b") as f:
                f.truncate(cut)
        return list(read_episodes(self.episodes_path))

    def set_aside_cancelled(self) -> int:
        """For ``--resume``: move episodes recorded as cancelled (an interrupted run's)
        from ``episodes.jsonl`` to ``cancelled.jsonl`` so their pairs run again and the
        main file keeps each pair exactly once. Nothing is deleted. Returns how many."""
        if not self.episodes_path.exists():
            return 0
        self.finished()  # cut a torn last line first
        lines = self.episodes_path.read_text(encoding="utf-8").splitlines(keepends=True)
        cancelled = [line for line in lines if json.loads(line).get("stop") == "cancelled"]
        if not cancelled:
            return 0
        with (self.path / CANCELLED).open("a", encoding="utf-8") as f:
            f.writelines(cancelled)
            f.flush()
            os.fsync(f.fileno())
        kept = [line for line in lines if json.loads(line).get("stop") != "cancelled"]
        tmp = self.episodes_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, self.episodes_path)
        return len(cancelled)

    def write_config(self, text: str) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.config_path)

    def open(self) -> None:
        self._file = self.episodes_path.open("ab")

    def append_lines(self, lines: Iterable[bytes]) -> None:
        """Write episode JSONL lines (``records.dumps_episode``, UTF-8, no newline) and
        flush them (a page-cache write: microseconds, so done inline rather than
        through a thread). A worker backend hands over what its workers serialised."""
        assert self._file is not None, "RunDir.open() first"
        file = self._file
        for line in lines:
            file.write(line)
            file.write(b"\n")
        file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write_summary(self, summary: dict[str, Any]) -> None:
        tmp = self.summary_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.summary_path)
