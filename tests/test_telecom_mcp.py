"""``telecom-lite`` with the user's device tools over MCP (``user_tools = "mcp"``): a
real MCP server (the official SDK, streamable HTTP on a loopback port, in the env's
``services()``) on the episode's one shared world. An episode over MCP gives the same
attributed log, conversations and rewards as in process. Real sockets: real clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from required import needed

from taketurns import Agent, AgentConfig, Episode, OptionError, read_episodes
from taketurns._cli.main import main
from taketurns.envs.telecom import KINDS, TelecomConfig, TelecomLite, make_world
from taketurns.envs.telecom_mcp import DeviceFace
from taketurns.envs.telecom_world import Device
from taketurns.harness import McpServer, ToolCall, as_tools, open_mcp_servers
from taketurns.testing import run_episode

needed("mcp", "pip install -e '.[test]' (the official MCP SDK; bash .ci/run)")


async def play(env: TelecomLite, kind_index: int) -> Episode:
    task = env.tasks(kind_index + 1)[kind_index]

    def make(role: str, config: AgentConfig, info: Any, on_close: Any) -> Agent:
        model = config.model or env.default_model(role)
        config = attrs.evolve(config, model=model, harness="tools")
        return Agent(role, config, episode=info, rubric=env.rubric(role), on_close=on_close)

    episode = Episode(f"telecom-lite/{task.idx}/0", "telecom-lite", task)
    await run_episode(env, episode, make)
    return episode


def seen(episode: Episode) -> dict[str, Any]:
    """What must not differ: the log, each seat's messages, tools offered and rewards."""
    traces = {t.agent.name: t for t in episode.traces}
    return {
        "log": traces["user"].info["log"],
        "final": traces["user"].info["final"],
        "ended_by": traces["user"].info["ended_by"],
        "messages": {n: t.messages for n, t in traces.items()},
        "tools": {n: [turn.tools for turn in t.turns] for n, t in traces.items()},
        "rewards": {n: t.rewards for n, t in traces.items()},
    }


@pytest.mark.parametrize("kind", range(len(KINDS)))
async def test_mcp_user_tools_give_the_same_episode_as_in_process(kind: int) -> None:
    in_process = await play(TelecomLite(), kind)
    env = TelecomLite(TelecomConfig(user_tools="mcp"))
    with trio.fail_after(60):
        async with env.services():
            over_mcp = await play(env, kind)
    assert in_process.ok, in_process.errors
    assert over_mcp.ok, over_mcp.errors
    expected = seen(in_process)
    assert seen(over_mcp) == expected
    assert {e["seat"] for e in expected["log"]} == {"assistant", "user"}
    assert expected["rewards"] == {"assistant": {"resolved": 1.0}, "user": {"resolved": 1.0}}


async def test_the_server_lists_the_in_process_tools_and_ends_with_the_episode() -> None:
    face = DeviceFace()
    world = make_world("data", "555-0101")
    device = Device(world)
    with trio.fail_after(60):
        async with face.serving():
            with face.episode(device) as url:
                async with open_mcp_servers([McpServer("device", url=url)]) as (tools, _):
                    local = as_tools(device.all())
                    assert [t.name for t in tools] == list(local)
                    assert [t.schema for t in tools] == [t.schema for t in local.values()]
                    by_name = {t.name: t for t in tools}
                    answer = await by_name["toggle_mobile_data"].call(
                        ToolCall("c1", "toggle_mobile_data", "{}")
                    )
                    assert "mobile data on" in answer.content
                    bad = await by_name["read_status_bar"].call(
                        ToolCall("c2", "read_status_bar", '{"loud": true}')
                    )
                    assert bad.content.startswith("Error: ")
            assert [(e["seat"], e["tool"]) for e in world.log] == [("user", "toggle_mobile_data")]
            assert world.device.mobile_data
            # the episode's path is gone once it ended; an unknown one never existed
            async with httpx2.AsyncClient() as http:
                for path in (url, f"{face.base_url}/nope/mcp"):
                    response = await http.post(path, json={"jsonrpc": "2.0", "id": 1})
                    assert response.status_code == 404


def test_user_tools_is_checked() -> None:
    with pytest.raises(OptionError, match="user_tools"):
        TelecomConfig(user_tools="grpc")
    assert TelecomConfig().user_tools == "python"


def test_the_cli_runs_the_user_over_mcp_with_the_same_results(tmp_path: Path) -> None:
    runs = {}
    for tools in ("python", "mcp"):
        out = tmp_path / tools
        argv = ["eval", "telecom-lite", "-n", "6", "-c", "3", "--no-progress", "-o", str(out)]
        assert main([*argv, f"--env.user_tools={tools}"]) == 0
        runs[tools] = {
            e["id"]: (
                e["traces"][0]["info"]["log"],
                sorted(
                    (t["agent"]["name"], t["reward"], json.dumps(t["messages"]))
                    for t in e["traces"]
                ),
            )
            for e in read_episodes(out / "episodes.jsonl")
        }
    assert len(runs["mcp"]) == 6
    assert runs["mcp"] == runs["python"]
