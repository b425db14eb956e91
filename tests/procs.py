"""What this process holds, read from /proc (psutil is not installed): child
processes, processes carrying a marker in their environment, open descriptors."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # the command name may hold spaces and ")"
    return fields[0], int(fields[1])


def children(pid: int | None = None) -> list[tuple[int, str]]:
    """(pid, state) of every child of ``pid`` (default: this process), zombies too."""
    parent = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None and stat[1] == parent:
                found.append((int(entry), stat[0]))
    return sorted(found)


def marked(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (zombies have none)."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ:
            found.append(int(entry))
    return found


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def scratch_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("taketurns-"))
