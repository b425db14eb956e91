"""The segment as one object with one outcome (issue 41) and the defects that lived in
the gaps of the old session (issue 40, items 2 and 4): an outer cancellation of a
harness whose cleanup raises is still a cancellation (never a harness failure, never
swallowed); ``close()`` cancels a turn stuck in an async ``@stop`` hook instead of
waiting for it; a stop cannot be swallowed by a harness's ``except Exception``.
Virtual time, no I/O."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import ScriptedModel, ToolLoopHarness, make_agent

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    AssistantMessage,
    ChatSession,
    EnvConfig,
    Episode,
    Limits,
    Reply,
    SessionClosed,
    SessionOver,
    Task,
    Trace,
    stop,
)
from taketurns import Env as BaseEnv
from taketurns.env import EpisodeInfo
from taketurns.errors import RolloutStopped
from taketurns.harness import Prompt, Rollout, SessionState
from taketurns.testing import run_episode

PROMPTED = Task(0, "p", prompt="hi")


class CleanupRaises(ToolLoopHarness):
    """Its segment waits; cut off, its cleanup raises."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        try:
            await trio.sleep(100)
        finally:
            raise RuntimeError("cleanup broke")


# --- issue 40, item 2: an outer cancellation stays a cancellation -------------------


async def test_an_outer_cancellation_of_a_raising_cleanup_is_not_swallowed(
    autojump_clock: Any,
) -> None:
    from taketurns._exchange.outcome import trace_cause

    session = make_agent(harness=CleanupRaises()).chat(PROMPTED)
    with trio.move_on_after(1) as scope:
        await session.turn()
    assert scope.cancelled_caught  # turn() was cancelled, not answered
    assert session.state is SessionState.FRESH  # the cancelled opening was rolled back
    assert session.trace.stop_condition is None
    assert [(e.kind, e.type) for e in session.trace.errors] == [("cancelled", "RuntimeError")]
    trace = await session.close()
    assert trace.stop_condition == "user_closed"
    assert trace_cause(trace.stop_condition, [e.kind for e in trace.errors]) is None


@attrs.define
class OneSeatConfig(EnvConfig):
    seat: AgentConfig = attrs.field(factory=lambda: AgentConfig(model="builtin/echo"))


class OneSeat(BaseEnv):
    config_class = OneSeatConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, prompt=f"opening {i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        async with agents.seat.chat(task) as session:
            await session.turn()


async def test_an_episode_timeout_of_a_raising_cleanup_is_the_timeout(autojump_clock: Any) -> None:
    # on main: harness_error, a failed (and retried) episode; the same harness that
    # only sleeps ends episode_timeout, ok
    env = OneSeat()

    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: Any) -> Agent:
        return Agent(
            role,
            config,
            harness=CleanupRaises(),
            episode=info,
            on_close=on_close,
            rubric=env.rubric(role),
        )

    episode = Episode("one/0/1", "one", env.tasks(1)[0], rollout=1)
    await run_episode(env, episode, make, timeout=2.0)
    (trace,) = episode.traces
    assert (episode.stop, episode.ok, episode.cause) == ("episode_timeout", True, None)
    assert trace.stop_condition == "episode_timeout"
    assert "harness" not in [e.kind for e in trace.errors]


# --- issue 40, item 4: close() does not wait for a turn stuck in a stop hook ---------


async def test_close_cancels_a_turn_stuck_in_an_async_stop_hook(autojump_clock: Any) -> None:
    entered: list[float] = []

    @stop
    async def stuck(trace: Trace) -> bool:
        entered.append(trio.current_time())
        await trio.sleep(10_000)  # virtual: "never" (on main, close waited it out)
        return False

    session = make_agent(rewards=[stuck]).chat(PROMPTED)
    replies: list[Reply] = []

    async def user() -> None:
        replies.append(await session.turn())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user)
        await trio.testing.wait_all_tasks_blocked()
        assert entered  # the turn is in the hook
        start = trio.current_time()
        trace = await session.close()
        assert trio.current_time() == start  # virtual time: close never waited on the hook
    assert replies == [Reply("", (), True, "user_closed")]
    assert trace.stop_condition == "user_closed"
    assert session.state is SessionState.CLOSED


async def test_a_slow_stop_hook_does_not_hold_a_bounded_close(autojump_clock: Any) -> None:
    # as found: a 3 s hook made a close under move_on_after(0.5) take 2.8 s
    @stop
    async def slow(trace: Trace) -> bool:
        await trio.sleep(3)
        return False

    session = make_agent(rewards=[slow]).chat(PROMPTED)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.turn)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        with trio.move_on_after(0.5):
            await session.close()
        assert trio.current_time() - start < 0.5
    assert session.trace.stop_condition == "user_closed"


# --- issue 41, item 2: a stop is not an error a harness can swallow -------------------


class CatchesEverything(ToolLoopHarness):
    """Calls the model until it is stopped, catching every ``Exception`` on the way
    (what a careless harness does), and says so if it gets past a refusal."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.swallowed: list[BaseException] = []

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        for _ in range(5):
            self.calls += 1
            try:
                response = await rollout.complete(prompt.wire_messages())
                rollout.emit(response.message)
            except Exception as exc:
                self.swallowed.append(exc)
        rollout.emit(AssistantMessage("got past the stop"))


async def test_a_stop_cannot_be_swallowed_by_except_exception() -> None:
    harness = CatchesEverything()
    agent = make_agent(ScriptedModel("a", "b", "c"), harness, limits=Limits(max_turns=1))
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert (reply.stopped, reply.stop_condition) == (True, "max_turns")
    assert harness.swallowed == []
    assert harness.calls == 2  # the refused call ended the segment there
    assert [m.content for m in reply.messages] == ["a"]


# --- issue 41, item 1: the session's state table, driven by hypothesis ---------------

S = SessionState
# (state, what happens) -> (next state, what turn() raises); the module docstring's table
TABLE: dict[tuple[SessionState, str], tuple[SessionState, type[BaseException] | None]] = {
    **{(s, "answer"): (S.READY, None) for s in (S.FRESH, S.READY)},
    **{(s, "stop"): (S.OVER, None) for s in (S.FRESH, S.READY)},
    (S.FRESH, "cancel"): (S.FRESH, None),
    (S.READY, "cancel"): (S.READY, None),
    **{(S.OVER, op): (S.OVER, SessionOver) for op in ("answer", "stop", "cancel")},
    **{(S.CLOSED, op): (S.CLOSED, SessionClosed) for op in ("answer", "stop", "cancel")},
    **{(s, "close"): (S.CLOSED, None) for s in S if s is not S.RUNNING and s is not S.CLOSING},
}


class Planned(ToolLoopHarness):
    """Each segment does the next thing planned: answers, stops (the boundary's
    control flow), or hangs until it is cut."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: list[str] = []
        self.states: list[SessionState] = []
        self.session: ChatSession | None = None

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        assert self.session is not None
        self.states.append(self.session.state)  # RUNNING while a segment runs
        what = self.plan.pop(0)
        if what == "stop":
            raise RolloutStopped("planned_stop")
        if what in ("cancel", "hang"):
            await trio.sleep_forever()
        await super().launch(rollout, prompt)


async def _slow_reward(task: Task, trace: Trace) -> float:
    await trio.sleep(1)  # scoring takes time: CLOSING can be seen
    return 1.0


async def _step(session: ChatSession, harness: Planned, state: SessionState, op: str) -> None:
    """One step of the drive: ``op`` applied, the state checked against the table."""
    if op == "close":
        await session.close()
    else:
        raises = TABLE[state, op][1]
        message = None if state is S.FRESH else "next"
        if raises is not None:
            with pytest.raises(raises):
                await session.turn(message)
            return
        harness.plan.append(op)
        with trio.move_on_after(1 if op == "cancel" else math.inf) as scope:
            reply = await session.turn(message)
            assert reply.stopped is (op == "stop")
        assert scope.cancelled_caught is (op == "cancel")
    assert session.state is TABLE[state, op][0]


async def _close_running(session: ChatSession, harness: Planned) -> None:
    """FRESH/READY -> RUNNING -> CLOSING (the segment is cut; turn() is refused while
    it scores) -> CLOSED."""
    harness.plan.append("hang")
    replies: list[Reply] = []

    async def user() -> None:
        replies.append(await session.turn(None if session.state is S.FRESH else "next"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user)
        await trio.testing.wait_all_tasks_blocked()
        assert session.state is S.RUNNING
        nursery.start_soon(session.close)
        await trio.testing.wait_all_tasks_blocked()
        assert session.state is S.CLOSING  # scoring
        with pytest.raises(SessionClosed):
            await session.turn("too late")
    assert replies == [Reply("", (), True, "user_closed")]
    assert session.state is S.CLOSED


async def _drive(ops: list[str]) -> None:
    harness = Planned()
    session = make_agent(harness=harness, rewards=[_slow_reward]).chat(PROMPTED)
    harness.session = session
    for op in ops:
        state = session.state
        if op == "close_running" and state in (S.FRESH, S.READY):
            await _close_running(session, harness)
        else:
            await _step(session, harness, state, "close" if op == "close_running" else op)
    await session.close()
    assert session.state is S.CLOSED
    assert set(harness.states) <= {S.RUNNING}
    assert harness.plan == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["answer", "stop", "cancel", "close", "close_running"]), max_size=8)
)
def test_the_session_follows_its_state_table(ops: list[str]) -> None:
    trio.run(_drive, ops, clock=trio.testing.MockClock(autojump_threshold=0))
