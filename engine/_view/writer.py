"""Whether a run directory's writer is alive, read without touching its lock.

An eval holds an exclusive ``flock`` on ``DIR/.lock`` for as long as it runs (the OS
drops it when the process dies: ``_output.rundir``). Taking even a shared lock to
test it could make a writer starting at that instant refuse the directory, so the
viewer never locks: on Linux it reads ``/proc/locks`` (the locks held, by device and
inode); elsewhere it falls back to whether the pid written in ``.lock`` is alive.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["held_locks", "writer_alive"]

PROC_LOCKS = Path("/proc/locks")


def held_locks() -> set[tuple[int, int, int]] | None:
    """(major, minor, inode) of every file an ``flock`` is held on, or None where
    ``/proc/locks`` cannot be read (not Linux)."""
    try:
        text = PROC_LOCKS.read_text()
    except OSError:
        return None
    found = set()
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 13863 fe:00:2149458 0 EOF" (a blocked waiter: "->")
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            found.add((int(major, 16), int(minor, 16), int(inode)))
        except ValueError:
            continue
    return found


def writer_alive(lock: Path, locks: set[tuple[int, int, int]] | None = None) -> bool:
    """Whether a process holds ``lock`` (a run directory's ``.lock``). ``locks``:
    ``held_locks()``, read once for many directories."""
    try:
        st = os.stat(lock)
    except OSError:
        return False
    if locks is None:
        locks = held_locks()
    if locks is not None:
        return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in locks
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
