"""The ``single-agent`` env: a taskset played one shot by one agent, directly through
``run_episode`` and end to end through ``taketurns eval <taskset>``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from scripted import ScriptedModel, tool_call

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    Episode,
    Resources,
    Task,
    Taskset,
    ToolMessage,
    Trace,
    metric,
    register_taskset,
    reward,
)
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient, env_registry
from taketurns.envs.jsonl import JsonlTaskset
from taketurns.envs.single import SingleAgentConfig, SingleAgentEnv
from taketurns.testing import run_episode


@register_taskset("test-single-lamps")
class Lamps(Taskset):
    """Task i: turn on lamp i, with a ``switch_on`` tool over a per-rollout store."""

    harness = "tools"

    def tasks(self, num_tasks: int) -> list[Task]:
        return [
            Task(i, f"lamp-{i}", f"Please turn on lamp {i}.", answer=i) for i in range(num_tasks)
        ]

    def resources(self, task: Task) -> Resources:
        lit: set[int] = set()

        def switch_on(lamp: int) -> str:
            """Turn one lamp on.

            Args:
                lamp: the lamp's number
            """
            lit.add(lamp)
            return f"lamp {lamp} is on"

        return Resources(tools=(switch_on,), state={"lit": lit})

    @reward
    def lit_right(self, task: Task, trace: Trace) -> float:
        return float(trace.state["lit"] == {task.answer})

    @metric
    def lamps_lit(self, task: Task, trace: Trace) -> float:
        return float(len(trace.state["lit"]))


@register_taskset("test-single-unprompted")
class Unprompted(Taskset):
    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i) for i in range(num_tasks)]


Factory = Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]


def factory(env: SingleAgentEnv, client: ModelClient | None = None) -> Factory:
    """Agents as the eval runner builds them (the env picks the harness), over
    ``client`` (default: the built-in model)."""

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        config = attrs.evolve(config, harness=config.harness or env.default_harness(role))
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    return make


async def play(env: SingleAgentEnv, task: Task, client: ModelClient | None = None) -> Episode:
    episode = Episode(f"single-agent/{task.idx}/0", "single-agent", task)
    return await run_episode(env, episode, factory(env, client))


# --- one episode ------------------------------------------------------------------


async def test_one_shot_with_the_tasksets_tools_and_state() -> None:
    env = SingleAgentEnv(SingleAgentConfig(taskset="test-single-lamps"))
    task = env.tasks(3)[2]
    model = ScriptedModel(tool_call("c1", "switch_on", '{"lamp": 2}'), "Lamp 2 is on.")
    episode = await play(env, task, model)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.agent.harness == "tools"
    assert trace.stop_condition == "agent_completed"
    assert trace.state["lit"] == {2}
    assert trace.rewards == {"lit_right": 1.0}
    assert trace.metrics == {"lamps_lit": 1.0}
    assert ToolMessage("c1", "lamp 2 is on", "switch_on") in trace.messages
    assert model.requests[0].tools[0]["function"]["name"] == "switch_on"


async def test_every_rollout_gets_fresh_resources() -> None:
    env = SingleAgentEnv(SingleAgentConfig(taskset="test-single-lamps"))
    task = env.tasks(1)[0]
    for _ in range(2):
        model = ScriptedModel(tool_call("c", "switch_on", '{"lamp": 0}'), "done")
        (trace,) = (await play(env, task, model)).traces
        assert trace.state["lit"] == {0}


async def test_jsonl_row_is_scored_by_its_rubric(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "Capital of France?", "answer": "Paris"}) + "\n")
    env = SingleAgentEnv(SingleAgentConfig(taskset={"id": "jsonl", "path": str(f)}))
    assert isinstance(env.taskset, JsonlTaskset)
    (task,) = env.tasks(5)
    (trace,) = (await play(env, task, ScriptedModel(" paris "))).traces
    assert trace.agent.harness == "null"
    assert (trace.rewards, trace.metrics) == ({"exact_match": 1.0}, {"contains": 1.0})
    assert trace.stop_condition == "agent_completed"


async def test_a_prompt_less_task_fails_its_episode_clearly() -> None:
    env = SingleAgentEnv(SingleAgentConfig(taskset="test-single-unprompted"))
    episode = await play(env, env.tasks(1)[0])
    assert not episode.ok
    assert episode.stop == "env_error"
    assert "needs a prompted task" in episode.errors[0].message


def test_roles_and_registration() -> None:
    assert env_registry.get("single-agent") is SingleAgentEnv
    env = SingleAgentEnv(SingleAgentConfig(taskset="test-single-lamps"))
    assert list(env.roles) == ["agent"]
    assert env.default_harness("agent") == "tools"


@pytest.mark.parametrize(
    ("taskset", "needle"),
    [
        (None, "env.taskset: name a taskset (--env.taskset=ID); known tasksets:"),
        ("nope", "env.taskset.id: unknown taskset 'nope'; known tasksets:"),
        ({"path": "x"}, "env.taskset: name a taskset"),
        (
            {"id": "jsonl"},
            "jsonl taskset: path is missing; name the JSONL file of tasks",
        ),
        ({"id": "test-single-lamps", "seed": 1}, "env.taskset.seed: unknown option"),
    ],
)
def test_bad_taskset_is_refused_at_construction(taskset: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        SingleAgentEnv(SingleAgentConfig(taskset=taskset))
    assert needle in str(info.value)


# --- end to end -------------------------------------------------------------------


def episodes(out: Path) -> list[dict[str, Any]]:
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda e: e["task"]["idx"])


def test_eval_a_tool_taskset_by_its_id(tmp_path: Path) -> None:
    # builtin/tools calls the first tool with the number in the user's text
    out = tmp_path / "run"
    argv = ["eval", "test-single-lamps", "-n", "3", "--model", "builtin/tools", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    found = episodes(out)
    assert len(found) == 3
    for e in found:
        assert e["ok"]
        assert e["env"] == "single-agent"
        (trace,) = e["traces"]
        assert trace["agent"]["harness"] == "tools"
        assert trace["stop_condition"] == "agent_completed"
        assert trace["rewards"] == {"lit_right": 1.0}
        assert "state" not in trace
    assert "test-single-lamps" in (out / "config.toml").read_text()


def test_eval_single_agent_named_explicitly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "single-agent", "--env.taskset=test-single-lamps", "-n", "2", "-o", str(out)]
    assert main([*argv, "--model=builtin/tools", "--no-progress"]) == 0
    assert [e["traces"][0]["reward"] for e in episodes(out)] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["single-agent"], "env.taskset: name a taskset"),
        (["single-agent", "--env.taskset=nope"], "env.taskset.id: unknown taskset 'nope'"),
        (["test-single-lamps", "--env.taskset.seed=3"], "env.taskset.seed: unknown option"),
        (["test-single-lamps", "--env.agent.limits.max_turns=0"], "env.agent.limits.max_turns"),
        (["test-single-lamps", "--env.player=x"], "env.player: unknown option"),
    ],
)
def test_bad_options_are_refused_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    assert main(["eval", *args, "-o", str(out), "--no-progress"]) == 2
    assert needle in " ".join(capsys.readouterr().err.split())
    assert not out.exists()
