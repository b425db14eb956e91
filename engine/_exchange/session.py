"""``ChatSession``: the exchange. Whoever calls ``turn(message)`` is the user.

Each ``turn()`` runs exactly one harness segment under the session's lock (a
``trio.Lock``: concurrent callers are served FIFO and segments never interleave). A
``turn()`` or ``close()`` from inside the session's own running segment (a tool calling
back into its session, in the segment's task or a task it spawned) is refused with
``SessionError``: it could only wait for itself.
``close()`` runs finalize and scoring exactly once, every wait of theirs in one shielded
cancel scope bounded by ``timeouts.scoring_s`` (entered at the first wait: what runs
before it cannot be interrupted anyway), then hands the trace to its owner, whatever
the scorers are and however the close came about. Leaving ``async with
agent.chat(task)`` closes the session however the block is left.
"""

from __future__ import annotations

import contextvars
import enum
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

import attrs
import trio

from taketurns._errors import (
    ModelEndpointError,
    RolloutStopped,
    SessionClosed,
    SessionError,
    SessionOver,
    TurnError,
)
from taketurns._exchange.harness import Harness, Rollout, takes_text
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.task import Task
from taketurns._exchange.trace import ErrorInfo, Trace
from taketurns._models.messages import Message, SystemMessage, UserMessage, last_text, text_of

if TYPE_CHECKING:
    from taketurns._config.options import Timeouts

__all__ = ["ChatSession", "Reply", "SessionState"]

UserInput = str | Message | Sequence[Message]


@attrs.frozen
class Reply:
    """What one turn produced. ``text`` is the last assistant text of the segment;
    ``messages`` its assistant and tool messages in order. ``stopped`` means the run
    ended instead of answering; ``stop_condition`` says why."""

    text: str
    messages: tuple[Message, ...] = ()
    stopped: bool = False
    stop_condition: str | None = None


class SessionState(enum.Enum):
    FRESH = "fresh"  # opened, no turn taken yet
    READY = "ready"  # waiting for the user's next message
    OVER = "over"  # the run ended instead of answering; close() still owed
    CLOSED = "closed"


def _as_messages(message: UserInput) -> list[Message]:
    if isinstance(message, str):
        return [UserMessage(message)]
    if isinstance(message, SystemMessage | UserMessage) or hasattr(message, "role"):
        return [message]  # type: ignore[list-item]
    return list(message)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions in ``exc``, exception groups flattened."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _condition_of(exc: Exception) -> str | None:
    """The stop condition a segment's error means: a refusal's own condition, a model
    endpoint failure, or None (a harness failure)."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, RolloutStopped):
            return leaf.stop_condition
    if any(isinstance(leaf, ModelEndpointError) for leaf in leaves):
        return "model_error"
    return None


# The sessions whose segment is running in this context: set around each segment, so
# the segment's own task and every task it spawns (trio copies the context) see it.
_RUNNING: contextvars.ContextVar[tuple[ChatSession, ...]] = contextvars.ContextVar(
    "taketurns_running_segments", default=()
)


class ChatSession:
    """Created by ``Agent.chat``; not constructed directly.

    ``turn`` and ``close`` are checkpoints on every path. ``turn`` raises ``TurnError``
    (a ValueError) for the wrong opening, ``SessionOver`` after the run ended,
    ``SessionClosed`` after close, and both raise ``SessionError`` when called from
    inside this session's own running segment; everything that goes wrong inside the
    segment is recorded on the trace and reported as ``Reply(stopped=True)``."""

    __slots__ = (
        "_close_reason",
        "_closed",
        "_closing",
        "_done",
        "_finalizes",
        "_lock",
        "_on_close",
        "_segment_scope",
        "_segments",
        "_state",
        "_trace",
        "cancel_reason",
        "discard",
        "harness",
        "mask_prompt",
        "rollout",
        "rubric",
        "task",
        "timeouts",
    )

    def __init__(
        self,
        task: Task,
        trace: Trace,
        rollout: Rollout,
        harness: Harness,
        rubric: Rubric,
        timeouts: Timeouts,
        *,
        mask_prompt: bool,
        on_close: Callable[[ChatSession], None] | None = None,
    ) -> None:
        self.task = task
        self.rollout = rollout
        self.harness = harness
        self.rubric = rubric
        self.timeouts = timeouts
        self.mask_prompt = mask_prompt
        self._trace = trace
        self._on_close = on_close
        self._lock = trio.Lock()
        self._state = SessionState.FRESH
        self._closing = False
        self._close_reason = "user_closed"
        self._closed: trio.Event | None = None  # made when a close() has to wait
        self._done = False  # the first close() has finished
        self._segment_scope: trio.CancelScope | None = None
        self._finalizes = type(harness).aclose is not Harness.aclose
        # a harness holding something open per segment (most don't: skip the no-op)
        self._segments = type(harness).open_segment is not Harness.open_segment
        self.discard = False  # set by Agent.run for a retried attempt: not scored
        # what a cancellation means when it closes the session (the episode knows)
        self.cancel_reason: Callable[[], str] = lambda: "cancelled"

    @property
    def trace(self) -> Trace:
        """The live trace (final once ``close()`` returned)."""
        return self._trace

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def speaks_first(self) -> bool:
        """True when the first call must be a bare ``turn()``."""
        return self.task.prompt is not None and not self.mask_prompt

    async def turn(self, message: UserInput | None = None) -> Reply:
        """Send one user turn and run one harness segment; see the class docstring.

        The lock, free, is taken at once with a cancellation point only: the turn's
        schedule point is its model call (``ModelClient.complete`` is a checkpoint),
        and a turn that made none yields explicitly, so an uncontended turn yields
        once, not twice (benchmarks/bench_exchange.py); a turn that waited for the
        lock has yielded there."""
        lock = self._lock
        try:
            lock.acquire_nowait()
            waited = False
        except (trio.WouldBlock, RuntimeError):  # RuntimeError: held by this very task
            # busy: a segment of this session may be running, and it may be the caller
            # (a free lock means none is, so there is nothing to refuse)
            if self in _RUNNING.get():
                await self._refuse("turn")
            await lock.acquire()  # FIFO behind the waiters; a checkpoint
            waited = True
        try:
            if not waited:
                await trio.lowlevel.checkpoint_if_cancelled()
            turns = len(self._trace.turns)
            try:
                if self._state is SessionState.CLOSED or self._closing:
                    raise SessionClosed()
                if self._state is SessionState.OVER:
                    raise SessionOver(self._trace.stop_condition)
                return await self._run_segment(self._accept(message))
            finally:
                if not waited and len(self._trace.turns) == turns:
                    await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            lock.release()

    async def _refuse(self, call: str) -> None:
        """``call`` came from inside this session's own running segment (its lock is
        held by the caller's own segment: waiting would never end): raise
        ``SessionError``, after a checkpoint."""
        await trio.lowlevel.checkpoint()
        raise SessionError(
            f"{call}() called from inside this session's own running segment (a tool "
            "or harness calling back into its session); the segment holds the "
            f"session, so {call}() would wait for itself. Return to the caller of "
            "turn() first, or use another session."
        )

    def _accept(self, message: UserInput | None) -> list[Message]:
        if self._state is SessionState.FRESH:
            if self.speaks_first and message is not None:
                raise TurnError(
                    "this task has a prompt, so the agent speaks first: open the session "
                    "with a bare `await session.turn()` and send messages after its reply"
                )
            if not self.speaks_first and message is None:
                why = "its prompt is masked" if self.task.prompt is not None else "it has no prompt"
                raise TurnError(
                    f"this task cannot open the session ({why}): open it with "
                    "`await session.turn(message)`"
                )
            return self._open(message)
        if message is None:
            raise TurnError("the session is open: pass the user's message, `turn(message)`")
        new = _as_messages(message)
        self._trace.messages.extend(new)
        return new

    def _open(self, message: UserInput | None) -> list[Message]:
        conversation = self._trace.messages
        if self.task.system_prompt is not None:
            conversation.append(SystemMessage(self.task.system_prompt))
            self.rollout.synthesized_system = True
        new = list(self.task.opening_messages()) if self.speaks_first else []
        if message is not None:
            new.extend(_as_messages(message))
        conversation.extend(new)
        return new

    def _deadline(self, now: float) -> tuple[float, str | None]:
        deadline, which = math.inf, None
        if self.timeouts.segment_s is not None:
            deadline, which = now + self.timeouts.segment_s, "segment_timeout"
        if self.timeouts.rollout_s is not None:
            left = now + self.timeouts.rollout_s - self._trace.timing.agent_s
            if left < deadline:
                deadline, which = left, "rollout_timeout"
        return deadline, which

    async def _run_segment(self, new: list[Message]) -> Reply:
        first = self._state is SessionState.FRESH
        self._state = SessionState.READY
        rollout, trace = self.rollout, self._trace
        boundary = rollout.boundary
        boundary.segment_start = len(trace.turns)
        condition = None if boundary._unlimited else await boundary.refusal()
        if condition is None and self._closing:
            condition = self._close_reason  # close() came in while a stop hook ran
        start = trio.current_time()
        deadline, which = self._deadline(start)
        if condition is None and deadline <= start:
            condition = which
        if condition is not None:
            return self._end(condition, ())  # the lock's acquire was the checkpoint
        rollout._start_segment()
        running = _RUNNING.set((*_RUNNING.get(), self))
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                self._segment_scope = scope
                if self._segments:
                    async with self.harness.open_segment(rollout):
                        await self._play(first, new)
                else:
                    await self._play(first, new)
        except Exception as exc:
            # a refusal or an endpoint failure is already on the trace (the boundary
            # recorded it); anything else is the harness failing
            condition = _condition_of(exc)
            if condition is None:
                trace.errors.append(ErrorInfo.of("harness", exc))
                condition = "harness_error"
        finally:
            _RUNNING.reset(running)
            self._segment_scope = None
            trace.timing.agent_s += trio.current_time() - start
        if condition is None and scope.cancelled_caught:
            # a timeout that caught a model request in flight is the endpoint's failure
            condition = self._close_reason if self._closing else boundary.timed_out(which, deadline)
        if condition is None and trace.stop_condition is not None:
            condition = trace.stop_condition  # a refusal the harness swallowed
        if condition is not None:
            return self._end(condition, rollout._segment_messages())
        messages = rollout._segment_messages()
        return Reply(last_text(messages), messages)

    async def _play(self, first: bool, new: list[Message]) -> None:
        """The harness's part of a segment: launch the first, resume the rest."""
        rollout = self.rollout
        if not first:
            await self.harness.resume(rollout, new)
        elif takes_text(type(self.harness)):
            await self.harness.launch(rollout, self._prompt_text(new))
        else:
            await self.harness.launch(rollout, rollout.relaunch_prompt())

    def _prompt_text(self, new: list[Message]) -> str:
        if isinstance(self.task.prompt, str) and self.speaks_first:
            return self.task.prompt
        return "\n".join(text_of(m.content) for m in new)

    def _end(self, condition: str, messages: tuple[Message, ...]) -> Reply:
        if self._trace.stop_condition is None:
            self._trace.stop_condition = condition
        self._state = SessionState.OVER
        return Reply(last_text(messages), messages, True, self._trace.stop_condition)

    async def close(self, *, reason: str = "user_closed") -> Trace:
        """Close the session: idempotent. If the run is still open it is stamped with
        ``reason``; a segment still running is cancelled. Finalize and scoring run
        exactly once; every wait of theirs is in one cancel scope, shielded from
        outside cancellation and bounded by ``timeouts.scoring_s`` once the lock is
        ours (rewards still unfinished then score 0.0, with an error); the trace
        joins its owner on every path. A later ``close()`` waits for the first one,
        then returns. A checkpoint: a cancellation pending when close is done is
        raised then (nothing is lost).

        The scope, and the lock, are taken before the close's first wait: at once
        when it must wait for the lock or finalize the harness, else when a scorer's
        value has to be awaited. Work before that has no checkpoint, so nothing could
        cancel it, time it out, or run beside it; a close whose scorers are all plain
        functions needs neither (a scope costs as much as a scheduler yield, the lock
        a third of that: benchmarks/bench_instructions.py)."""
        if self._lock.locked() and self in _RUNNING.get():
            await self._refuse("close")  # before anything of the close is done
        if self._closing:
            await self._wait_closed()
            return self._trace
        self._closing = True
        self._close_reason = reason
        if self._segment_scope is not None:
            self._segment_scope.cancel()
        start: float | None = None
        try:
            if self._finalizes or self._lock.locked():
                start = await self._close_waiting(reason)
            else:  # the lock is free, and stays so until this task yields
                self._mark_closed(reason)
                start = trio.current_time()
                rest = None if self.discard else self.rubric.score_now(self.task, self._trace)
                if rest is not None:
                    self._lock.acquire_nowait()  # a turn() now waits for the scoring
                    try:
                        await self._score_rest(rest, start)
                    finally:
                        self._lock.release()
        finally:
            self._joined(trio.current_time() if start is None else start)
        await trio.lowlevel.checkpoint()  # after the close is done: nothing is lost
        return self._trace

    async def _close_waiting(self, reason: str) -> float:
        """The close of a session whose lock is busy (a turn runs or waits) or whose
        harness finalizes: all of it in the shielded scope. Returns when scoring
        started (the lock was ours)."""
        with trio.CancelScope(shield=True) as scope:
            try:
                self._lock.acquire_nowait()
            except trio.WouldBlock:
                await self._lock.acquire()  # behind any turn() already waiting
            try:
                self._mark_closed(reason)
                start = trio.current_time()
                scope.deadline = start + self.timeouts.scoring_s
                if self._finalizes:
                    try:
                        await self.harness.aclose(self.rollout)
                    except Exception as exc:  # recorded; scoring still runs
                        self._trace.errors.append(ErrorInfo.of("harness", exc))
                if not self.discard:
                    await self.rubric.score(self.task, self._trace)
            finally:
                self._lock.release()
        if scope.cancelled_caught:
            self._scoring_timed_out()
        return start

    async def _score_rest(self, rest: Awaitable[None], start: float) -> None:
        """The scorers that wait (``Rubric.score_now``'s rest), in the shielded scope
        bounded by ``timeouts.scoring_s`` from ``start``."""
        with trio.CancelScope(shield=True, deadline=start + self.timeouts.scoring_s) as scope:
            await rest
        if scope.cancelled_caught:
            self._scoring_timed_out()

    async def _wait_closed(self) -> None:
        """A later close(): returns once the first one is done; a checkpoint."""
        if self._done:
            await trio.lowlevel.checkpoint()
            return
        if self._closed is None:
            self._closed = trio.Event()
        await self._closed.wait()

    def _mark_closed(self, reason: str) -> None:
        if self._trace.stop_condition is None:
            self._trace.stop_condition = reason
        self._state = SessionState.CLOSED

    def _joined(self, start: float) -> None:
        """The last step of close, whatever happened: bookkeeping, the trace joins
        its owner, and waiting ``close()`` calls are released."""
        try:
            self.rollout._remove_scratch()
            trace = self._trace
            trace.timing.scoring_s = trio.current_time() - start
            trace.timing.ended_at = _wall()
            if self._on_close is not None:
                self._on_close(self)
        finally:
            self._done = True
            if self._closed is not None:
                self._closed.set()

    def _scoring_timed_out(self) -> None:
        trace = self._trace
        for scorer in self.rubric.rewards:
            trace.rewards.setdefault(scorer.name, 0.0)
        for scorer in self.rubric.metrics:
            trace.metrics.setdefault(scorer.name, 0.0)
        trace.errors.append(
            ErrorInfo(
                "scoring",
                f"finalize and scoring took longer than {self.timeouts.scoring_s}s "
                "(timeouts.scoring_s); unfinished rewards score 0.0",
                "ScoringError",
            )
        )

    async def __aenter__(self) -> ChatSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            reason = "user_closed"
        elif all(isinstance(leaf, trio.Cancelled) for leaf in _leaves(exc)):
            reason = self.cancel_reason()
        else:
            reason = "env_error"
        await self.close(reason=reason)


def _wall() -> float:
    return time.time()
