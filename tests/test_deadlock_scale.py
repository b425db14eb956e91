"""Deadlock-freedom at scale: hypothesis writes random env programs and each one runs
to the end at an episode limit of 1 and a model-call limit of 1.

A program opens 2-4 sessions (some left for the episode to close) and interleaves
turns across them: single turns, concurrent turns (on several sessions, or twice on
one), a relay where one session's reply is piped into another as soon as it exists,
closes, closes that land during a turn, turns cancelled after a delay, and the env
raising. Each session's model answers from a random script of replies, tool calls,
latencies and failures. Episodes may have a timeout, or be cancelled from outside.

Each example runs 1-3 episodes in its own ``trio.run`` on a fresh
``MockClock(autojump_threshold=0)``: with no real I/O a deadlock shows at once as
``TooSlowError`` from ``trio.fail_after`` (docs/design.md "Testing"). Every program must terminate
with every session it opened closed and scored exactly once, the limiters released,
and never more than one model call in flight.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted import ScriptedModel, Sleep, ToolLoopHarness, tool_call

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    Episode,
    ModelEndpointError,
    Rubric,
    SessionClosed,
    SessionOver,
    Task,
    Trace,
    reward,
)
from taketurns.env import EpisodeInfo, ModelRequest, ModelResponse
from taketurns.harness import SessionState
from taketurns.testing import run_episode

EXAMPLES = 1000
DEADLOCK = 100_000.0  # virtual seconds: far beyond any program's own sleeps

# -- programs ----------------------------------------------------------------------------


@attrs.frozen
class Step:
    kind: str  # turn | together | pipe | close | close_during | cancel | raise
    sessions: tuple[int, ...] = ()
    delay: int = 0


@attrs.frozen
class SessionPlan:
    bare: bool  # opened without `async with`: the episode must close it
    script: tuple[str, ...]  # reply | tool | fail | sleep:N


@attrs.frozen
class EpisodePlan:
    sessions: tuple[SessionPlan, ...]
    steps: tuple[Step, ...]
    timeout: int | None  # the episode's own timeout (virtual seconds)
    cancel_at: int | None  # cancelled from outside after this long


SCRIPT_ITEM = st.sampled_from(["reply", "reply", "tool", "fail", "sleep:1", "sleep:3"])


@st.composite
def episode_plans(draw: st.DrawFn) -> EpisodePlan:
    k = draw(st.integers(2, 4))
    one = st.integers(0, k - 1)
    sessions = tuple(
        SessionPlan(draw(st.booleans()), tuple(draw(st.lists(SCRIPT_ITEM, max_size=5))))
        for _ in range(k)
    )
    step = st.one_of(
        st.builds(Step, st.just("turn"), st.tuples(one)),
        st.builds(Step, st.just("together"), st.lists(one, min_size=2, max_size=4).map(tuple)),
        st.builds(Step, st.just("pipe"), st.tuples(one, one)),
        st.builds(Step, st.just("close"), st.tuples(one)),
        st.builds(Step, st.just("close_during"), st.tuples(one), st.integers(0, 2)),
        st.builds(Step, st.just("cancel"), st.tuples(one), st.integers(0, 4)),
        st.builds(Step, st.just("raise")),
    )
    steps = tuple(draw(st.lists(step, max_size=10)))
    timeout = draw(st.none() | st.none() | st.integers(1, 30))
    cancel_at = draw(st.none() | st.none() | st.integers(0, 30))
    return EpisodePlan(sessions, steps, timeout, cancel_at)


# -- the env that runs a program ---------------------------------------------------------


@attrs.define
class Seats(EnvConfig):
    seat0: AgentConfig = attrs.field(factory=AgentConfig)
    seat1: AgentConfig = attrs.field(factory=AgentConfig)
    seat2: AgentConfig = attrs.field(factory=AgentConfig)
    seat3: AgentConfig = attrs.field(factory=AgentConfig)


class EnvBroke(Exception):
    pass


@attrs.define
class Gauge:
    """Model calls in flight across every session of an example."""

    now: int = 0
    most: int = 0
    calls: int = 0


class GaugedModel(ScriptedModel):
    def __init__(self, gauge: Gauge, *script: Any) -> None:
        super().__init__(*script)
        self.gauge = gauge

    async def complete(self, request: ModelRequest) -> ModelResponse:
        gauge = self.gauge
        gauge.now += 1
        gauge.calls += 1
        gauge.most = max(gauge.most, gauge.now)
        try:
            return await super().complete(request)
        finally:
            gauge.now -= 1


def script_of(plan: SessionPlan) -> list[Any]:
    items: list[Any] = []
    for n, item in enumerate(plan.script):
        if item == "reply":
            items.append(f"reply {n}")
        elif item == "tool":
            items.append(tool_call(f"call-{n}"))
        elif item == "fail":
            items.append(ModelEndpointError(f"upstream failure {n}", status=500))
        else:
            items.append(Sleep(float(item.split(":")[1])))
    return items


async def safe_turn(session: ChatSession, message: str) -> str | None:
    """A turn as an env makes it: an ended or closed session is not an error here."""
    try:
        reply = await session.turn(message)
    except (SessionOver, SessionClosed):
        return None
    return None if reply.stopped else reply.text


class ProgramEnv(Env):
    config_class = Seats

    def __init__(self, plan: EpisodePlan, opened: list[ChatSession]) -> None:
        super().__init__(Seats())
        self.plan = plan
        self.opened = opened
        self.scored: collections.Counter[int] = collections.Counter()

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        async with contextlib.AsyncExitStack() as stack:
            sessions = []
            for i, plan in enumerate(self.plan.sessions):
                session = agents[f"seat{i}"].chat(task)
                self.opened.append(session)
                if not plan.bare:
                    await stack.enter_async_context(session)
                sessions.append(session)
            for n, step in enumerate(self.plan.steps):
                await self.step(step, sessions, f"step {n}")

    async def step(self, step: Step, sessions: Sequence[ChatSession], label: str) -> None:
        chosen = [sessions[i] for i in step.sessions]
        if step.kind == "turn":
            await safe_turn(chosen[0], label)
        elif step.kind == "together":
            async with trio.open_nursery() as nursery:
                for session in chosen:
                    nursery.start_soon(safe_turn, session, label)
        elif step.kind == "pipe":
            await pipe(chosen[0], chosen[1], label)
        elif step.kind == "close":
            await chosen[0].close()
        elif step.kind == "close_during":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(safe_turn, chosen[0], label)
                await trio.sleep(step.delay)
                await chosen[0].close()
        elif step.kind == "cancel":
            with trio.move_on_after(step.delay):
                await safe_turn(chosen[0], label)
        else:
            raise EnvBroke(label)

    @reward
    def counted(self, task: Task, trace: Trace) -> float:
        self.scored[id(trace)] += 1
        return 1.0


async def pipe(source: ChatSession, sink: ChatSession, label: str) -> None:
    """The paired-session pattern: the sink waits for the source's reply, then sends
    it on, while both run as separate tasks."""
    ready = trio.Event()
    relayed: list[str | None] = [None]

    async def speak() -> None:
        try:
            relayed[0] = await safe_turn(source, label)
        finally:
            ready.set()

    async def listen() -> None:
        await ready.wait()
        await safe_turn(sink, relayed[0] or f"{label} (nothing to relay)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen)
        nursery.start_soon(speak)


# -- running one example -------------------------------------------------------------------

STOPS = {"user_closed", "model_error", "env_error", "episode_timeout", "cancelled"}


def factory(env: ProgramEnv, gauge: Gauge, limiter: trio.CapacityLimiter) -> Callable[..., Agent]:
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: Any) -> Agent:
        seat = int(role.removeprefix("seat"))
        plans = env.plan.sessions
        script = script_of(plans[seat]) if seat < len(plans) else []  # unused seats: none
        return Agent(
            role,
            AgentConfig(model="scripted", harness="scripted"),
            client=GaugedModel(gauge, *script),
            harness=ToolLoopHarness(max_calls=4),
            rubric=Rubric.of(env),
            episode=info,
            limiter=limiter,
            on_close=on_close,
        )

    return make


async def play(plans: Sequence[EpisodePlan]) -> None:
    episode_limiter = trio.CapacityLimiter(1)
    call_limiter = trio.CapacityLimiter(1)
    gauge = Gauge()
    results: list[tuple[EpisodePlan, ProgramEnv, Episode, list[ChatSession]]] = []

    async def one(e: int, plan: EpisodePlan) -> None:
        opened: list[ChatSession] = []
        env = ProgramEnv(plan, opened)
        episode = Episode(f"program/{e}/0", "program", Task(e))
        results.append((plan, env, episode, opened))
        async with episode_limiter:  # held for the whole episode, before any session opens
            outside = trio.CancelScope()
            if plan.cancel_at is not None:
                outside.deadline = trio.current_time() + plan.cancel_at
            with outside:
                await run_episode(
                    env, episode, factory(env, gauge, call_limiter), timeout=plan.timeout
                )

    with trio.fail_after(DEADLOCK):  # a deadlock fails here, at once
        async with trio.open_nursery() as nursery:
            for e, plan in enumerate(plans):
                nursery.start_soon(one, e, plan)

    assert episode_limiter.borrowed_tokens == 0
    assert call_limiter.borrowed_tokens == 0
    assert gauge.most <= 1  # the model-call limit held
    assert gauge.now == 0
    for plan, env, episode, opened in results:
        check(plan, env, episode, opened)


def check(plan: EpisodePlan, env: ProgramEnv, episode: Episode, opened: list[ChatSession]) -> None:
    # no step blocks forever or raises but `raise`: without a timeout or a
    # cancellation the program runs to its end (or its first `raise`)
    allowed = {"env_error" if any(s.kind == "raise" for s in plan.steps) else "completed"}
    if plan.timeout is not None:
        allowed.add("episode_timeout")
    if plan.cancel_at is not None:
        allowed.add("cancelled")
    assert episode.stop in allowed, (episode.stop, episode.errors)
    # a timeout is an outcome; raising, cancellation and a failed model call are not
    failed_call = any(t.stop_condition == "model_error" for t in episode.traces)
    assert episode.ok == (episode.stop in ("completed", "episode_timeout") and not failed_call)
    assert (episode.stop == "completed") == (episode.errors == [])
    # every session the program opened: closed, on the episode once, scored once
    assert all(s.state is SessionState.CLOSED for s in opened)
    assert sorted(id(t) for t in episode.traces) == sorted(id(s.trace) for s in opened)
    assert sorted(env.scored) == sorted(id(s.trace) for s in opened)
    assert set(env.scored.values()) <= {1}
    for trace in episode.traces:
        assert trace.stop_condition in STOPS, trace.stop_condition
        assert trace.rewards == {"counted": 1.0}
        assert trace.episode == episode.info_stamp


def run_virtual(plans: Sequence[EpisodePlan]) -> None:
    trio.run(play, plans, clock=trio.testing.MockClock(autojump_threshold=0))


# -- the tests -------------------------------------------------------------------------------

SCALE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
def test_a_thousand_random_env_programs_terminate_with_every_session_scored_once() -> None:
    explored: list[tuple[EpisodePlan, ...]] = []

    @SCALE
    @given(plans=st.lists(episode_plans(), min_size=1, max_size=3))
    def explore(plans: list[EpisodePlan]) -> None:
        explored.append(tuple(plans))
        run_virtual(plans)

    explore()
    programs = {plan for plans in explored for plan in plans}
    assert len(explored) >= EXAMPLES  # examples run
    assert len(programs) >= EXAMPLES  # distinct env programs among them
    print(f"FIGURES examples={len(explored)} distinct_programs={len(programs)}")


def test_the_detector_catches_a_hold_and_wait() -> None:
    """The check is not vacuous: an env that breaks the rule (waits on a peer's reply
    while holding the model-call limiter) deadlocks, and is caught at once."""
    limiter = trio.CapacityLimiter(1)

    async def main() -> None:
        agents = [
            Agent(f"seat{i}", AgentConfig(model="builtin/echo"), limiter=limiter) for i in (0, 1)
        ]
        async with agents[0].chat(Task(0)) as a, agents[1].chat(Task(0)) as b:
            replied = trio.Event()

            async def peer() -> None:
                await b.turn("hello")
                replied.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(peer)
                async with limiter:  # hold-and-wait: the peer's call needs this token
                    await replied.wait()
                await a.turn("after the peer")

    async def detect() -> None:
        with trio.fail_after(DEADLOCK):
            await main()

    with pytest.raises(trio.TooSlowError):
        trio.run(detect, clock=trio.testing.MockClock(autojump_threshold=0))
