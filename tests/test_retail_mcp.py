"""retail-lite over MCP (``tools = "mcp"``): the same store behind a per-rollout MCP
stdio server gives the same rewards as the in-process tools on the same seeds."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import trio
from procs import children
from test_retail import _other_pending, _scripted, clerk_agent

from taketurns import ConfigError, Trace
from taketurns._cli.main import main
from taketurns._output.records import read_episodes
from taketurns.env import ModelClient
from taketurns.envs.retail import RetailConfig, RetailLite
from taketurns.taskset import open_taskset


async def _run(taskset: RetailLite, index: int, client: ModelClient | None = None) -> Trace:
    task = taskset.tasks(index + 1)[index]
    async with taskset.open_resources(task) as resources:
        agent = clerk_agent(taskset, client)
        return await agent.run(task, tools=resources.tools, state=resources.state)


async def _both(seed: int, count: int, client: Any = None) -> list[tuple[Trace, Trace]]:
    """(in-process trace, MCP trace) of the first ``count`` tasks of ``seed``."""
    python = RetailLite(RetailConfig(seed=seed))
    remote = RetailLite(RetailConfig(seed=seed, tools="mcp"))
    results: dict[int, tuple[Trace, Trace]] = {}

    async def one(i: int) -> None:
        results[i] = (await _run(python, i, client), await _run(remote, i, client))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(one, i)
    return [results[i] for i in range(count)]


@pytest.mark.parametrize("seed", [0, 7])
async def test_a_careful_clerk_scores_the_same_over_mcp(seed: int) -> None:
    for python, remote in await _both(seed, 4):  # one task of every kind
        assert remote.errors == []
        assert remote.rewards == python.rewards == {"success": 1.0}
        assert remote.metrics == python.metrics == {"state_match": 1.0, "info_match": 1.0}
        # the same tool calls, answered with the same text
        assert [m.content for m in remote.messages] == [m.content for m in python.messages]
    assert children() == []


async def test_wrong_writes_score_0_over_mcp_too() -> None:
    taskset = RetailLite(RetailConfig(kinds="cancel", tools="mcp"))
    task = taskset.tasks(1)[0]
    right = task.info["actions"][0]["arguments"]
    scripts = {
        "bad reason": ("cancel_pending_order", {**right, "reason": "not a reason"}),
        "wrong order": ("cancel_pending_order", {**right, "order_id": _other_pending(task)}),
        "broken rule": ("return_delivered_order_items", {**right, "item_ids": ["1"]}),
        "right": ("cancel_pending_order", right),
    }
    traces: dict[str, Trace] = {}

    async def one(name: str) -> None:
        traces[name] = await _run(taskset, 0, _scripted(scripts[name]))

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for name in scripts:
                nursery.start_soon(one, name)
    assert {name: t.rewards["success"] for name, t in traces.items()} == {
        "bad reason": 0.0,
        "wrong order": 0.0,  # cancelling another order is a wrong write
        "broken rule": 0.0,
        "right": 1.0,
    }
    assert traces["bad reason"].metrics == {"state_match": 0.0, "info_match": 1.0}
    said = {name: [m.content for m in t.messages if m.role == "tool"] for name, t in traces.items()}
    assert said["bad reason"][0].startswith("Error: ")  # the SDK checks the reason's enum
    assert "no longer needed" in said["bad reason"][0]
    assert said["broken rule"][0].startswith("Error: StoreError: order #W")  # a store rule


def test_tools_option_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"env\.taskset\.tools = 'grpc': expected python or mcp"):
        open_taskset({"id": "retail-lite", "tools": "grpc"})


def test_cli_retail_lite_over_mcp_scores_as_in_process(tmp_path: Path) -> None:
    rewards = {}
    for tools in ("python", "mcp"):
        out = tmp_path / tools
        argv = ["eval", "retail-lite", "-n", "4", "-c", "4", "--model", "builtin/tools"]
        argv += [f"--env.taskset.tools={tools}", "-o", str(out), "--no-progress"]
        assert main(argv) == 0
        episodes = sorted(read_episodes(out / "episodes.jsonl"), key=lambda e: e["task"]["idx"])
        assert all(e["ok"] for e in episodes), [e["errors"] for e in episodes]
        rewards[tools] = [
            (t["rewards"], t["metrics"], [m["content"] for m in t["messages"]])
            for e in episodes
            for t in e["traces"]
        ]
    assert rewards["mcp"] == rewards["python"]
    resolved = tomllib.loads((tmp_path / "mcp" / "config.toml").read_text())
    assert resolved["env"]["taskset"]["tools"] == "mcp"  # -C DIR/config.toml reruns it


def test_cli_user_sim_over_retail_lite_with_mcp_tools(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "user-sim", "--env.taskset=retail-lite", "--env.taskset.tools=mcp"]
    argv += ["--env.assistant.model=builtin/tools", "-n", "2", "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    for episode in read_episodes(out / "episodes.jsonl"):
        assert episode["ok"], episode["errors"]
        assistant = next(t for t in episode["traces"] if t["agent"]["name"] == "assistant")
        assert assistant["agent"]["harness"] == "tools"
        assert any(m["role"] == "tool" for m in assistant["messages"])
        assert set(assistant["metrics"]) >= {"state_match", "info_match"}
        assert assistant["errors"] == []
    assert children() == []
