"""A signal at any moment of a command is one line, never a traceback.

While an eval runs, its own watcher turns SIGINT/SIGTERM/SIGHUP into a clean stop
(``taketurns._runner``). Outside that window (the config loading, the preflight, the
summary and report after the episodes) Python raises ``KeyboardInterrupt`` wherever
the process is, possibly inside trio's exception groups: ``quiet_interrupts`` turns
it into one line and exit code 130.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

from taketurns._startup import started

__all__ = ["INTERRUPTED", "is_interrupt", "quiet_interrupts"]

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
            return main(*args, **kwargs)
        except BaseException as exc:
            if not is_interrupt(exc):
                raise
            print(INTERRUPTED, file=sys.stderr, flush=True)
            return 130

    return guarded
