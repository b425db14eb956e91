"""The first thing ``taketurns`` (the command) runs: a Ctrl-C while Python is still
importing the package exits with one line, not a traceback from deep in an import.

Only in a process started as the command (``taketurns ...`` or ``python -m
taketurns ...``, read from ``sys.orig_argv``), and only while Python's own SIGINT
handler is in place: a library import changes nothing. ``main`` puts Python's handler
back as it starts (``taketurns._cli.interrupts``), and from there a signal is the
command's to handle.

Before this module runs no code of the package has: a Ctrl-C while Python itself starts
(its ``site`` import, which runs the environment's ``.pth`` files, an editable
install's finder among them: tens of milliseconds, more on a loaded machine) is
Python's own, a fatal-error traceback and exit code 1.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import PurePath
from types import FrameType

__all__ = ["STARTING", "is_the_command", "quit_while_starting", "started"]

STARTING = b"interrupted while starting; nothing was run\n"


def _is_the_command(argv: list[str]) -> bool:
    """``[python, .../bin/taketurns, ...]`` or ``[python, (options,) -m, taketurns, ...]``."""
    if len(argv) > 1 and PurePath(argv[1]).name == "taketurns":
        return True
    return ("-m", "taketurns") in itertools.pairwise(argv)


def is_the_command() -> bool:
    """Whether this process was started as the command (not a library import)."""
    return _is_the_command(list(getattr(sys, "orig_argv", [])))


def quit_while_starting(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler while the command starts: one line, exit code 130."""
    os.write(2, STARTING)
    os._exit(130)


def started() -> None:
    """The command is running: Python's own SIGINT handler (``KeyboardInterrupt``)
    again, if this module had replaced it. Main thread only (a no-op elsewhere)."""
    if signal.getsignal(signal.SIGINT) is quit_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


if _is_the_command(list(getattr(sys, "orig_argv", []))) and (
    signal.getsignal(signal.SIGINT) is signal.default_int_handler
):
    signal.signal(signal.SIGINT, quit_while_starting)
