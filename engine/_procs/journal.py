"""The temp journal: every temporary directory an eval makes for its processes (a
rollout's scratch, the interception server's socket directory) is named, as one line,
in ``<run dir>/temp.journal`` when it is made, so that a run SIGKILLed before it could
remove them (its rollouts' prompts name the cards) leaves nothing for long: the next
run in that directory (``--resume``) sweeps them before it plays.

``record`` appends (one ``O_APPEND`` write per directory: the eval's workers may share
the file); removing a directory leaves its line. ``sweep`` runs while the run
directory's lock is held, so nothing listed is still in use: it removes every listed
directory still present whose name is one the engine makes (``taketurns-*``,
``interception-*``) and empties the journal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

__all__ = ["JOURNAL", "record", "sweep"]

JOURNAL = "temp.journal"
_PREFIXES = ("taketurns-", "interception-")


def record(run_dir: str | os.PathLike[str] | None, path: str | os.PathLike[str]) -> None:
    """Name ``path`` in ``run_dir``'s journal (nothing without a run directory). A
    journal that cannot be written is skipped: the directory is still removed on
    every path but a SIGKILL."""
    if run_dir is None:
        return
    line = (os.fspath(path) + "\n").encode()
    with contextlib.suppress(OSError):
        fd = os.open(Path(run_dir) / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def sweep(run_dir: str | os.PathLike[str]) -> list[str]:
    """Remove what ``run_dir``'s journal names and is still there; empty it. Returns
    what was removed."""
    journal = Path(run_dir) / JOURNAL
    try:
        listed = journal.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    removed = []
    for line in dict.fromkeys(listed):
        path = Path(line)
        if path.is_absolute() and path.name.startswith(_PREFIXES) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(line)
    with contextlib.suppress(OSError):
        journal.unlink()
    return removed
