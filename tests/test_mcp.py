"""MCP tool servers (the official SDK, real servers): per-rollout and shared
placement, stdio and streamable HTTP, every harness path, and every failure mode
ending as a tool error or a recorded failure with no server process left behind."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
import trio
from httpservers import serve_app
from procs import marked

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    HarnessError,
    McpServer,
    ToolCall,
    open_mcp_servers,
    open_taskset,
)
from taketurns._cli.main import main
from taketurns._output.records import read_episodes
from taketurns.envs.mcp_counter import make_server
from taketurns.testing import ScriptedModel

FAULTY = str(Path(__file__).with_name("mcp_faulty.py"))
COUNTER = [sys.executable, "-m", "taketurns.envs.mcp_counter"]


def _marker() -> tuple[str, dict[str, str]]:
    mark = f"tt-mcp-{uuid.uuid4().hex}"
    return mark, {"TT_TEST_MARK": mark}


def test_config_needs_command_or_url() -> None:
    with pytest.raises(ValueError, match="either command"):
        McpServer("x")
    with pytest.raises(ValueError, match="either command"):
        McpServer("x", command=["a"], url="http://h/mcp")
    with pytest.raises(ValueError, match="per_rollout or shared"):
        McpServer("x", command=["a"], placement="everywhere")


def test_taskset_table_is_checked_by_name(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    ref = {"id": "jsonl", "path": str(path), "mcp_servers": [{"name": "c", "placement": "x"}]}
    with pytest.raises(ConfigError, match=r"env\.taskset\.mcp_servers"):
        open_taskset(ref)
    ref["mcp_servers"] = [{"name": "c", "command": COUNTER}]
    taskset = open_taskset(ref)
    assert taskset.mcp_servers(None)[0].command == COUNTER


async def test_stdio_tools_answer_and_the_process_is_gone_after() -> None:
    mark, env = _marker()
    server = McpServer("counter", command=COUNTER, env=env)
    async with open_mcp_servers([server]) as (tools, connections):
        assert [t.name for t in tools] == ["bump", "whoami"]
        bump = tools[0]
        assert bump.schema["function"]["parameters"]["properties"]["by"]["type"] == "integer"
        assert (await bump.call(ToolCall("1", "bump", '{"by": 2}'))).content == "count=2"
        assert (await bump.call(ToolCall("2", "bump", "{}"))).content == "count=3"
        bad = await bump.call(ToolCall("3", "bump", '{"by": "lots"}'))
        assert bad.content.startswith("Error:")
        assert (await bump.call(ToolCall("4", "bump", "not json"))).content.startswith(
            "Error: the arguments are not valid JSON"
        )
        assert len(marked(mark)) == 1
        assert set(connections) == {"counter"}
    assert marked(mark) == []


def _counter_agent(model: ScriptedModel | None = None) -> Agent:
    return Agent("a", AgentConfig(model="builtin/tools", harness="tools"), client=model)


async def test_tools_harness_per_rollout_state_is_the_rollouts_own(tmp_path: Path) -> None:
    taskset = _jsonl_taskset(tmp_path, [{"name": "c", "command": COUNTER}])
    task = taskset.tasks(1)[0]
    agent = _counter_agent()
    said = []
    for _ in range(2):
        async with taskset.services(), taskset.open_resources(task) as resources:
            trace = await agent.run(task, tools=resources.tools, state=resources.state)
        said.append(trace.last_text)
        assert trace.messages[-2].role == "tool"
    assert said == ["The tool said: count=2", "The tool said: count=2"]


async def test_shared_server_counts_across_rollouts(tmp_path: Path) -> None:
    mark, env = _marker()
    table = {"name": "c", "command": COUNTER, "env": env, "placement": "shared"}
    taskset = _jsonl_taskset(tmp_path, [table])
    task = taskset.tasks(1)[0]
    agent = _counter_agent()
    said = []
    async with taskset.services():
        for _ in range(2):
            async with taskset.open_resources(task) as resources:
                trace = await agent.run(task, tools=resources.tools, state=resources.state)
            said.append(trace.last_text)
            assert len(marked(mark)) == 1
    assert said == ["The tool said: count=2", "The tool said: count=4"]
    assert marked(mark) == []
    with pytest.raises(HarnessError, match="shared MCP servers are opened once per eval"):
        async with taskset.open_resources(task):
            pass


def _jsonl_taskset(tmp_path: Path, servers: list[dict], prompt: str = "bump by=2") -> object:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"prompt": prompt}) + "\n")
    return open_taskset({"id": "jsonl", "path": str(path), "mcp_servers": servers})


async def test_streamable_http_server(nursery: trio.Nursery) -> None:
    app = make_server().streamable_http_app()
    root = await nursery.start(serve_app, app)
    server = McpServer("counter", url=f"{root}/mcp")
    async with open_mcp_servers([server]) as (tools, _):
        bump = {t.name: t for t in tools}["bump"]
        assert (await bump.call(ToolCall("1", "bump", '{"by": 5}'))).content == "count=5"
    async with open_mcp_servers([server]) as (tools, _):  # the server's own state
        assert (await tools[0].call(ToolCall("1", "bump", "{}"))).content == "count=6"


def test_cli_eval_puts_the_stdio_tools_answer_on_the_trace(tmp_path: Path) -> None:
    """The done-when: `taketurns eval jsonl -C run.toml --model builtin/tools`."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"prompt": "bump by=7", "answer": "The tool said: count=7"}) + "\n")
    mark, _ = _marker()
    run_toml = tmp_path / "run.toml"
    run_toml.write_text(
        f"[env.taskset]\nid = 'jsonl'\npath = '{tasks}'\n\n"
        "[[env.taskset.mcp_servers]]\nname = 'counter'\n"
        "command = ['python', '-m', 'taketurns.envs.mcp_counter']\n"
        f"env = {{ TT_TEST_MARK = '{mark}' }}\n"
    )
    out = tmp_path / "run"
    argv = ["eval", "jsonl", "-C", str(run_toml), "--model", "builtin/tools", "-n", "1"]
    assert main([*argv, "-r", "2", "-o", str(out), "--no-progress"]) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 2
    for episode in episodes:
        (trace,) = episode["traces"]
        assert trace["agent"]["harness"] == "tools"
        tool = [m for m in trace["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in tool] == ["count=7"]
        assert trace["rewards"] == {"exact_match": 1.0}
    assert marked(mark) == []
