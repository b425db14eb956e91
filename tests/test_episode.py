"""Episodes: ``run_episode`` with a tiny two-role env. However ``env.run`` ends, every
session it opened is closed and scored exactly once, its trace joins the episode,
and the outcome is recorded (``ok``, ``stop``, ``errors``)."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio
import trio.testing

from taketurns import Agent, AgentConfig, Agents, EnvConfig, Episode, Task, Trace, reward
from taketurns import Env as BaseEnv
from taketurns.env import AgentStamp, EpisodeInfo
from taketurns.harness import ErrorInfo, SessionState
from taketurns.testing import run_episode

Script = Callable[[Task, Agents], Awaitable[None]]


@attrs.define
class PairConfig(EnvConfig):
    host: AgentConfig = attrs.field(factory=lambda: AgentConfig(model="builtin/echo"))
    guest: AgentConfig = attrs.field(
        factory=lambda: AgentConfig(model="builtin/echo?latency_ms=10", trainable=False)
    )
    rounds: int = 2


class Pair(BaseEnv):
    """Runs whatever script the test gives it; counts scoring per role."""

    config_class = PairConfig

    def __init__(self, script: Script, config: PairConfig | None = None) -> None:
        super().__init__(config)
        self.script = script
        self.scored: collections.Counter[str] = collections.Counter()

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, prompt=f"opening {i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        await self.script(task, agents)

    @reward
    def took_part(self, task: Task, trace: Trace) -> float:
        self.scored[trace.agent.name] += 1
        return float(bool(trace.turns))


def factory(env: Pair, stamps: list[EpisodeInfo] | None = None):
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close) -> Agent:
        if stamps is not None:
            stamps.append(info)
        return Agent(role, config, episode=info, on_close=on_close, rubric=env.rubric(role))

    return make


async def play(script: Script, *, limit: float | None = None, task_idx: int = 3) -> tuple:
    env = Pair(script)
    task = env.tasks(task_idx + 1)[task_idx]
    episode = Episode(f"pair/{task_idx}/1", "pair", task, rollout=1)
    stamps: list[EpisodeInfo] = []
    result = await run_episode(env, episode, factory(env, stamps), timeout=limit)
    assert result is episode
    return env, episode, stamps


def by_role(episode: Episode) -> dict[str, Trace]:
    traces = {t.agent.name: t for t in episode.traces}
    assert len(traces) == len(episode.traces)
    return traces


async def relay(task: Task, agents: Agents) -> None:
    async with agents.host.chat(task) as host, agents.guest.chat(Task(task.idx)) as guest:
        reply = await host.turn()
        for _ in range(2):
            reply = await guest.turn(reply.text)
            reply = await host.turn(reply.text)


async def test_a_completed_episode_stamps_and_scores_every_trace() -> None:
    env, episode, stamps = await play(relay)
    assert (episode.ok, episode.stop, episode.errors) == (True, "completed", [])
    assert [t.agent.name for t in episode.traces] == ["guest", "host"]  # in close order
    info = EpisodeInfo("pair/3/1", "pair", 3, 1)
    assert episode.info_stamp == info
    assert stamps == [info, info]
    assert stamps[0] is stamps[1]
    traces = by_role(episode)
    for trace in episode.traces:
        assert trace.episode is stamps[0]
        assert trace.stop_condition == "user_closed"
        assert trace.rewards == {"took_part": 1.0}
    assert traces["host"].agent == AgentStamp("host", "builtin/echo", "null", True)
    assert traces["guest"].agent == AgentStamp("guest", "builtin/echo?latency_ms=10", "null", False)
    assert len(traces["host"].turns) == 3
    assert len(traces["guest"].turns) == 2
    assert traces["host"].last_text == "opening 3"  # echoed back and forth
    assert env.scored == {"host": 1, "guest": 1}
    assert episode.timing.started_at <= episode.timing.ended_at


async def test_env_error_fails_the_episode_and_closes_every_session() -> None:
    async def broken(task: Task, agents: Agents) -> None:
        leftover = agents.guest.chat(Task(task.idx))  # never closed by the env
        await leftover.turn("hello")
        async with agents.host.chat(task) as host:
            await host.turn()
            raise ValueError("the referee crashed")

    env, episode, _ = await play(broken)
    assert (episode.ok, episode.cause, episode.stop) == (False, "env", "env_error")
    assert episode.errors == [ErrorInfo("env", "the referee crashed", "ValueError")]
    traces = by_role(episode)
    assert set(traces) == {"host", "guest"}
    for trace in traces.values():
        assert trace.stop_condition == "env_error"
        assert trace.rewards == {"took_part": 1.0}
    assert env.scored == {"host": 1, "guest": 1}


async def test_env_error_in_a_task_of_the_envs_own_nursery() -> None:
    async def broken(task: Task, agents: Agents) -> None:
        async def seat() -> None:
            async with agents.host.chat(task) as host:
                await host.turn()
                raise KeyError("seat")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(seat)

    env, episode, _ = await play(broken)
    assert episode.stop == "env_error"
    [error] = episode.errors
    assert (error.kind, error.type) == ("env", "KeyError")
    assert env.scored == {"host": 1}


async def test_sessions_left_open_are_closed_when_run_returns() -> None:
    sessions = []

    async def forgetful(task: Task, agents: Agents) -> None:
        sessions.append(agents.host.chat(task))
        sessions.append(agents.guest.chat(Task(task.idx)))
        sessions.append(agents.guest.chat(Task(task.idx)))
        await sessions[0].turn()
        await sessions[1].turn("hi")

    env, episode, _ = await play(forgetful)
    assert (episode.ok, episode.stop) == (True, "completed")
    assert [s.state for s in sessions] == [SessionState.CLOSED] * 3
    assert {id(s.trace) for s in sessions} == {id(t) for t in episode.traces}
    assert [t.stop_condition for t in episode.traces] == ["user_closed"] * 3
    assert env.scored == {"host": 1, "guest": 2}
    assert [t.rewards["took_part"] for t in episode.traces] == [1.0, 1.0, 0.0]


async def test_episode_timeout_stops_the_env_and_closes_every_session(autojump_clock) -> None:
    sessions = {}

    async def slow(task: Task, agents: Agents) -> None:
        sessions["leftover"] = agents.guest.chat(Task(task.idx))
        async with agents.host.chat(task) as host:
            sessions["host"] = host
            await host.turn()
            await trio.sleep(100)

    env, episode, _ = await play(slow, limit=5)
    # a timeout is an outcome, not an infrastructure failure (_exchange.outcome)
    assert (episode.ok, episode.cause, episode.stop) == (True, None, "episode_timeout")
    assert episode.errors == [
        ErrorInfo("timeout", "the episode took longer than 5s", "TooSlowError")
    ]
    assert episode.timing.wall_s == 5
    assert trio.current_time() == 5
    assert env.scored == {"host": 1, "guest": 1}
    assert sessions["leftover"].trace.stop_condition == "episode_timeout"
    # the `async with` block was cancelled by the timeout: the session says which
    assert sessions["host"].trace.stop_condition == "episode_timeout"
    assert len(episode.traces) == 2


async def test_an_episode_within_its_timeout_completes(autojump_clock) -> None:
    _, episode, _ = await play(relay, limit=10)
    assert (episode.ok, episode.stop) == (True, "completed")
    assert episode.timing.wall_s == pytest.approx(0.02)  # two guest calls of 10 ms


async def test_a_cancelled_episode_records_why_and_closes_every_session(autojump_clock) -> None:
    async def endless(task: Task, agents: Agents) -> None:
        agents.host.chat(task)  # left open
        async with agents.guest.chat(Task(task.idx)) as guest:
            while True:
                await guest.turn("again")

    env = Pair(endless)
    episode = Episode("pair/0/0", "pair", env.tasks(1)[0])
    with trio.move_on_after(1.005) as scope:
        await run_episode(env, episode, factory(env))
    assert scope.cancelled_caught  # run_episode re-raised the cancellation
    assert (episode.ok, episode.cause, episode.stop) == (False, "cancelled", "cancelled")
    assert episode.errors == [ErrorInfo("cancelled", "the episode was cancelled", "Cancelled")]
    assert [t.stop_condition for t in episode.traces] == ["cancelled", "cancelled"]
    assert env.scored == {"host": 1, "guest": 1}
    guest = by_role(episode)["guest"]
    assert len(guest.turns) == 100  # 10 ms each; the 101st was cut off and not recorded
    assert guest.timing.agent_s == pytest.approx(1.005)


async def test_a_retried_run_joins_the_episode_once() -> None:
    async def one_shot(task: Task, agents: Agents) -> None:
        await agents.host.run(task)

    _, episode, _ = await play(one_shot)
    [trace] = episode.traces
    assert trace.stop_condition == "agent_completed"
    assert trace.episode == episode.info_stamp
