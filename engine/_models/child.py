"""An owned child process: started in a session (process group) of its own, its
output appended to a log file, and on every path stopped as a whole group and reaped.

A small stand-in for the core's process owner (one owner for every process the
engine starts): ``start_child`` / ``stop_child`` are the only two calls the model
server makes, so that switching to the owner later changes this module only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

__all__ = ["GRACE_S", "REAP_S", "kill_now", "start_child", "stop_child", "tail"]

GRACE_S = 5.0  # after SIGTERM, how long the group may take to exit before SIGKILL
REAP_S = 5.0  # after SIGKILL, how long to wait for the exit status


async def start_child(
    argv: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None
) -> trio.Process:
    """Start ``argv`` in a new session with stdin closed and stdout and stderr
    appended to ``log``. Raises ``OSError`` when it cannot be started (no such
    program, say)."""
    with log.open("ab") as out:
        return await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )


async def stop_child(process: trio.Process) -> None:
    """Stop ``process``'s whole group: SIGTERM, up to ``GRACE_S`` to exit (a server
    shuts down cleanly), then SIGKILL and up to ``REAP_S`` to reap. Shielded, so
    it finishes under cancellation too; idempotent."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            with trio.move_on_after(GRACE_S):
                await process.wait()
        # also when the leader is gone: what it started may still run in its group
        _signal_group(process.pid, signal.SIGKILL)
        with trio.move_on_after(REAP_S):
            await process.wait()


def kill_now(process: trio.Process) -> None:
    """SIGKILL ``process``'s group without waiting: for a process about to exit at
    once (a second Ctrl-C), which cannot wait for anything."""
    _signal_group(process.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, sig)


def tail(log: Path, lines: int = 12) -> str:
    """The last ``lines`` lines of ``log`` (for an error message), or ``""``."""
    try:
        with log.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
