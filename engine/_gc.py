"""Garbage-collector tuning for processes taketurns owns (the CLI's eval process and
backend workers); library code never calls it, so ``run_eval`` from a user's program
leaves the collector as the user set it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["tuned_gc"]


_lock = threading.Lock()
_depth = 0  # tuned_gc scopes open in this process
_saved: tuple[int, int, int] = (700, 10, 10)  # the thresholds found by the outermost


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Collect less while an eval runs, and restore the process's settings after.

    Why: an eval keeps thousands of sessions alive while it churns through
    short-lived objects. A young-generation collection scans every young object still
    alive, and with the default threshold (a collection every 700 allocations) nearly
    all of them are: sessions live for seconds, collections come every few
    milliseconds (half the CPU at 10,000 episodes, benchmarks/bench_scale.py). The
    engine leaves no cyclic garbage per episode (tests/test_work_counts.py), so it
    freezes what exists already and collects only every million allocations, by which
    time most young objects have died by reference counting and are never scanned.

    Reentrant and thread-safe: nested or concurrent scopes share one tuning; the
    outermost restores the thresholds it found and unfreezes. Call it only in a
    process taketurns owns (the CLI's ``eval``, a backend worker)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(_saved[0], 1_000_000), max(_saved[1], 20), max(_saved[2], 20))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
