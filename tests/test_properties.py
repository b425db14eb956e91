"""Property tests of the session protocol (hypothesis).

Each example makes its own resources and runs its own ``trio.run`` on a fresh
``MockClock(autojump_threshold=0)``: no fixtures (docs/design.md "Testing"). With the
autojump clock, a deadlock surfaces at once as ``trio.TooSlowError`` from
``trio.fail_after``.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import CloseRecordingHarness, Counter, ScriptedModel, Sleep, ToolLoopHarness
from scripted import make_agent as scripted_agent

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    Episode,
    Limits,
    ModelEndpointError,
    Reply,
    SessionClosed,
    SessionOver,
    Task,
    Trace,
    TurnError,
    reward,
    stop,
)
from taketurns.env import EpisodeInfo
from taketurns.errors import SessionError
from taketurns.harness import SessionState
from taketurns.testing import BuiltinModel, run_episode

SETTINGS = settings(max_examples=60, deadline=None)


def run_virtual(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))


# (a) Random operations on one session ---------------------------------------------------

OPS = ("turn", "fail", "bad", "cancel_turn", "close", "close_during_turn")


@attrs.define
class Expected:
    """What the session should look like, tracked alongside it."""

    state: str = "fresh"  # fresh | open | over | closed
    stop: str | None = None
    turns: int = 0  # recorded model calls
    requests: int = 0  # calls the model saw (cancelled ones too)
    segments: int = 0  # harness launches
    agent_s: float = 0.0


async def _protocol(ops: Sequence[str], prompted: bool, max_turns: int | None, ending: str) -> None:
    model = ScriptedModel()
    harness = CloseRecordingHarness()
    counter = Counter()
    joined: list[Trace] = []
    limits = Limits(max_turns=max_turns)
    agent = scripted_agent(model, harness, rewards=[counter], limits=limits, on_close=joined.append)
    task = Task(0, prompt="open with this") if prompted else Task(0)
    session = agent.chat(task)
    want = Expected()

    def opening() -> Awaitable[Reply]:
        if want.state == "fresh" and prompted:
            return session.turn()
        return session.turn("a user message")

    def reaches_model() -> bool:
        return want.state in ("fresh", "open") and (max_turns is None or want.turns < max_turns)

    async def turn(fail: bool) -> None:
        if want.state == "closed":
            with pytest.raises(SessionClosed):
                await opening()
            return
        if want.state == "over":
            with pytest.raises(SessionOver) as info:
                await opening()
            assert info.value.stop_condition == want.stop
            return
        if not reaches_model():  # the spent budget refuses the segment before it starts
            assert await opening() == Reply("", (), True, "max_turns")
            want.state, want.stop = "over", "max_turns"
            return
        if fail:
            model.push(ModelEndpointError("upstream down"))
        reply = await opening()
        want.turns += 1
        want.requests += 1
        want.segments += 1
        if fail:
            assert reply == Reply("", (), True, "model_error")
            want.state, want.stop = "over", "model_error"
        else:
            assert reply.text == "ok"
            assert not reply.stopped
            want.state = "open"

    async def bad() -> None:
        expected: type[Exception] = TurnError
        if want.state == "closed":
            expected = SessionClosed
        elif want.state == "over":
            expected = SessionOver
        wrong = "speaking out of turn" if want.state == "fresh" and prompted else None
        with pytest.raises(expected):
            await session.turn(wrong)

    async def cancel_turn() -> None:
        if not reaches_model():
            await turn(fail=False)
            return
        model.push(Sleep(10))
        conversation = list(session.trace.messages)
        with trio.move_on_after(1) as scope:
            await opening()
        assert scope.cancelled_caught
        want.requests += 1
        want.segments += 1
        want.agent_s += 1
        # a cancelled turn is rolled back: the conversation (and the state: a
        # cancelled opening leaves the session fresh) is as it was before it
        assert session.trace.messages == conversation

    async def close() -> None:
        trace = await session.close()
        assert trace is session.trace
        if want.state != "closed":
            want.stop = want.stop or "user_closed"
        want.state = "closed"

    async def close_during_turn() -> None:
        if not reaches_model():
            await close()
            return
        model.push(Sleep(10))
        replies: list[Reply] = []

        async def user() -> None:
            replies.append(await opening())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(user)
            await trio.testing.wait_all_tasks_blocked()
            await session.close()
        assert replies == [Reply("", (), True, "user_closed")]
        want.requests += 1
        want.segments += 1
        want.state, want.stop = "closed", "user_closed"

    actions = {
        "turn": lambda: turn(fail=False),
        "fail": lambda: turn(fail=True),
        "bad": bad,
        "cancel_turn": cancel_turn,
        "close": close,
        "close_during_turn": close_during_turn,
    }

    with trio.CancelScope() as outer:
        try:
            async with session:
                for op in ops:
                    await actions[op]()
                    assert (
                        session.state.value
                        == {
                            "fresh": "fresh",
                            "open": "ready",
                            "over": "over",
                            "closed": "closed",
                        }[want.state]
                    )
                    assert (counter.calls, harness.closed) == (
                        (1, 1) if want.state == "closed" else (0, 0)
                    )
                if ending == "error":
                    raise LookupError("the env broke")
                if ending == "cancel":
                    outer.cancel()
                    await trio.lowlevel.checkpoint()
        except LookupError:
            assert ending == "error"
    if want.state != "closed":
        want.stop = want.stop or {"exit": "user_closed", "error": "env_error"}.get(
            ending, "cancelled"
        )

    trace = session.trace
    assert session.state is SessionState.CLOSED
    assert counter.calls == 1  # scored exactly once, however the session ended
    assert harness.closed == 1
    assert joined == [trace]
    assert trace.rewards == {"counted": 1.0}
    assert trace.stop_condition == want.stop
    assert len(trace.turns) == want.turns
    assert len(model.requests) == want.requests
    assert len(harness.prompts) == want.segments
    assert trace.timing.agent_s == want.agent_s
    assert await session.close() is trace
    with pytest.raises(SessionClosed):
        await session.turn("anyone?")
    assert counter.calls == 1


@SETTINGS
@given(
    ops=st.lists(st.sampled_from(OPS), max_size=12),
    prompted=st.booleans(),
    max_turns=st.none() | st.integers(1, 4),
    ending=st.sampled_from(["exit", "error", "cancel"]),
)
def test_any_sequence_of_operations_keeps_the_session_invariants(
    ops: list[str], prompted: bool, max_turns: int | None, ending: str
) -> None:
    run_virtual(_protocol, ops, prompted, max_turns, ending)


# Episodes for (b) and (d) ----------------------------------------------------------------


@attrs.define
class Seats(EnvConfig):
    seat0: AgentConfig = attrs.field(factory=AgentConfig)
    seat1: AgentConfig = attrs.field(factory=AgentConfig)
    seat2: AgentConfig = attrs.field(factory=AgentConfig)
    seat3: AgentConfig = attrs.field(factory=AgentConfig)


def seats(model: str) -> Seats:
    return Seats(*(AgentConfig(model=model) for _ in range(4)))


class ScriptEnv(Env):
    """Runs the example's script; counts how often each trace is scored."""

    config_class = Seats

    def __init__(self, script: Callable[[Task, Agents], Awaitable[None]], config: Seats) -> None:
        super().__init__(config)
        self.script = script
        self.scored: collections.Counter[int] = collections.Counter()

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        await self.script(task, agents)

    @reward
    def scored_once(self, task: Task, trace: Trace) -> float:
        self.scored[id(trace)] += 1
        return 1.0


def agent_factory(env: ScriptEnv, limiter: trio.CapacityLimiter | None):
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close) -> Agent:
        return Agent(
            role, config, episode=info, on_close=on_close, rubric=env.rubric(role), limiter=limiter
        )

    return make


def assert_scored_once(env: ScriptEnv, episode: Episode) -> None:
    assert sorted(env.scored) == sorted(id(t) for t in episode.traces)
    assert set(env.scored.values()) == {1}


# (b) Several sessions, random interleavings, limiters of 1: no deadlock --------------------

LATENCY = 0.01


@attrs.frozen
class Step:
    session: int
    relay: bool  # wait for the previous step of the chunk and send its reply on


@st.composite
def episode_plans(draw: st.DrawFn) -> tuple[int, list[list[Step]]]:
    k = draw(st.integers(2, 4))
    step = st.builds(Step, st.integers(0, k - 1), st.booleans())
    chunks = draw(st.lists(st.lists(step, min_size=1, max_size=4), min_size=1, max_size=4))
    return k, chunks


async def _interleavings(plans: list[tuple[int, list[list[Step]]]]) -> None:
    episode_limiter = trio.CapacityLimiter(1)
    call_limiter = trio.CapacityLimiter(1)
    calls = sum(len(chunk) for _, chunks in plans for chunk in chunks)
    checked: list[tuple[str, str]] = []

    async def step(
        session: ChatSession, relay: bool, j: int, done: list[trio.Event], texts: list[str]
    ) -> None:
        message = texts[j]
        if relay and j > 0:
            await done[j - 1].wait()
            message = texts[j - 1]  # the previous step's reply, relayed
        reply = await session.turn(message)
        checked.append((reply.text, message))
        texts[j] = reply.text
        done[j].set()

    def script(k: int, chunks: list[list[Step]]):
        async def run(task: Task, agents: Agents) -> None:
            async with contextlib.AsyncExitStack() as stack:
                roles = list(agents)[:k]
                sessions = [await stack.enter_async_context(agents[r].chat(task)) for r in roles]
                last = "start"
                for c, chunk in enumerate(chunks):
                    done = [trio.Event() for _ in chunk]
                    texts = [f"chunk {c} step {j} after {last}" for j in range(len(chunk))]
                    async with trio.open_nursery() as nursery:
                        for j, s in enumerate(chunk):
                            nursery.start_soon(step, sessions[s.session], s.relay, j, done, texts)
                    last = texts[-1]

        return run

    async def one(e: int, k: int, chunks: list[list[Step]]) -> None:
        env = ScriptEnv(script(k, chunks), seats(f"builtin/echo?latency_ms={LATENCY * 1000:g}"))
        episode = Episode(f"relay/{e}/0", "relay", Task(e))
        async with episode_limiter:  # held for the whole episode, before any session opens
            await run_episode(env, episode, agent_factory(env, call_limiter))
        assert (episode.ok, episode.stop, episode.errors) == (True, "completed", [])
        assert len(episode.traces) == k
        assert_scored_once(env, episode)
        per_session = collections.Counter(s.session for chunk in chunks for s in chunk)
        turns = sorted(len(t.turns) for t in episode.traces)
        assert turns == sorted(per_session.get(i, 0) for i in range(k))
        assert {t.stop_condition for t in episode.traces} == {"user_closed"}
        assert all(t.episode == episode.info_stamp for t in episode.traces)

    start = trio.current_time()
    with trio.fail_after(calls * LATENCY + 1):  # a deadlock fails here, immediately
        async with trio.open_nursery() as nursery:
            for e, (k, chunks) in enumerate(plans):
                nursery.start_soon(one, e, k, chunks)
    # one call at a time, back to back: the limiter of 1 serialises every model call and
    # nothing ever waits on anything but a model call
    assert trio.current_time() - start == pytest.approx(calls * LATENCY)
    assert len(checked) == calls
    assert all(text == message for text, message in checked)  # echo: nobody's reply got mixed


@SETTINGS
@given(plans=st.lists(episode_plans(), min_size=1, max_size=3))
def test_sessions_in_episodes_complete_under_limiters_of_one(
    plans: list[tuple[int, list[list[Step]]]],
) -> None:
    run_virtual(_interleavings, plans)


# (c) Concurrent turn() callers on one session: FIFO, never interleaved ---------------------


class SleepyHarness(ToolLoopHarness):
    """Segment i sleeps ``sleeps[i]`` seconds before its model call."""

    def __init__(self, sleeps: Sequence[float]) -> None:
        super().__init__()
        self.sleeps = list(sleeps)

    async def launch(self, rollout, prompt) -> None:
        self.sleep = self.sleeps.pop(0)
        await super().launch(rollout, prompt)


async def _fifo(sleeps: list[int], close_after: int | None) -> None:
    n = len(sleeps)
    harness = SleepyHarness(sleeps)
    agent = scripted_agent(BuiltinModel("echo"), harness)
    session = agent.chat(Task(0))
    outcomes: dict[int, Reply | str] = {}

    async def user(i: int) -> None:
        try:
            outcomes[i] = await session.turn(f"message {i}")
        except SessionClosed:
            outcomes[i] = "closed"

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(user, i)
            await trio.testing.wait_all_tasks_blocked()  # caller i is queued on the lock
            if close_after == i:
                nursery.start_soon(session.close)
                await trio.testing.wait_all_tasks_blocked()
    await session.close()

    ran = n if close_after is None else 1
    labels = [f"message {i}" for i in range(ran)]
    starts = [e for e in harness.events if e[0] == "start"]
    assert starts == [("start", label) for label in labels]  # served first come, first served
    if close_after is None:
        expected = [e for label in labels for e in (("start", label), ("end", label))]
        assert harness.events == expected  # never interleaved
        assert [outcomes[i].text for i in range(n)] == labels  # type: ignore[union-attr]
        assert trio.current_time() == sum(sleeps)
    else:
        # the close cancels the running segment; everyone queued behind it is refused
        assert harness.events == [("start", "message 0")]
        assert outcomes[0] == Reply("", (), True, "user_closed")
        assert [outcomes[i] for i in range(1, n)] == ["closed"] * (n - 1)
        assert trio.current_time() == 0
    assert session.state is SessionState.CLOSED


@SETTINGS
@given(
    sleeps=st.lists(st.integers(1, 5), min_size=2, max_size=8),
    close_at=st.none() | st.floats(0, 1),
)
def test_concurrent_turns_are_fifo_and_never_interleave(
    sleeps: list[int], close_at: float | None
) -> None:
    close_after = None if close_at is None else int(close_at * (len(sleeps) - 1))
    run_virtual(_fifo, sleeps, close_after)


# (d) Cancelling an episode mid-turn -----------------------------------------------------------


async def _cancel_episode(bare: list[bool], delay_ms: int, limited: bool) -> None:
    sessions: list[ChatSession] = []

    async def script(task: Task, agents: Agents) -> None:
        async def seat(i: int, role: str) -> None:
            if bare[i]:  # never closed by the env: the episode must close it
                session = agents[role].chat(task)
                sessions.append(session)
                while True:
                    await session.turn(f"seat {i} again")
            async with agents[role].chat(task) as session:
                sessions.append(session)
                while True:
                    await session.turn(f"seat {i} again")

        async with trio.open_nursery() as nursery:
            for i, role in enumerate(list(agents)[: len(bare)]):
                nursery.start_soon(seat, i, role)

    env = ScriptEnv(script, seats("builtin/echo?latency_ms=10"))
    episode = Episode("loop/0/0", "loop", Task(0))
    limiter = trio.CapacityLimiter(1) if limited else None
    with trio.move_on_after(delay_ms / 1000 + 0.0005) as scope:
        await run_episode(env, episode, agent_factory(env, limiter))
    assert scope.cancelled_caught  # the cancellation was recorded, then re-raised

    assert (episode.ok, episode.stop) == (False, "cancelled")
    assert [e.kind for e in episode.errors] == ["cancelled"]
    assert len(sessions) == len(episode.traces) == len(bare)
    assert all(s.state is SessionState.CLOSED for s in sessions)
    assert {id(s.trace) for s in sessions} == {id(t) for t in episode.traces}
    assert [t.stop_condition for t in episode.traces] == ["cancelled"] * len(bare)
    assert_scored_once(env, episode)
    if limiter is not None:
        assert limiter.borrowed_tokens == 0


@SETTINGS
@given(
    bare=st.lists(st.booleans(), min_size=1, max_size=4),
    delay_ms=st.integers(0, 200),
    limited=st.booleans(),
)
def test_cancelling_an_episode_mid_turn_closes_and_scores_every_session(
    bare: list[bool], delay_ms: int, limited: bool
) -> None:
    run_virtual(_cancel_episode, bare, delay_ms, limited)


# (e) Re-entry from the session's own code, interleaved with the user's calls --------------

USER_OPS = ("turn", "cancel_turn", "two_turns", "close", "close_during_turn")
WHERE = ("hook", "tool", "scorer", "finalize")


@attrs.frozen
class Reentry:
    """Where the session's own code calls back into it: ``call`` (None: never) on
    its ``at``-th invocation there, in that task or a spawned one."""

    call: str | None
    spawned: bool
    at: int


reentries = st.builds(
    Reentry, st.sampled_from([None, "turn", "close"]), st.booleans(), st.integers(0, 2)
)


class ReenteringHarness(ToolLoopHarness):
    """Calls back after its model calls (a tool) and while finalizing."""

    def __init__(self, reenter: Callable[[str], Awaitable[None]]) -> None:
        super().__init__()
        self.reenter = reenter
        self.finalized = 0

    async def launch(self, rollout: Any, prompt: Any) -> None:
        await super().launch(rollout, prompt)
        await self.reenter("tool")

    async def aclose(self, rollout: Any) -> None:
        self.finalized += 1
        await self.reenter("finalize")


async def _reentrant(
    ops: Sequence[str], plan: dict[str, Reentry], prompted: bool, ending: str
) -> None:
    refused: list[BaseException] = []
    succeeded: list[str] = []
    seen: collections.Counter[str] = collections.Counter()
    session: ChatSession

    async def reenter(where: str) -> None:
        entry, n = plan[where], seen[where]
        seen[where] += 1
        if entry.call is None or n != entry.at:
            return

        async def once() -> None:
            try:
                if entry.call == "turn":
                    await session.turn("from inside")
                else:
                    await session.close()
            except Exception as exc:
                refused.append(exc)
            else:
                succeeded.append(where)

        if entry.spawned:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(once)
        else:
            await once()

    async def hook(trace: Trace) -> bool:
        await reenter("hook")
        return False

    scored: list[int] = []

    async def scorer(task: Task, trace: Trace) -> float:
        await reenter("scorer")
        scored.append(1)
        return 1.0

    model = ScriptedModel()
    harness = ReenteringHarness(reenter)
    joined: list[Trace] = []
    agent = scripted_agent(model, harness, rewards=[scorer, stop(hook)], on_close=joined.append)
    session = agent.chat(Task(0, prompt="open") if prompted else Task(0))
    state = "fresh"

    def opening(text: str = "a user message") -> Awaitable[Reply]:
        return session.turn() if state == "fresh" and prompted else session.turn(text)

    async def turn() -> None:
        nonlocal state
        if state == "closed":
            with pytest.raises(SessionClosed):
                await opening()
            return
        reply = await opening()
        assert not reply.stopped
        state = "open"

    async def cancel_turn() -> None:
        if state == "closed":
            await turn()
            return
        before = list(session.trace.messages)
        model.push(Sleep(10))
        with trio.move_on_after(1) as scope:
            await opening()
        assert scope.cancelled_caught
        assert session.trace.messages == before  # rolled back

    async def two_turns() -> None:
        nonlocal state
        if state == "closed":
            await turn()
            return
        model.push(Sleep(1))
        replies: list[Reply] = []

        async def user(text: str) -> None:
            replies.append(await opening(text))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(user, "first")
            await trio.testing.wait_all_tasks_blocked()
            state = "open"  # the second caller sends a message, whatever the first did
            nursery.start_soon(user, "second")
        assert [r.stopped for r in replies] == [False, False]

    async def close() -> None:
        nonlocal state
        assert await session.close() is session.trace
        state = "closed"

    async def close_during_turn() -> None:
        nonlocal state
        if state == "closed":
            await close()
            return
        model.push(Sleep(10))
        replies: list[Reply] = []

        async def user() -> None:
            replies.append(await opening())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(user)
            await trio.testing.wait_all_tasks_blocked()
            await close()
        assert [r.stop_condition for r in replies] == ["user_closed"]

    actions = {
        "turn": turn,
        "cancel_turn": cancel_turn,
        "two_turns": two_turns,
        "close": close,
        "close_during_turn": close_during_turn,
    }
    with trio.fail_after(10_000):  # a wait on the session's own lock would be a hang
        with trio.CancelScope() as outer:
            async with session:
                for op in ops:
                    await actions[op]()
                if ending == "cancel":
                    outer.cancel()
                    await trio.lowlevel.checkpoint()

    trace = session.trace
    assert succeeded == []  # no call from the session's own code ever got through
    assert all(isinstance(exc, SessionError) for exc in refused), refused
    assert scored == [1]
    assert harness.finalized == 1
    assert joined == [trace]
    assert trace.rewards == {"scorer": 1.0}
    assert [e.kind for e in trace.errors] == []
    roles = [m.role for m in trace.messages]
    # no user message left unanswered before the next one
    assert not any(a == b == "user" for a, b in itertools.pairwise(roles)), roles
    assert session.state is SessionState.CLOSED
    assert await session.close() is trace
    with pytest.raises(SessionClosed):
        await session.turn("anyone?")


@SETTINGS
@given(
    ops=st.lists(st.sampled_from(USER_OPS), max_size=8),
    plan=st.fixed_dictionaries({where: reentries for where in WHERE}),
    prompted=st.booleans(),
    ending=st.sampled_from(["exit", "cancel"]),
)
def test_reentry_is_refused_whatever_the_interleaving(
    ops: list[str], plan: dict[str, Reentry], prompted: bool, ending: str
) -> None:
    run_virtual(_reentrant, ops, plan, prompted, ending)
