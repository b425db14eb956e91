"""The close, lock and checkpoint contract of ``ChatSession`` (docs/design.md "The
exchange", lines 5-9), for every scorer shape the rubric
accepts: closing is one shielded scope bounded by ``timeouts.scoring_s`` on every path;
finalize and scoring run exactly once; the trace joins its owner even when scoring is
cut off; a later ``close()`` returns at once. The lock serves callers FIFO and refuses a
re-entrant ``turn()``/``close()`` from inside the session's own segment; ``turn()`` and
``close()`` are checkpoints on every path. Virtual time, no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from scripted import CloseRecordingHarness, ToolLoopHarness, make_agent

from taketurns import (
    ChatSession,
    ModelEndpointError,
    SessionClosed,
    SessionOver,
    Task,
    Timeouts,
    Trace,
    TurnError,
    stop,
)
from taketurns.env import ModelClient, ModelRequest, ModelResponse
from taketurns.errors import SessionError
from taketurns.harness import Harness, Prompt, Rollout

TASK = Task(0, "t", prompt="hi")
SCORING_S = 0.3


async def _later(value: Any, delay: float = 0.0) -> Any:
    await trio.sleep(delay)
    return value


def _scorers(calls: list[str], delay: float) -> dict[str, Callable[..., Any]]:
    """One reward function of each shape, counting its calls; the two that can wait
    wait ``delay`` seconds first."""

    def sync_reward(task: Task, trace: Trace) -> float:
        calls.append("sync")
        return 1.0

    async def async_reward(task: Task, trace: Trace) -> float:
        calls.append("async")
        await trio.sleep(delay)
        return 1.0

    def awaitable_reward(task: Task, trace: Trace) -> Any:
        calls.append("awaitable")
        return _later(1.0, delay)  # a plain function handing back an awaitable

    def raising_reward(task: Task, trace: Trace) -> float:
        calls.append("raising")
        raise RuntimeError("scorer broke")

    def nan_reward(task: Task, trace: Trace) -> float:
        calls.append("nan")
        return math.nan

    def text_reward(task: Task, trace: Trace) -> Any:
        calls.append("text")
        return "not a number"

    return {
        "sync": sync_reward,
        "async": async_reward,
        "awaitable": awaitable_reward,
        "raising": raising_reward,
        "nan": nan_reward,
        "text": text_reward,
    }


EXPECTED = {"sync": 1.0, "async": 1.0, "awaitable": 1.0, "raising": 0.0, "nan": 0.0, "text": 0.0}
FAILING = {"raising", "nan", "text"}
WAITING = {"async", "awaitable"}


def _kept(shape: str) -> list[float]:
    """The rewards a trace keeps: none from a failed scorer (absent, not 0.0)."""
    return [] if shape in FAILING else [EXPECTED[shape]]


def _agent(shape: str, calls: list[str], joined: list[Trace], *, delay: float = 0.0) -> Any:
    fn = _scorers(calls, delay)[shape]
    return make_agent(
        rewards=[fn],
        timeouts=Timeouts(scoring_s=SCORING_S),
        on_close=joined.append,
    )


def _scoring_errors(trace: Trace) -> list[str]:
    return [e.message for e in trace.errors if e.kind == "scoring"]


@pytest.mark.parametrize("shape", sorted(EXPECTED))
async def test_normal_close_scores_every_shape_once(shape: str, autojump_clock: Any) -> None:
    calls: list[str] = []
    joined: list[Trace] = []
    async with _agent(shape, calls, joined).chat(TASK) as session:
        await session.turn()
    trace = session.trace
    assert calls == [shape]
    assert joined == [trace]
    assert trace.stop_condition == "user_closed"
    assert list(trace.rewards.values()) == _kept(shape)
    assert trace.reward == EXPECTED[shape]
    assert bool(_scoring_errors(trace)) == (shape in FAILING)
    # a later close returns at once, scores nothing again, joins nothing again
    start = trio.current_time()
    assert await session.close() is trace
    assert trio.current_time() == start
    assert calls == [shape]
    assert joined == [trace]


@pytest.mark.parametrize("shape", sorted(EXPECTED))
async def test_cancellation_still_scores_every_shape_shielded(
    shape: str, autojump_clock: Any
) -> None:
    calls: list[str] = []
    joined: list[Trace] = []
    agent = _agent(shape, calls, joined, delay=0.1)
    with trio.move_on_after(5) as outer:
        async with agent.chat(TASK) as session:
            await session.turn()
            await trio.sleep(10)  # the episode's timeout strikes here
    assert outer.cancelled_caught
    trace = session.trace
    assert trace.stop_condition == "cancelled"
    assert calls == [shape]
    assert joined == [trace]
    assert list(trace.rewards.values()) == _kept(shape)  # scored, not cut off
    start = trio.current_time()
    with trio.fail_after(1):
        assert await session.close() is trace  # the eval's leftover close: no hang
    assert trio.current_time() == start


@pytest.mark.parametrize("shape", sorted(WAITING))
async def test_scoring_timeout_bounds_every_waiting_shape(shape: str, autojump_clock: Any) -> None:
    calls: list[str] = []
    joined: list[Trace] = []
    session = _agent(shape, calls, joined, delay=30).chat(TASK)
    await session.turn()
    start = trio.current_time()
    trace = await session.close()
    assert trio.current_time() - start == pytest.approx(SCORING_S)
    assert calls == [shape]
    assert joined == [trace]
    assert (
        list(trace.rewards.values()) == []
    )  # a failed scorer's value is absent, not 0.0 (issue 40)
    assert any("timeouts.scoring_s" in m for m in _scoring_errors(trace))
    start = trio.current_time()
    assert await session.close() is trace
    assert trio.current_time() == start


async def test_a_cut_off_scoring_keeps_what_finished(autojump_clock: Any) -> None:
    calls: list[str] = []
    scorers = _scorers(calls, delay=30)
    joined: list[Trace] = []
    agent = make_agent(
        rewards=[scorers["sync"], scorers["awaitable"], scorers["nan"], scorers["async"]],
        timeouts=Timeouts(scoring_s=SCORING_S),
        on_close=joined.append,
    )
    async with agent.chat(TASK) as session:
        await session.turn()
    trace = session.trace
    assert joined == [trace]
    assert calls == ["sync", "awaitable"]  # scoring stopped inside the second
    assert trace.rewards == {
        "sync_reward": 1.0,  # finished before the deadline: kept; the rest: absent
    }
    assert trace.reward == 1.0


@pytest.mark.parametrize("shape", sorted(WAITING))
async def test_cancelled_close_with_a_slow_scorer_is_still_bounded(
    shape: str, autojump_clock: Any
) -> None:
    calls: list[str] = []
    joined: list[Trace] = []
    agent = _agent(shape, calls, joined, delay=30)
    start = trio.current_time()
    with trio.move_on_after(1):
        async with agent.chat(TASK) as session:
            await session.turn()
            await trio.sleep(10)
    assert trio.current_time() - start == pytest.approx(1 + SCORING_S)
    trace = session.trace
    assert joined == [trace]
    assert calls == [shape]
    assert list(trace.rewards.values()) == []  # cut off: absent, not 0.0 (issue 40)
    assert _scoring_errors(trace)
    with trio.fail_after(1):
        await session.close()


async def test_close_called_in_a_cancelled_scope_closes_then_raises(autojump_clock: Any) -> None:
    calls: list[str] = []
    joined: list[Trace] = []
    session = _agent("awaitable", calls, joined, delay=0.1).chat(TASK)
    await session.turn()
    with trio.CancelScope() as scope:
        scope.cancel()
        await session.close()  # closes and scores, then the checkpoint raises
        pytest.fail("close() must be a cancellation point")
    assert joined == [session.trace]
    assert session.trace.rewards == {"awaitable_reward": 1.0}


@pytest.mark.parametrize("shape", sorted(EXPECTED))
async def test_a_turn_during_the_close_waits_for_the_scoring_then_is_refused(
    shape: str, autojump_clock: Any
) -> None:
    # the close holds the session's lock through finalize and scoring, whatever the
    # scorer's shape: a turn() coming in meanwhile runs no segment, and is refused once
    # the close is done
    calls: list[str] = []
    joined: list[Trace] = []
    session = _agent(shape, calls, joined, delay=0.1).chat(TASK)
    await session.turn()
    refused: list[tuple[float, int]] = []

    async def late_turn() -> None:
        with pytest.raises(SessionClosed):
            await session.turn("too late")
        refused.append((trio.current_time(), len(joined)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.close)
        await trio.testing.wait_all_tasks_blocked()  # the close is done, or scoring
        await late_turn()
    waited = 0.1 if shape in WAITING else 0.0
    assert refused == [(pytest.approx(waited), 1)]
    assert joined == [session.trace]
    assert len(session.trace.turns) == 1
    assert list(session.trace.rewards.values()) == _kept(shape)


async def test_finalize_runs_exactly_once_under_concurrent_closes(autojump_clock: Any) -> None:
    harness = CloseRecordingHarness()
    joined: list[Trace] = []
    agent = make_agent(harness=harness, on_close=joined.append)
    session = agent.chat(TASK)
    await session.turn()
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(session.close)
    assert harness.closed == 1
    assert joined == [session.trace]


# --- the lock -------------------------------------------------------------------


class CallsBack(Harness):
    """A harness whose segment calls back into a session: its own (by default) or
    another, in the segment's task or in a task the segment spawns."""

    def __init__(self, call: str, *, spawned: bool = False) -> None:
        self.call = call
        self.spawned = spawned
        self.target: ChatSession | None = None
        self.errors: list[BaseException] = []

    async def _call_back(self) -> None:
        assert self.target is not None
        try:
            if self.call == "turn":
                await self.target.turn("from inside")
            else:
                await self.target.close()
        except SessionError as exc:
            self.errors.append(exc)

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        response = await rollout.complete(prompt.wire_messages())
        rollout.emit(response.message)
        if self.spawned:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._call_back)
        else:
            await self._call_back()


@pytest.mark.parametrize("call", ["turn", "close"])
@pytest.mark.parametrize("spawned", [False, True], ids=["same-task", "child-task"])
async def test_reentry_from_inside_the_own_segment_is_refused(
    call: str, spawned: bool, autojump_clock: Any
) -> None:
    harness = CallsBack(call, spawned=spawned)
    session = make_agent(harness=harness).chat(TASK)
    harness.target = session
    with trio.fail_after(5):  # a hang would be a deadlock on the session's own lock
        reply = await session.turn()
    assert not reply.stopped
    assert len(harness.errors) == 1
    assert "inside this session's own running segment" in str(harness.errors[0])
    assert f"{call}()" in str(harness.errors[0])
    with trio.fail_after(5):
        await session.close()


async def test_a_segment_may_turn_another_session(autojump_clock: Any) -> None:
    other = make_agent(name="other").chat(Task(1, "o"))
    harness = CallsBack("turn")
    harness.target = other
    session = make_agent(harness=harness).chat(Task(2, "p"))
    await session.turn("hello")
    assert harness.errors == []
    assert len(other.trace.turns) == 1
    await session.close()
    await other.close()


async def test_waiting_callers_are_served_fifo(autojump_clock: Any) -> None:
    harness = ToolLoopHarness(sleep=1)
    session = make_agent(harness=harness).chat(Task(3, "open"))
    order: list[str] = []

    async def user(label: str) -> None:
        await session.turn(label)
        order.append(label)

    async with trio.open_nursery() as nursery:
        for label in "abcdef":
            nursery.start_soon(user, label)
            await trio.testing.wait_all_tasks_blocked()
    assert order == list("abcdef")
    assert [label for event, label in harness.events if event == "start"] == list("abcdef")
    await session.close()


# --- checkpoints ----------------------------------------------------------------


class Silent(Harness):
    """Emits nothing and makes no model call: its segment has no schedule point."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        return None


async def test_a_turn_without_a_model_call_is_still_a_checkpoint() -> None:
    session = make_agent(harness=Silent()).chat(TASK)
    with trio.testing.assert_checkpoints():
        await session.turn()
    with trio.testing.assert_checkpoints():
        await session.close()


async def test_every_refusal_of_turn_and_close_is_a_checkpoint() -> None:
    session = make_agent().chat(TASK)
    with trio.testing.assert_checkpoints(), pytest.raises(TurnError):
        await session.turn("the agent speaks first")
    await session.turn()
    with trio.testing.assert_checkpoints(), pytest.raises(TurnError):
        await session.turn()  # a bare turn on an open session
    with trio.testing.assert_checkpoints():
        await session.close()
    with trio.testing.assert_checkpoints():
        await session.close()
    with trio.testing.assert_checkpoints(), pytest.raises(SessionClosed):
        await session.turn("x")


async def test_turn_after_the_run_ended_is_a_checkpoint(autojump_clock: Any) -> None:
    from scripted import ScriptedModel

    from taketurns import ModelEndpointError

    model = ScriptedModel(ModelEndpointError("down"))
    session = make_agent(model).chat(TASK)
    reply = await session.turn()
    assert reply.stopped
    with trio.testing.assert_checkpoints(), pytest.raises(SessionOver):
        await session.turn("more")
    await session.close()


# --- re-entry from the session's own code, everywhere ----------------------------


class Reenter:
    """Calls ``call`` (``turn`` or ``close``) on ``target`` once, from wherever it is
    invoked (in that task, or in a task spawned there), recording what it raised."""

    def __init__(self, call: str, *, spawned: bool) -> None:
        self.call = call
        self.spawned = spawned
        self.target: ChatSession | None = None
        self.raised: list[BaseException] = []
        self.done = False

    async def _once(self) -> None:
        assert self.target is not None
        try:
            if self.call == "turn":
                await self.target.turn("from inside")
            else:
                await self.target.close()
        except Exception as exc:
            self.raised.append(exc)

    async def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        if self.spawned:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._once)
        else:
            await self._once()


class FinalizeReenters(ToolLoopHarness):
    def __init__(self, reenter: Reenter) -> None:
        super().__init__()
        self.reenter = reenter

    async def aclose(self, rollout: Rollout) -> None:
        await self.reenter()


class ToolReenters(ToolLoopHarness):
    def __init__(self, reenter: Reenter) -> None:
        super().__init__()
        self.reenter = reenter

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        await super().launch(rollout, prompt)
        await self.reenter()


@pytest.mark.parametrize("where", ["segment", "stop_hook", "finalize", "scorer"])
@pytest.mark.parametrize("call", ["turn", "close"])
@pytest.mark.parametrize("spawned", [False, True], ids=["same-task", "child-task"])
async def test_reentry_from_the_sessions_own_code_is_refused_everywhere(
    where: str, call: str, spawned: bool, autojump_clock: Any
) -> None:
    # issue 23, items 1 and 2: from a @stop hook (the turn's task holds the lock
    # outside any segment), finalize or a scorer, trio's own lock error (or a wait for
    # itself) used to come out instead, and the trace could join its owner unscored
    reenter = Reenter(call, spawned=spawned)
    counter: list[str] = []

    async def hook(trace: Trace) -> bool:
        if where == "stop_hook":
            await reenter()
        return False

    async def scored(task: Task, trace: Trace) -> float:
        if where == "scorer":
            await reenter()
        counter.append("scored")
        return 1.0

    harness: Harness = ToolLoopHarness()
    if where == "finalize":
        harness = FinalizeReenters(reenter)
    elif where == "segment":
        harness = ToolReenters(reenter)
    joined: list[Trace] = []
    session = make_agent(
        harness=harness, rewards=[scored, stop(hook)], on_close=joined.append
    ).chat(TASK)
    reenter.target = session
    with trio.fail_after(5):  # a hang would be a wait on the session's own lock
        reply = await session.turn()
        trace = await session.close()
    assert reenter.done
    assert [type(e) for e in reenter.raised] == [SessionError]
    assert f"{call}()" in str(reenter.raised[0])
    assert "from inside this session's own running segment" in str(reenter.raised[0])
    assert not reply.stopped
    assert trace.stop_condition == "user_closed"
    assert counter == ["scored"]
    assert trace.rewards == {"scored": 1.0}
    assert joined == [trace]
    assert trace.errors == []


async def test_a_stop_hook_closing_its_session_is_refused_and_the_trace_is_scored(
    autojump_clock: Any,
) -> None:
    # issue 23, item 1, as found: the hook lets the refusal out (it stops the run, its
    # error on the trace), the session stays open to its owner's close, which scores it
    box: list[ChatSession] = []
    joined: list[Trace] = []

    @stop
    async def closes_its_session(trace: Trace) -> bool:
        await box[0].close()
        return False

    def scored(task: Task, trace: Trace) -> float:
        return 1.0

    session = make_agent(rewards=[scored, closes_its_session], on_close=joined.append).chat(TASK)
    box.append(session)
    reply = await session.turn()
    assert reply.stopped
    assert reply.stop_condition == "closes_its_session"
    assert joined == []  # not closed by the refused call
    trace = await session.close()
    assert joined == [trace]
    assert trace.rewards == {"scored": 1.0}
    assert [(e.kind, e.type) for e in trace.errors] == [("scoring", "SessionError")]


# --- every path yields ------------------------------------------------------------


class FailsAtOnce(ModelClient):
    """An endpoint client that fails before its first await."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise ModelEndpointError("down before any wait")


async def test_a_turn_whose_model_fails_before_its_first_await_still_yields() -> None:
    # issue 23, item 3: an uncontended turn used to trust the model client to yield
    session = make_agent(FailsAtOnce()).chat(TASK)
    with trio.testing.assert_checkpoints():  # a schedule point: other tasks run
        reply = await session.turn()
    assert reply.stop_condition == "model_error"
    with trio.testing.assert_checkpoints():
        await session.close()


# --- the scoring deadline holds for a plain function too -------------------------


async def test_a_sync_scorer_overrunning_scoring_s_is_a_scoring_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # issue 23, item 7: a plain function cannot be interrupted; it is measured
    calls: list[str] = []

    def blocks(task: Task, trace: Trace) -> float:
        calls.append("blocks")
        autojump_clock.jump(4)  # four seconds of blocking work, in virtual time
        return 1.0

    def after(task: Task, trace: Trace) -> float:
        calls.append("after")
        return 1.0

    joined: list[Trace] = []
    agent = make_agent(
        rewards=[blocks, after], timeouts=Timeouts(scoring_s=1), on_close=joined.append
    )
    session = agent.chat(TASK)
    await session.turn()
    trace = await session.close()
    assert calls == ["blocks"]  # nothing starts after the deadline
    assert trace.rewards == {}  # a failed scorer's value is absent, not 0.0 (issue 40)
    messages = _scoring_errors(trace)
    assert any("blocks" in m and "after the scoring deadline" in m for m in messages)
    assert any("timeouts.scoring_s" in m and "unfinished" in m for m in messages)
    assert joined == [trace]


async def test_a_sync_scorer_within_scoring_s_keeps_its_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def works(task: Task, trace: Trace) -> float:
        autojump_clock.jump(0.5)
        return 1.0

    session = make_agent(rewards=[works], timeouts=Timeouts(scoring_s=1)).chat(TASK)
    await session.turn()
    trace = await session.close()
    assert trace.rewards == {"works": 1.0}
    assert _scoring_errors(trace) == []
