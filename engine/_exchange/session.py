"""``ChatSession``: the exchange. Whoever calls ``turn(message)`` is the user.

The rules (docs/exchange.md):

- Each ``turn()`` runs exactly one harness segment under the session's lock, a
  ``trio.Lock`` always taken with ``async with``: concurrent callers are served FIFO and
  segments never interleave. ``turn()`` and ``close()`` are checkpoints on every path.
- Re-entry is refused: a ``turn()`` or ``close()`` from inside the session's own turn or
  close (its segment, a ``@stop`` hook, the harness's finalize, a scorer, or any task one
  of them spawned) raises ``SessionError`` before any lock is touched: it could only
  wait for itself.
- ``close()`` marks the session closing before anything that can raise, cancels a
  running segment, then runs finalize and every scorer, whatever its shape, exactly once
  in one ``CancelScope(shield=True)`` bounded by ``timeouts.scoring_s`` (from when the
  lock is its own), then hands the trace to its owner however the close came about. A
  plain-function scorer cannot be interrupted: it is measured, and one that returns
  after the deadline is a scoring failure (``Rubric.score``). Leaving ``async with
  agent.chat(task)`` closes the session however the block is left.
- ``turn(message)`` takes a ``str``, a message, an OpenAI-shaped dict (``{"role":
  "user", "content": "hi"}``, validated) or a sequence of messages and dicts; anything
  else raises ``TypeError`` naming the accepted shapes before the segment starts.
- A ``turn()`` cancelled from outside (its caller's scope, the episode) is rolled back:
  the conversation is left as it was before the turn (its user message and whatever
  the segment emitted are removed; a cancelled opening leaves the session fresh). The
  model calls it made stay on ``trace.turns``, its time on ``timing.agent_s``; a
  natively resuming harness's own program may have seen the message.
- How a segment ends, and the stop condition that means, is decided in one place:
  ``Segment`` (``taketurns._exchange.segment``), which owns the segment's cancel scope,
  its deadline and every way it is cut (its deadline, ``close()``, a refused call, an
  outer scope) and returns one ``Outcome``.

The session's state (``SessionState``) changes only as this table says (a hypothesis
test drives it: ``tests/test_segment.py``). Every change is made holding the lock,
but close's first step (CLOSING), which must win over a running segment::

    state     call / event                     next      (and)
    FRESH     turn() (the opening)             RUNNING   one Segment runs
    READY     turn(message)                    RUNNING   one Segment runs
    RUNNING   the segment answered             READY     Reply
    RUNNING   the segment stopped              OVER      Reply(stopped=True)
    RUNNING   cancelled from outside           FRESH     the opening rolled back
                                               / READY   a later turn rolled back
    OVER      turn(...)                        OVER      raises SessionOver
    FRESH, READY, RUNNING, OVER  close()       CLOSING   a RUNNING segment is cut
    CLOSING   turn(...)                        CLOSING   raises SessionClosed
    CLOSING   the segment ends (any way)       CLOSING   the turn returns its Reply
    CLOSING   finalize and scoring done        CLOSED    the trace joins its owner
    CLOSING   close()                          CLOSING   waits for CLOSED
    CLOSED    close()                          CLOSED    returns the trace
    CLOSED    turn(...)                        CLOSED    raises SessionClosed

A turn() refused for its message (``TypeError``, ``TurnError``) or for re-entry
(``SessionError``) changes nothing.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

import attrs
import trio

from taketurns._errors import (
    SessionClosed,
    SessionError,
    SessionOver,
    TurnError,
)
from taketurns._exchange.harness import Harness, Rollout
from taketurns._exchange.holding import HOLDING as _HOLDING
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.segment import Segment, leaves
from taketurns._exchange.task import Task
from taketurns._exchange.trace import ErrorInfo, Trace
from taketurns._models.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
    last_text,
    text_of,
)
from taketurns._models.wire import from_wire

if TYPE_CHECKING:
    from taketurns._config.options import Timeouts

__all__ = ["ChatSession", "Reply", "SessionState"]

UserInput = str | Message | Mapping[str, object] | Sequence[Message | Mapping[str, object]]

_MESSAGES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)
_ACCEPTED = (
    "a str, a message (taketurns.UserMessage, ...), an OpenAI-shaped dict such as "
    '{"role": "user", "content": "hi"}, or a list of messages and such dicts'
)


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
    """Where a session is in its life (the transition table is the module docstring's)."""

    FRESH = "fresh"  # opened, no turn taken yet
    READY = "ready"  # waiting for the user's next message
    RUNNING = "running"  # a segment runs (its turn() holds the lock)
    OVER = "over"  # the run ended instead of answering; close() still owed
    CLOSING = "closing"  # close() began: finalize and scoring run (or wait for the lock)
    CLOSED = "closed"  # closed: the trace is final and has joined its owner


def _as_messages(message: object) -> list[Message]:
    """The user's turn as messages; ``TypeError`` naming the accepted shapes for
    anything else, ``TurnError`` (a ValueError) naming the field of a malformed dict."""
    if isinstance(message, str):
        return [UserMessage(message)]
    if isinstance(message, _MESSAGES):
        return [message]
    if isinstance(message, Mapping):
        return [_from_dict(message, "turn(message)")]
    if isinstance(message, Sequence):
        out: list[Message] = []
        for i, item in enumerate(message):
            if isinstance(item, _MESSAGES):
                out.append(item)
            elif isinstance(item, Mapping):
                out.append(_from_dict(item, f"turn(message)[{i}]"))
            else:
                raise TypeError(
                    f"turn(message)[{i}] is a {type(item).__name__}; a list passed to "
                    f"turn() holds messages or OpenAI-shaped dicts. turn() accepts {_ACCEPTED}"
                )
        if not out:
            raise TurnError("turn(message) got an empty list: send at least one message")
        return out
    raise TypeError(f"turn(message) got a {type(message).__name__}; it accepts {_ACCEPTED}")


def _from_dict(raw: Mapping[str, object], where: str) -> Message:
    try:
        return from_wire(dict(raw), where)
    except ValueError as exc:
        raise TurnError(
            f"{exc}: a dict passed to turn() is an OpenAI chat message, such as "
            '{"role": "user", "content": "hi"}'
        ) from None


class ChatSession:
    """Created by ``Agent.chat``; not constructed directly. The rules are the module
    docstring's.

    ``turn`` and ``close`` are checkpoints on every path. ``turn`` raises ``TypeError``
    for a message of the wrong shape, ``TurnError`` (a ValueError) for the wrong
    opening or a malformed message dict, ``SessionOver`` after the run ended,
    ``SessionClosed`` after close, and both raise ``SessionError`` when called from
    inside this session's own turn or close; everything that goes wrong inside the
    segment is recorded on the trace and reported as ``Reply(stopped=True)``."""

    __slots__ = (
        "_closed",
        "_lock",
        "_on_close",
        "_segment",
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
        self._lock = trio.Lock()  # every state change below is made holding it, but close's first
        self._state = SessionState.FRESH
        self._segment: Segment | None = None  # the running segment (state RUNNING)
        self._closed: trio.Event | None = None  # made when a close() has to wait for CLOSED
        self.discard = False  # set by Agent.run for a retried attempt: not scored
        # what a cancellation means when it closes the session (the episode knows; it
        # is given the session, so it need not hold one: no reference cycle)
        self.cancel_reason: Callable[[ChatSession], str] = lambda session: "cancelled"

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
        """Send one user turn and run one harness segment; see the class docstring."""
        held = _HOLDING.get()  # this task's: unchanged while it waits for the lock
        if self in held:
            await self._refuse("turn")
        async with self._lock:  # FIFO behind the waiters; a checkpoint, taken or not
            holding = _HOLDING.set((*held, self))
            try:
                state = self._state
                if state is SessionState.CLOSING or state is SessionState.CLOSED:
                    raise SessionClosed()
                if state is SessionState.OVER:
                    raise SessionOver(self._trace.stop_condition)
                return await self._take_turn(message)
            finally:
                _HOLDING.reset(holding)

    async def _refuse(self, call: str) -> None:
        """``call`` came from inside this session's own turn or close (the session is
        held by the caller itself: waiting would never end): raise ``SessionError``,
        after a checkpoint."""
        await trio.lowlevel.checkpoint()
        raise SessionError(
            f"{call}() called from inside this session's own running segment, @stop "
            "hook, finalize or scorer (or a task one of them spawned); that code holds "
            f"the session, so {call}() would wait for itself. Return to the caller of "
            "turn() first, or use another session."
        )

    async def _take_turn(self, message: UserInput | None) -> Reply:
        """FRESH/READY -> RUNNING: accept the user's message, run one ``Segment``, and
        move to READY (answered) or OVER (stopped), unless a close() came in (CLOSING
        stays). A turn cancelled from outside is rolled back to where it was."""
        rollout = self.rollout
        first = self._state is SessionState.FRESH
        before = len(self._trace.messages)
        new = self._accept(message)
        text = self._prompt_text(new) if first and self.harness.takes_text else None
        self._segment = segment = Segment(self.harness, rollout, self.timeouts)
        self._state = SessionState.RUNNING
        try:
            outcome = await segment.run(first, new, text)
        except BaseException:  # cancelled from outside (the segment decides the rest)
            del self._trace.messages[before:]
            rollout.start_segment()
            if first:
                rollout.synthesized_system = False
            if self._state is SessionState.RUNNING:
                self._state = SessionState.FRESH if first else SessionState.READY
            raise
        finally:
            self._segment = None
        messages, condition = outcome.messages, outcome.stop_condition
        if condition is None:
            if self._state is SessionState.RUNNING:
                self._state = SessionState.READY
            return Reply(last_text(messages), messages)
        if self._state is SessionState.RUNNING:
            self._state = SessionState.OVER
        return Reply(last_text(messages), messages, True, condition)

    def _accept(self, message: UserInput | None) -> list[Message]:
        """The new messages, appended to the conversation (nothing appended when the
        message is refused)."""
        given = None if message is None else _as_messages(message)
        if self._state is SessionState.FRESH:
            if self.speaks_first and given is not None:
                raise TurnError(
                    "this task has a prompt, so the agent speaks first: open the session "
                    "with a bare `await session.turn()` and send messages after its reply"
                )
            if not self.speaks_first and given is None:
                why = "its prompt is masked" if self.task.prompt is not None else "it has no prompt"
                raise TurnError(
                    f"this task cannot open the session ({why}): open it with "
                    "`await session.turn(message)`"
                )
            return self._open(given)
        if given is None:
            raise TurnError("the session is open: pass the user's message, `turn(message)`")
        self._trace.messages.extend(given)
        return given

    def _open(self, given: list[Message] | None) -> list[Message]:
        conversation = self._trace.messages
        if self.task.system_prompt is not None:
            conversation.append(SystemMessage(self.task.system_prompt))
            self.rollout.synthesized_system = True
        new = list(self.task.opening_messages()) if self.speaks_first else []
        if given is not None:
            new.extend(given)
        conversation.extend(new)
        return new

    def _prompt_text(self, new: list[Message]) -> str:
        if isinstance(self.task.prompt, str) and self.speaks_first:
            return self.task.prompt
        return "\n".join(text_of(m.content) for m in new)

    async def close(self, *, reason: str = "user_closed") -> Trace:
        """Close the session: idempotent. If the run is still open it is stamped with
        ``reason``; a segment still running is cancelled. Finalize and every scorer
        run exactly once, in one cancel scope shielded from outside cancellation and
        bounded by ``timeouts.scoring_s`` once the lock is ours (rewards unfinished
        are absent, with an error); the trace joins its owner on every path. A
        later ``close()`` waits for the first one, then returns. A checkpoint: a
        cancellation pending when close is done is raised then (nothing is lost)."""
        if self in _HOLDING.get():
            await self._refuse("close")  # before anything of the close is done
        if self._state is SessionState.CLOSING or self._state is SessionState.CLOSED:
            await self._wait_closed()
            return self._trace
        self._state = SessionState.CLOSING  # first: whatever happens next, the one close
        start = trio.current_time()
        try:
            if self._segment is not None:  # RUNNING: cut it, wherever it is
                self._segment.close(reason)
            start = await self._finalize_and_score(reason)
        finally:
            self._joined(start)
        # the lock's acquire yielded (shielded): raise a pending cancellation now that
        # the close is done (nothing is lost)
        await trio.lowlevel.checkpoint_if_cancelled()
        return self._trace

    async def _finalize_and_score(self, reason: str) -> float:
        """The one close path: the lock (behind any turn() running or waiting), then
        finalize and every scorer in one shielded scope whose deadline is set when the
        lock is ours. Returns when scoring started."""
        finished, start = False, trio.current_time()
        with trio.CancelScope(shield=True) as scope:
            async with self._lock:
                holding = _HOLDING.set((*_HOLDING.get(), self))
                try:
                    if self._trace.stop_condition is None:
                        self._trace.stop_condition = reason
                    start = trio.current_time()
                    scope.deadline = start + self.timeouts.scoring_s
                    try:
                        await self.harness.aclose(self.rollout)
                    except Exception as exc:  # recorded; scoring still runs
                        self._trace.errors.append(ErrorInfo.of("harness", exc))
                    finished = self.discard or await self.rubric.score(
                        self.task, self._trace, deadline=scope.deadline
                    )
                finally:
                    _HOLDING.reset(holding)
        if not finished:  # cut off (cancelled at the deadline, or measured past it)
            self._scoring_timed_out()
        return start

    async def _wait_closed(self) -> None:
        """A later close(): returns once the first one is done; a checkpoint."""
        if self._state is SessionState.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        if self._closed is None:
            self._closed = trio.Event()
        await self._closed.wait()

    def _joined(self, start: float) -> None:
        """The last step of close, whatever happened: CLOSING -> CLOSED, bookkeeping,
        the trace joins its owner, and waiting ``close()`` calls are released."""
        self._state = SessionState.CLOSED
        try:
            self.rollout.remove_scratch()
            trace = self._trace
            trace.timing.scoring_s = trio.current_time() - start
            trace.timing.ended_at = _wall()
            if self._on_close is not None:
                self._on_close(self)
        finally:
            if self._closed is not None:
                self._closed.set()

    def _scoring_timed_out(self) -> None:
        self.rubric.timed_out(self._trace, self.timeouts.scoring_s)

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
        elif all(isinstance(leaf, trio.Cancelled) for leaf in leaves(exc)):
            reason = self.cancel_reason(self)
        else:
            reason = "env_error"
        await self.close(reason=reason)


def _wall() -> float:
    return time.time()
