"""Time on the endpoint is infrastructure (issue 23, item 9): a timeout (segment,
rollout, episode) that fires while a model request is in flight fails the trace with
cause ``model``; one that fires while the agent's own harness or the env runs is the
timeout's outcome. No env scores a stall: Kuhn neither forfeits a seat whose endpoint
stalled nor scores both seats 0.

In-process models under the autojump clock (no real I/O); the CLI against a real
stalling endpoint on 127.0.0.1 (tests/faultserver.py) with the real clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import faultserver
import pytest
import trio
from faultserver import OK, Call, Fault, FaultyEndpoint, in_thread
from scripted import ScriptedModel, Sleep, ToolLoopHarness, make_agent

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    Env,
    EnvConfig,
    Episode,
    Task,
    Timeouts,
    Trace,
    read_episodes,
)
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker
from taketurns.harnesses.program import ProgramHarness
from taketurns.http import OpenAIClient, open_interception_server
from taketurns.testing import run_episode

PROMPTED = Task(0, "prompted", prompt="What is two plus two?")


def model_errors(trace: Trace) -> list[str]:
    return [e.message for e in trace.errors if e.kind == "model"]


# -- one session, in process ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeouts", "which"),
    [(Timeouts(segment_s=5), "segment_timeout"), (Timeouts(rollout_s=5), "rollout_timeout")],
)
async def test_a_timeout_catching_a_model_request_is_a_model_failure(
    autojump_clock: trio.abc.Clock, timeouts: Timeouts, which: str
) -> None:
    agent = make_agent(ScriptedModel(Sleep(60), "late"), timeouts=timeouts)
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert trio.current_time() == 5
    assert (reply.stopped, reply.stop_condition) == (True, "model_error")
    [message] = model_errors(session.trace)
    assert f"the {which} fired while the model endpoint was being waited on" in message
    assert "request for turn 0, sent 5s before" in message
    assert session.trace.turns == []  # the request never had an answer to record


@pytest.mark.parametrize(
    ("timeouts", "which"),
    [(Timeouts(segment_s=5), "segment_timeout"), (Timeouts(rollout_s=5), "rollout_timeout")],
)
async def test_a_timeout_while_the_harness_works_stays_the_timeout(
    autojump_clock: trio.abc.Clock, timeouts: Timeouts, which: str
) -> None:
    agent = make_agent(harness=ToolLoopHarness(sleep=60), timeouts=timeouts)
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert (reply.stopped, reply.stop_condition) == (True, which)
    assert session.trace.errors == []


async def test_a_request_answered_before_the_timeout_is_not_held_against_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The model answered at 4 s; the harness's own tool loop was running at 5 s."""

    class SlowTools(ToolLoopHarness):
        async def launch(self, rollout: Any, prompt: Any) -> None:
            await rollout.complete(prompt.wire_messages())
            await trio.sleep(60)  # the harness's own work

    agent = make_agent(ScriptedModel(Sleep(4), "done"), SlowTools(), timeouts=Timeouts(segment_s=5))
    async with agent.chat(PROMPTED) as session:
        boundary = session.rollout.boundary
        reply = await session.turn()
    assert reply.stop_condition == "segment_timeout"
    assert boundary.in_flight is None
    assert boundary.waited_at(3.9) is not None
    assert boundary.waited_at(4.0) is None  # answered at 4 s


async def test_the_boundary_names_the_request_in_flight(autojump_clock: trio.abc.Clock) -> None:
    agent = make_agent(ScriptedModel(Sleep(10), "late"))
    seen = []
    async with agent.chat(PROMPTED) as session, trio.open_nursery() as nursery:
        boundary = session.rollout.boundary
        nursery.start_soon(session.turn)
        await trio.sleep(3)
        seen.append(boundary.in_flight)
    [request] = seen
    assert request is not None
    assert request.messages[-1].content == "What is two plus two?"
    assert boundary.in_flight is None
    assert boundary.waited_at(3) is request


# -- episodes and Kuhn, in process --------------------------------------------------------------


def kuhn_factory(env: KuhnPoker, clients: dict[str, ModelClient]) -> Any:
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: Any) -> Agent:
        return Agent(
            role,
            config,
            client=clients[role],
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    return make


async def kuhn(
    env: KuhnPoker, clients: dict[str, ModelClient], *, limit: float | None = None
) -> tuple[Episode, dict[str, Trace]]:
    task = env.tasks(1)[0]
    episode = Episode("kuhn-poker/0/0", "kuhn-poker", task)
    await run_episode(env, episode, kuhn_factory(env, clients), timeout=limit)
    return episode, {t.agent.name: t for t in episode.traces}


async def test_kuhn_never_forfeits_a_seat_whose_endpoint_stalled(
    autojump_clock: trio.abc.Clock,
) -> None:
    """segment_s=5 and an endpoint that answers after 60 s: a failed episode, not a
    forfeit (-1/+1)."""
    seat = AgentConfig(timeouts=Timeouts(segment_s=5))
    env = KuhnPoker(KuhnConfig(player0=seat, player1=seat))
    clients = {"player0": ScriptedModel(Sleep(60), "[bet]"), "player1": ScriptedModel("[call]")}
    episode, traces = await kuhn(env, clients)
    assert (episode.ok, episode.cause, episode.stop) == (False, "model", "completed")
    p0, p1 = traces["player0"], traces["player1"]
    assert p0.stop_condition == "model_error"
    assert "segment_timeout" in model_errors(p0)[0]
    assert "payoff" not in p0.info
    assert "payoff" not in p1.info
    assert (p0.info["forfeited"], p1.info["forfeited"]) == (False, False)


async def test_kuhn_at_the_episode_timeout_scores_no_stall(autojump_clock: trio.abc.Clock) -> None:
    """--episode-timeout while player0 waits on its endpoint: the episode failed with
    cause model, not a 0/0 result; player1, which was not waiting, timed out."""
    env = KuhnPoker()
    clients = {"player0": ScriptedModel(Sleep(60), "[bet]"), "player1": ScriptedModel("[call]")}
    episode, traces = await kuhn(env, clients, limit=5)
    assert trio.current_time() == 5
    assert (episode.ok, episode.cause, episode.stop) == (False, "model", "episode_timeout")
    p0, p1 = traces["player0"], traces["player1"]
    assert (p0.stop_condition, p1.stop_condition) == ("model_error", "episode_timeout")
    [message] = model_errors(p0)
    assert "the episode_timeout fired" in message
    assert p1.errors == []


@attrs.define
class SoloConfig(EnvConfig):
    solo: AgentConfig = attrs.field(factory=AgentConfig)


class Forgetful(Env):
    """Opens a session and never closes it: the episode closes it."""

    config_class = SoloConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [PROMPTED]

    async def run(self, task: Task, agents: Agents) -> None:
        session = agents.solo.chat(task)
        await session.turn()


async def test_a_session_left_open_waiting_at_the_episode_timeout_fails_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    env = Forgetful()

    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: Any) -> Agent:
        client = ScriptedModel(Sleep(60), "late")
        return Agent(role, config, client=client, episode=info, on_close=on_close)

    episode = Episode("forgetful/0/0", "forgetful", PROMPTED)
    await run_episode(env, episode, make, timeout=5)
    assert (episode.ok, episode.cause, episode.stop) == (False, "model", "episode_timeout")
    [trace] = episode.traces
    assert trace.stop_condition == "model_error"
    assert "the episode_timeout fired" in model_errors(trace)[0]


async def test_an_episode_timeout_while_the_env_runs_stays_an_outcome(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Both seats answered; the env itself is slow (player1's model answered at once,
    then the referee waits): the timeout is the episode's outcome."""

    class SlowReferee(KuhnPoker):
        async def _ask(self, session: Any, history: Any) -> str | None:
            action = await super()._ask(session, history)
            await trio.sleep(60)
            return action

    clients = {"player0": ScriptedModel("[bet]"), "player1": ScriptedModel("[call]")}
    episode, traces = await kuhn(SlowReferee(), clients, limit=5)
    assert (episode.ok, episode.cause, episode.stop) == (True, None, "episode_timeout")
    assert {t.stop_condition for t in traces.values()} == {"episode_timeout"}


# -- real HTTP: an agent program through the interception server, and the CLI -----------------


async def test_a_program_waiting_on_a_stalled_endpoint_is_a_model_failure(
    nursery: trio.Nursery,
) -> None:
    """The out-of-process path: the program's request reaches the boundary through the
    interception server, the real endpoint stalls, the segment times out."""
    endpoint = await faultserver.start(nursery, lambda call: Fault("stall", delay=60.0))
    config = AgentConfig(model="faulty", harness="program", timeouts=Timeouts(segment_s=8))
    with trio.fail_after(60):
        async with (
            OpenAIClient(endpoint.base_url, timeout=120, retries=0) as client,
            open_interception_server(graceful_timeout=0.1) as server,
        ):
            agent = Agent(
                "agent",
                config,
                client=client,
                harness=ProgramHarness(),
                services={"interception": server},
            )
            async with agent.chat(PROMPTED) as session:
                reply = await session.turn()
    assert len(endpoint.calls) == 1  # the program's request reached the endpoint
    assert (reply.stopped, reply.stop_condition) == (True, "model_error")
    [message] = model_errors(session.trace)
    assert "the segment_timeout fired while the model endpoint was being waited on" in message


def stall_after_preflight(call: Call) -> Fault:
    return OK if call.preflight else Fault("stall", delay=30.0)


def kuhn_cli(url: str, out: Path, *extra: str) -> int:
    argv = ["eval", "kuhn-poker", "-n", "1", "--model", "faulty", "--base-url", url]
    return main([*argv, "-o", str(out), "--no-progress", *extra])


def the_episode(out: Path) -> dict[str, Any]:
    [episode] = read_episodes(out / "episodes.jsonl")
    return episode


def test_cli_kuhn_with_a_stalled_endpoint_fails_and_is_rerun(tmp_path: Path) -> None:
    out = tmp_path / "run"
    segment = ["--env.player0.timeouts.segment_s=1", "--env.player1.timeouts.segment_s=1"]
    with in_thread(FaultyEndpoint(stall_after_preflight)) as endpoint:
        assert kuhn_cli(endpoint.base_url, out, *segment) == 1
        episode = the_episode(out)
        assert (episode["ok"], episode["cause"]) == (False, "model")
        p0 = next(t for t in episode["traces"] if t["agent"]["name"] == "player0")
        assert p0["stop_condition"] == "model_error"
        assert "segment_timeout" in p0["errors"][0]["message"]
        assert p0["metrics"] == {"forfeit": 0.0}
        summary = json.loads((out / "summary.json").read_text())
        assert summary["failed_by_cause"] == {"model": 1}
        assert summary["agents"]["player0"]["reward_mean"] is None  # no ok trace: no mean
        page = (out / "report.html").read_text()
        reward_row = page.split('data-row="reward_mean"')[1].split("</tr>")[0]
        assert reward_row.count('<td class="na">-</td>') == 2
        # --resume reruns the failed episode (the endpoint answers now)
        endpoint.decide = lambda call: OK
        assert kuhn_cli(endpoint.base_url, out, "--resume") == 0
    episode = the_episode(out)
    assert (episode["ok"], episode["cause"]) == (True, None)


def test_cli_kuhn_at_the_episode_timeout_with_a_stalled_endpoint_fails(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with in_thread(FaultyEndpoint(stall_after_preflight)) as endpoint:
        assert kuhn_cli(endpoint.base_url, out, "--episode-timeout", "1") == 1
    episode = the_episode(out)
    assert (episode["ok"], episode["cause"], episode["stop"]) == (False, "model", "episode_timeout")
    stops = {t["agent"]["name"]: t["stop_condition"] for t in episode["traces"]}
    assert stops == {"player0": "model_error", "player1": "episode_timeout"}
