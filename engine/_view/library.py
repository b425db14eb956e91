"""Every run directory under the folders given to ``taketurns view``, kept current.

A run directory is a folder holding ``episodes.jsonl`` or ``config.toml``: a folder
given, or one up to ``DEPTH`` levels below it. Its id (its name in URLs, one path
segment) is its path relative to the folder given, parts joined by ``~`` (the
folder's name first when several are given); only ids found by ``discover`` are ever served, and a
folder or file whose real path (symlinks resolved) leaves the given folder is
neither listed nor read, so no URL reaches anything outside the given folders.

``watch`` (one task for the whole server) looks for new runs, refreshes each run's
state and reads what its ``episodes.jsonl`` grew by, then wakes whoever waits on
``changed`` (the live pages' event streams).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import trio

from taketurns._view.run import CONFIG, EPISODES, RunView, inside
from taketurns._view.writer import held_locks

__all__ = ["Library"]

DEPTH = 3
SEP = "~"
TICK_S = 0.5  # how often running runs are read
DISCOVER_S = 2.0  # how often the folders are searched for new runs
BUDGET_S = 0.25  # parsing time per run per tick (a large run catches up over ticks)


class Library:
    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.runs: dict[str, RunView] = {}
        self.version = 0
        self._changed = trio.Event()
        self._drawing: set[str] = set()  # runs whose env parts are queued or drawn now
        self._draw_send, self._draw_receive = trio.open_memory_channel[RunView](math.inf)

    # -- finding runs -----------------------------------------------------------------

    def discover(self) -> None:
        """Add the run directories not seen yet; drop those that disappeared."""
        seen = set()
        for i, root in enumerate(self.roots):
            for path in _run_dirs(root, DEPTH):
                parts = path.relative_to(root).parts or (root.name,)
                if len(self.roots) > 1 and path != root:
                    parts = (root.name, *parts)
                run_id = SEP.join(parts)
                while run_id in seen or (run_id in self.runs and self.runs[run_id].path != path):
                    run_id = f"{run_id}~{i + 2}"
                seen.add(run_id)
                if run_id not in self.runs:
                    self.runs[run_id] = RunView(run_id, path, root)
        for gone in set(self.runs) - seen:
            del self.runs[gone]

    def get(self, run_id: str) -> RunView | None:
        """The run of that id, or None: ids are looked up, never joined onto a path."""
        return self.runs.get(run_id)

    def ordered(self) -> list[RunView]:
        """Newest first."""
        return sorted(self.runs.values(), key=lambda r: (-(r.started or 0.0), r.id))

    # -- keeping them current ---------------------------------------------------------

    def refresh(self) -> None:
        """Each run's state and files (cheap: a few ``stat`` calls per run)."""
        locks = held_locks()
        for run in self.runs.values():
            run.refresh_meta(locks)

    async def read(self, budget_s: float = BUDGET_S) -> bool:
        """Read what each followed run's episodes grew by (``RunView.follow``); True
        when some run has more to read than the budget allowed."""
        behind = False
        for run in list(self.runs.values()):
            if run.followed:
                behind |= await run.follow(budget_s)
        return behind

    def announce(self) -> None:
        """Wake every ``wait_changed`` if any run changed since the last call."""
        version = sum(r.version for r in self.runs.values()) + len(self.runs)
        if version != self.version:
            self.version = version
            old, self._changed = self._changed, trio.Event()
            old.set()

    @property
    def changed(self) -> trio.Event:
        """Set at the next change: take it before reading what to send, then wait."""
        return self._changed

    def ask_drawing(self, run: RunView) -> None:
        """Have ``run``'s env parts drawn (``RunView.env_parts``) in the background, once:
        the env's report hooks read the whole file again, which may take minutes."""
        if run.id not in self._drawing:
            self._drawing.add(run.id)
            self._draw_send.send_nowait(run)

    async def _draw(self) -> None:
        async for run in self._draw_receive:  # one at a time: each is a pass of its own
            try:
                await run.env_parts()
            finally:
                self._drawing.discard(run.id)
                run.version += 1

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the library current until cancelled (see the module docstring); env
        parts asked for (``ask_drawing``) are drawn meanwhile."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._draw)
            await nursery.start(self._watch)
            task_status.started()

    async def _watch(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.discover()
        self.refresh()
        task_status.started()
        searched = time.monotonic()
        while True:
            if time.monotonic() - searched >= DISCOVER_S:
                self.discover()
                searched = time.monotonic()
            self.refresh()
            behind = await self.read()
            self.announce()
            # a run still being caught up on is read on at once (the reading itself
            # checkpoints); otherwise the folders are looked at again in TICK_S
            await trio.sleep(0 if behind else TICK_S)


def _run_dirs(root: Path, depth: int, folder: Path | None = None) -> Iterator[Path]:
    """Run directories at or under ``folder`` (default ``root``, resolved), never
    following a symlink out of ``root``."""
    folder = root if folder is None else folder
    if (folder / EPISODES).is_file() or (folder / CONFIG).is_file():
        yield folder
        return
    if depth <= 0:
        return
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        path = Path(entry.path)
        if entry.is_symlink():
            if not inside(root, path):
                continue
            path = path.resolve()
        yield from _run_dirs(root, depth - 1, path)
