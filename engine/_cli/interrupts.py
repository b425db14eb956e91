"""A signal at any moment of a command is one line, never a traceback.

While an eval runs, its own watcher turns SIGINT/SIGTERM/SIGHUP into a clean stop
(``taketurns._runner``). Outside that window (the config loading, the preflight, the
summary and report after the episodes) Python raises ``KeyboardInterrupt`` wherever
the process is, possibly inside trio's exception groups: ``quiet_interrupts`` turns
it into one line and exit code 130.

Once the command has its exit status, SIGINT is ignored while the process exits:
Python resets its handler to the OS default while it finalizes (which takes most of
a second after a run), and a second Ctrl-C landing there would end the process by
the signal itself (a caller would see -2, not the 130 the command chose).
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable

from taketurns._startup import is_the_command, started

__all__ = ["INTERRUPTED", "is_interrupt", "quiet_interrupts", "status_decided"]

INTERRUPTED = (
    "interrupted; episodes already written are kept (taketurns eval --resume -o DIR "
    "continues a run)"
)


def is_interrupt(exc: BaseException) -> bool:
    """``KeyboardInterrupt``, alone or as every leaf of an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_interrupt(inner) for inner in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


def quiet_interrupts(main: Callable[..., int]) -> Callable[..., int]:
    """``main`` answering an interrupt with one line on stderr and exit code 130."""

    @functools.wraps(main)
    def guarded(*args: object, **kwargs: object) -> int:
        try:
            # Python's SIGINT handler again (taketurns._startup), inside the guard: a
            # signal the moment it is back is an interrupt like any later one
            started()
            status = main(*args, **kwargs)
        except BaseException as exc:
            if not is_interrupt(exc):
                raise
            status_decided()  # before the line: a Ctrl-C once it is out changes nothing
            print(INTERRUPTED, file=sys.stderr, flush=True)
            status = 130
        status_decided()
        return status

    return guarded


def status_decided() -> None:
    """The command decided its exit status: a Ctrl-C from here on changes nothing
    (the module docstring). A command calls it before it says so (its
    ``interrupted`` line), so no Ctrl-C sent after that line can land before it.
    Idempotent; only in the command's own process, main thread."""
    if is_the_command() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
