"""bfcl-multi-turn with real agent CLIs as the assistant (``--env.tools=mcp``): Codex
and Claude Code list the episode's BFCL functions from the env's MCP server and call
them themselves, offline against the interception server, on a model that plays
BFCL's ground truth one call per model call. A ``miss_func`` task: the held-back
function is listed from its turn on, and BFCL's checker accepts the run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import trio
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from test_agent_clis import LIMIT, Shim
from test_bfcl import MORE, _tool_call

from taketurns import Agent, AgentConfig, AssistantMessage, Episode, ToolMessage, Trace, UserMessage
from taketurns._exchange.agent import make_harness
from taketurns.env import EpisodeInfo, ModelClient, ModelRequest, ModelResponse
from taketurns.envs.bfcl import BfclConfig, BfclMultiTurn
from taketurns.harness import text_of
from taketurns.http import InterceptionServer
from taketurns.testing import run_episode

PREFIX = "mcp__bfcl__"  # how both agents name server "bfcl"'s tools to the model


class OneCallAtATime(ModelClient):
    """BFCL's ground truth for one task, one call per model call, under the agent's
    names for the tools; the user turn is found among the request's user messages
    (an agent adds its own context messages)."""

    def __init__(self, entry: dict[str, Any], truth: list[list[str]]) -> None:
        self.entry, self.truth = entry, truth
        self.texts = [(t[0]["content"] if t else MORE) for t in entry["question"]]
        self.offered: list[set[str]] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        messages = request.messages
        asked = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
        last = max(i for i in asked if any(t in text_of(messages[i].content) for t in self.texts))
        turn = (
            sum(1 for i in asked if any(t in text_of(messages[i].content) for t in self.texts)) - 1
        )
        self.offered.append({t["function"]["name"].removeprefix(PREFIX) for t in request.tools})
        done = sum(isinstance(m, ToolMessage) for m in messages[last:])
        calls = self.truth[turn]
        if done >= len(calls):
            return ModelResponse(AssistantMessage("Done."))
        call = _tool_call(done, calls[done], self.entry["involved_classes"])
        call = type(call)(f"call_{turn}_{done}", PREFIX + call.name, call.arguments)
        return ModelResponse(AssistantMessage(None, (call,)), finish_reason="tool_calls")


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["codex", "claude-code"])
async def test_an_agent_cli_plays_a_miss_func_task_over_mcp(
    harness: str, server: InterceptionServer, tmp_path: Any
) -> None:
    env = BfclMultiTurn(BfclConfig(category="miss_func", tools="mcp"))
    task = env.tasks(1)[0]
    entry, truth = env.entries[0]
    model = OneCallAtATime(entry, truth)
    shim = Shim(tmp_path, harness)
    options: dict[str, Any] = {"binary": str(shim.path)}

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        return Agent(
            role,
            # unsandboxed: the shim records its runs outside the scratch directory
            AgentConfig(model="builtin/echo", sandbox="none"),
            client=model,
            harness=make_harness(harness, options, field="env.agent"),
            services={"interception": server},
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    episode = Episode(f"bfcl-multi-turn/0/{harness}", env.id, task)
    with trio.fail_after(6 * LIMIT):
        async with env.services():
            await run_episode(env, episode, make)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    verdict = trace.info["bfcl"]
    assert verdict["valid"] is True, json.dumps(verdict)[:2000]
    assert trace.rewards["valid"] == 1.0
    names = [[[c.split("(")[0] for c in step] for step in turn] for turn in verdict["calls"]]
    assert names == [[[c.split("(")[0]] for c in turn] for turn in truth]  # a call a step
    ((_, held),) = entry["missed_function"].items()
    name = held[0]["name"]
    # the held-back function is listed from its turn on, by the agent's own MCP client
    before = [o for o in model.offered if "cd" in o and name not in o]
    after = [o for o in model.offered if name in o]
    assert before
    assert after
