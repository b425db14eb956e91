"""``Segment``: one harness segment, from the user's message until the agent yields
back, as one object that owns its whole life and returns one ``Outcome``.

A segment owns its cancel scope from its first await (the ``@stop`` hooks checked
before launch run inside it, so ``close()`` reaches a turn stuck in a hook), the
harness's ``open_segment`` (a served harness's endpoint gate: open only while the
segment runs), its deadline and every way it can end. ``run`` decides the outcome in
one place (``_decide``), by these rules, first match wins:

=====================================  =============================================
how it ended                           stop condition (and what else is recorded)
=====================================  =============================================
an outer scope cancelled it (the       none: ``run`` raises ``Cancelled`` and the
caller's ``move_on_after``, the        session rolls the turn back; an error the
episode's timeout)                     harness's cleanup raised meanwhile is kept as a
                                       ``cancelled`` error, never a harness failure
refused before launch (a limit, a      that condition; the harness never launched
``@stop`` hook), ``close()`` while
a hook ran, or no time left
``RolloutStopped`` raised (the         its condition; a ``BaseException``, as trio's
boundary refused a call; anywhere      ``Cancelled``: no ``except Exception`` in the
in a group)                            harness swallows it
a model endpoint failure raised        ``model_error`` (the boundary recorded it)
``close()`` cut it                     the close's reason (``user_closed``, ...)
its own deadline cut it                ``segment_timeout``/``rollout_timeout``, or
                                       ``model_error`` when a model request was in
                                       flight (``ModelBoundary.timed_out``)
any other error                        ``harness_error`` (a ``harness`` error); when
                                       the segment was being cut (the two rows above)
                                       the cut's condition, the error kept as a
                                       ``cancelled``/``timeout`` error
returned, the trace stamped by a       the stamped condition (a program's call the
refusal                                interception server refused)
returned                               none: the agent answered
=====================================  =============================================

Anything that is neither an ``Exception``, ``RolloutStopped`` nor ``Cancelled``
(``KeyboardInterrupt``, ``SystemExit``) leaves ``run`` as it came.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from taketurns._errors import ModelEndpointError, RolloutStopped
from taketurns._exchange.harness import Harness, Rollout
from taketurns._exchange.trace import ErrorInfo
from taketurns._models.messages import Message

if TYPE_CHECKING:
    from taketurns._config.options import Timeouts

__all__ = ["Outcome", "Segment", "leaves"]


@attrs.frozen
class Outcome:
    """What one segment came to: ``stop_condition`` (None: the agent answered; else
    the trace's stop condition), the ``messages`` it emitted, in order, and the
    ``errors`` it recorded on the trace (beside any the model boundary recorded)."""

    stop_condition: str | None
    messages: tuple[Message, ...] = ()
    errors: tuple[ErrorInfo, ...] = ()


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions in ``exc``, exception groups flattened."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def _raised_condition(leaves: Sequence[BaseException]) -> str | None:
    """The stop condition a segment's error means: a ``RolloutStopped``'s own, a model
    endpoint failure's, or None (the harness failing)."""
    for leaf in leaves:
        if isinstance(leaf, RolloutStopped):
            return leaf.stop_condition
    if any(isinstance(leaf, ModelEndpointError) for leaf in leaves):
        return "model_error"
    return None


class Segment:
    """One segment of one session (created by ``ChatSession.turn`` under its lock).
    ``run`` once; ``close(reason)`` may come at any time, from any task, before or
    during ``run``. The rules are the module docstring's."""

    __slots__ = ("_closed_by", "_scope", "harness", "rollout", "timeouts")

    def __init__(self, harness: Harness, rollout: Rollout, timeouts: Timeouts) -> None:
        self.harness = harness
        self.rollout = rollout
        self.timeouts = timeouts
        self._scope = trio.CancelScope()  # made now: close() may cut it before run enters it
        self._closed_by: str | None = None

    def close(self, reason: str) -> None:
        """The session is closing: cut the segment wherever it is; it ends ``reason``."""
        if self._closed_by is None:
            self._closed_by = reason
        self._scope.cancel()

    def _deadline(self, now: float) -> tuple[float, str | None]:
        timeouts = self.timeouts
        deadline, which = math.inf, None
        if timeouts.segment_s is not None:
            deadline, which = now + timeouts.segment_s, "segment_timeout"
        if timeouts.rollout_s is not None:
            left = now + timeouts.rollout_s - self.rollout.trace.timing.agent_s
            if left < deadline:
                deadline, which = left, "rollout_timeout"
        return deadline, which

    async def run(self, first: bool, new: Sequence[Message], text: str | None) -> Outcome:
        """Run the segment: ``launch`` (``first``; on ``text`` when the harness takes
        text, else on the conversation) or ``resume`` on ``new``. Returns the outcome;
        raises ``Cancelled`` when an outer scope cancelled it."""
        rollout, scope = self.rollout, self._scope
        trace, boundary = rollout.trace, rollout.boundary
        boundary.segment_start = len(trace.turns)
        condition: str | None = None
        start = deadline = math.nan  # start stays nan unless the harness was launched
        which: str | None = None
        error: BaseException | None = None
        try:
            with scope:
                condition = None if boundary.unlimited else await boundary.refusal()
                if condition is None:
                    condition = self._closed_by  # close() came in while a stop hook ran
                if condition is None:
                    now = trio.current_time()
                    deadline, which = self._deadline(now)
                    if deadline <= now:
                        condition = which
                    else:
                        if deadline != math.inf:  # the scope's is inf already: setting
                            scope.deadline = deadline  # it costs a quarter of a scope
                        start = now
                        rollout.start_segment()
                        async with self.harness.open_segment(rollout):
                            await self._launch_or_resume(first, new, text)
        except BaseException as exc:  # decided below; what is not ours is raised there
            error = exc
        if start != start:  # never launched (start is nan)
            if error is not None:
                raise error  # cancelled from outside while a stop hook ran
            # a refusal, no time left, or a close (it may have cut a stop hook)
            return self._finish(condition or self._closed_by, (), ())
        trace.timing.agent_s += trio.current_time() - start
        return await self._decide(error, which, deadline)

    async def _launch_or_resume(
        self, first: bool, new: Sequence[Message], text: str | None
    ) -> None:
        harness, rollout = self.harness, self.rollout
        if not first:
            await harness.resume(rollout, new)
        elif text is not None:
            await harness.launch(rollout, text)
        else:
            await harness.launch(rollout, rollout.relaunch_prompt())

    async def _decide(self, error: BaseException | None, which: str | None, when: float) -> Outcome:
        """The one place a launched segment's outcome is decided (module docstring)."""
        messages = self.rollout.segment_messages()
        scope, trace = self._scope, self.rollout.trace
        if error is None:
            if scope.cancelled_caught:
                return self._finish(self._cut(which, when), messages, ())
            return self._finish(trace.stop_condition, messages, ())
        found = list(leaves(error))
        if not all(isinstance(leaf, Exception | RolloutStopped | trio.Cancelled) for leaf in found):
            raise error  # KeyboardInterrupt, SystemExit, ...: not the segment's to decide
        if trio.current_effective_deadline() == -math.inf:  # an outer scope cancelled us
            failed = [leaf for leaf in found if isinstance(leaf, Exception)]
            if not failed:
                raise error  # the outer cancellation itself: the session rolls back
            # the harness's cleanup raised meanwhile: kept, never a harness failure
            trace.errors.append(ErrorInfo.of("cancelled", failed[0] if len(failed) == 1 else error))
            await trio.lowlevel.checkpoint()  # raises that cancellation, not the cleanup's error
        condition = _raised_condition(found)
        if condition is not None:
            return self._finish(condition, messages, ())
        if scope.cancel_called:  # cut off, and its cleanup raised: the cut decides
            kind = "timeout" if self._closed_by is None else "cancelled"
            return self._finish(self._cut(which, when), messages, (ErrorInfo.of(kind, error),))
        return self._finish("harness_error", messages, (ErrorInfo.of("harness", error),))

    def _cut(self, which: str | None, when: float) -> str | None:
        """Why the segment's own scope was cancelled: a close, or its deadline (a
        timeout that caught a model request in flight is the endpoint's)."""
        if self._closed_by is not None:
            return self._closed_by
        return self.rollout.boundary.timed_out(which, when)

    def _finish(
        self, condition: str | None, messages: tuple[Message, ...], errors: tuple[ErrorInfo, ...]
    ) -> Outcome:
        trace = self.rollout.trace
        trace.errors.extend(errors)
        if condition is None:
            return Outcome(None, messages)
        if trace.stop_condition is None:
            trace.stop_condition = condition
        return Outcome(trace.stop_condition, messages, errors)
