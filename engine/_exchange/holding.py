"""The sessions whose ``turn()`` or ``close()`` holds the session's lock in this
context: set once the lock is taken, so the holder's own task and every task it
spawns (trio copies the context) see it, and a ``turn()``/``close()`` from there is
refused instead of waiting. A server that runs a rollout's code in a task of its own
(the interception server's tool route) carries the value over from the segment
(``HOLDING.get()`` where the segment opens, ``HOLDING.set`` around the call)."""

from __future__ import annotations

import contextvars

__all__ = ["HOLDING"]

HOLDING: contextvars.ContextVar[tuple[object, ...]] = contextvars.ContextVar(
    "taketurns_holding_sessions", default=()
)
