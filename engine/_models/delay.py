"""``FixedDelay``: many concurrent sleeps of one fixed length on a single trio timer.

The built-in model's ``latency_ms`` makes every call wait the same time. ``trio.sleep``
costs about 20 µs per call under load: a cancel scope with a deadline, and a
``Cancelled`` raised into the task and caught again when it fires. Waits of one length
end in the order they began, so they can share one timer: the earliest live waiter
(the *keeper*) sleeps until its own end with ``trio.sleep_until``; when it wakes it
reschedules every waiter that is due (a plain reschedule, no exception) and hands the
timer to the first one still waiting. Under load one firing releases many waiters.
"""

from __future__ import annotations

from collections import deque

import outcome
import trio

__all__ = ["FixedDelay"]

_KEEP = object()  # the value that makes a waiting task the keeper


class _Wait:
    __slots__ = ("cancelled", "due", "task")

    def __init__(self, due: float, task: trio.lowlevel.Task) -> None:
        self.due = due
        self.task = task
        self.cancelled = False


class FixedDelay:
    """``await delay.wait()`` is ``await trio.sleep(seconds)``: a checkpoint that
    returns ``seconds`` after it began (by the run's clock, autojump included) and
    raises ``Cancelled`` if cancelled first. Usable from any number of tasks at once
    and in successive ``trio.run`` calls; ``seconds`` must be > 0."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a FixedDelay needs seconds > 0, not {seconds!r}")
        self.seconds = seconds
        self._run: trio.lowlevel.TrioToken | None = None
        self._queue: deque[_Wait] = deque()
        self._keeper: _Wait | None = None

    async def wait(self) -> None:
        token = trio.lowlevel.current_trio_token()
        if self._run is not token:  # a new run: what an old one left is dead
            self._run, self._queue, self._keeper = token, deque(), None
        me = _Wait(trio.current_time() + self.seconds, trio.lowlevel.current_task())
        self._queue.append(me)
        if self._keeper is None:
            self._keeper = me
            await self._keep(me)
            return

        def abort(_: object) -> trio.lowlevel.Abort:
            me.cancelled = True  # dropped from the queue by whoever meets it first
            return trio.lowlevel.Abort.SUCCEEDED

        if await trio.lowlevel.wait_task_rescheduled(abort) is _KEEP:
            await self._keep(me)

    async def _keep(self, me: _Wait) -> None:
        try:
            await trio.sleep_until(me.due)
            self._release_due()
        finally:
            self._hand_over()  # drops the keeper (the head), due or cancelled

    def _release_due(self) -> None:
        """Pop every wait that is due, in order, rescheduling all but the keeper (the
        caller, which returns by itself)."""
        now, queue, keeper = trio.current_time(), self._queue, self._keeper
        while queue and (queue[0].cancelled or queue[0].due <= now):
            wait = queue.popleft()
            if not wait.cancelled and wait is not keeper:
                trio.lowlevel.reschedule(wait.task, outcome.Value(None))

    def _hand_over(self) -> None:
        old, self._keeper, queue = self._keeper, None, self._queue
        while queue and (queue[0].cancelled or queue[0] is old):
            queue.popleft()
        if queue:
            self._keeper = queue[0]
            trio.lowlevel.reschedule(queue[0].task, outcome.Value(_KEEP))
