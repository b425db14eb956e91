"""A taskset's MCP servers handed to the real agent CLIs' own MCP configuration
(``codex``: ``-c mcp_servers.<name>=...``; ``claude-code``: ``--mcp-config``;
``opencode``: its config's ``mcp``; ``gemini-cli``: its settings' ``mcpServers``), run
offline against the interception server on a scripted model that asks the agent to
call the counter tool of ``python -m taketurns.envs.mcp_counter``: the tool's answer
comes back in the next recorded request, from a server process the agent itself
started for this rollout, and that process is gone after the session closes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from agentprocs import leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from httpservers import serve_app
from scripted import USAGE, ScriptedModel, tool_call
from test_agent_clis import LIMIT, Shim, agent

from taketurns import Agent, AgentConfig, AssistantMessage, Task, ToolMessage
from taketurns._exchange.agent import make_harness
from taketurns.env import ModelResponse
from taketurns.envs.mcp_counter import make_server
from taketurns.harness import McpServer, open_mcp_servers, text_of
from taketurns.harnesses.agent_mcp import claude_mcp_config, codex_mcp_args, gemini_mcp_config
from taketurns.http import InterceptionServer

# the name each agent gives the model for server "counter"'s tool "bump"
TOOL_NAME = {
    "codex": "mcp__counter__bump",
    "claude-code": "mcp__counter__bump",
    "opencode": "counter_bump",
    "gemini-cli": "mcp_counter_bump",
}
PID_FILE = "server-pids"


def counter(tmp_path: Path, *, only_once: bool = False, **fields: Any) -> McpServer:
    """The counter server, wrapped so each process writes its pid to a file;
    ``only_once``: every process after the first exits at once (status 3). The file
    is outside the rollout's scratch: the agents that start it run with
    ``sandbox = "none"`` (``test_containment.py`` runs one in its sandbox)."""
    wrapper = tmp_path / "counter.py"
    pids = str(tmp_path / PID_FILE)
    wrapper.write_text(
        "import os, sys\n"
        f"if {only_once} and os.path.exists({pids!r}):\n"
        "    sys.exit('counter: refusing to start twice')\n"
        f"with open({pids!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        "from taketurns.envs.mcp_counter import main\n"
        "main()\n"
    )
    return McpServer(name="counter", command=["python", str(wrapper)], **fields)


def server_pids(tmp_path: Path) -> list[int]:
    path = tmp_path / PID_FILE
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("harness", ["codex", "claude-code", "opencode", "gemini-cli"])
async def test_the_agent_calls_the_rollouts_mcp_server_itself(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    name = TOOL_NAME[harness]
    sessions: list[Any] = []

    async def rollout(tools: Any) -> None:
        # each rollout's agent bumps by 5: it reads count=5 only from its own server
        model = ScriptedModel(tool_call("call_bump1", name, json.dumps({"by": 5})), "Counted.")
        async with agent(harness, server, shim, model, sandbox="none").chat(
            Task(0, prompt="bump it"), tools=tools
        ) as session:
            sessions.append(session)
            assert (await session.turn()).text == "Counted."

    with trio.fail_after(3 * LIMIT):
        async with open_mcp_servers([counter(tmp_path)]) as (tools, _):
            own = server_pids(tmp_path)  # taketurns' own connection to the server
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rollout, tools)
                nursery.start_soon(rollout, tools)
    assert len(sessions) == 2
    for session in sessions:
        trace = session.trace
        assert trace.errors == [], trace.errors
        assert name in trace.turns[0].tools, list(trace.turns[0].tools)
        results = [m for m in trace.turns[1].request if isinstance(m, ToolMessage)]
        assert any("count=5" in text_of(m.content) for m in results), results
    agents_own = [p for p in server_pids(tmp_path) if p not in own]
    assert len(agents_own) == 2  # each rollout's agent started its own server
    assert not any(alive(p) for p in server_pids(tmp_path))  # and it is gone
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", ["codex", "claude-code", "gemini-cli"])
async def test_a_resumed_segment_has_the_servers_again_each_segment_its_own_process(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    name = TOOL_NAME[harness]
    model = ScriptedModel(
        tool_call("call_bump1", name, json.dumps({"by": 2})),
        "First.",
        tool_call("call_bump2", name, json.dumps({"by": 2})),
        "Second.",
    )
    with trio.fail_after(3 * LIMIT):
        async with open_mcp_servers([counter(tmp_path)]) as (tools, _):
            own = server_pids(tmp_path)
            seat = agent(harness, server, shim, model, sandbox="none")
            async with seat.chat(Task(0, prompt="bump"), tools=tools) as session:
                assert (await session.turn()).text == "First."
                assert (await session.turn("again")).text == "Second."
    trace = session.trace
    assert trace.errors == []
    assert len(trace.turns) == 4
    for turn in (trace.turns[1], trace.turns[3]):
        (result,) = [m for m in turn.request[-1:] if isinstance(m, ToolMessage)]
        # the agent's server lives for one segment: the resumed one starts from 0
        assert "count=2" in text_of(result.content), result
    assert len([p for p in server_pids(tmp_path) if p not in own]) == 2
    assert not any(alive(p) for p in server_pids(tmp_path))
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", ["codex", "claude-code", "opencode", "gemini-cli"])
async def test_the_agent_calls_a_shared_http_server_at_its_url(
    harness: str, server: InterceptionServer, tmp_path: Path, nursery: trio.Nursery
) -> None:
    root = await nursery.start(serve_app, make_server().streamable_http_app())
    counter_http = McpServer(name="counter", url=f"{root}/mcp", placement="shared")
    shim = Shim(tmp_path, harness)
    bump = tool_call("call_bump1", TOOL_NAME[harness], json.dumps({"by": 3}))
    model = ScriptedModel(bump, "Counted.")
    with trio.fail_after(3 * LIMIT):
        async with (
            open_mcp_servers([counter_http]) as (tools, _),
            # a sandbox reaches only its model endpoint: this agent needs the host's network
            agent(harness, server, shim, model, sandbox_network="host").chat(
                Task(0, prompt="go"), tools=tools
            ) as session,
        ):
            reply = await session.turn()
    assert session.trace.errors == []
    assert reply.text == "Counted."
    results = [m for m in session.trace.turns[1].request if isinstance(m, ToolMessage)]
    assert any("count=3" in text_of(m.content) for m in results), results


@pytest.mark.parametrize("harness", ["codex", "claude-code", "opencode", "gemini-cli"])
async def test_a_server_the_agent_cannot_start_never_hangs_the_rollout(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    name = TOOL_NAME[harness]
    model = ScriptedModel(tool_call("call_bump1", name, "{}"), "Went on without it.")
    with trio.fail_after(3 * LIMIT):
        async with (
            open_mcp_servers([counter(tmp_path, only_once=True)]) as (tools, _),
            agent(harness, server, shim, model).chat(Task(0, prompt="go"), tools=tools) as s,
        ):
            reply = await s.turn()
    if harness == "codex":  # its servers are `required`: the segment fails at once
        assert reply.stop_condition == "harness_error"
        assert s.trace.turns == []  # before its first model call
        assert "MCP servers failed to initialize: counter" in s.trace.errors[0].message
    else:  # the others go on without the server: the call is their own tool error
        assert s.trace.errors == []
        assert reply.text == "Went on without it."
        (result,) = [m for m in s.trace.turns[1].request if isinstance(m, ToolMessage)]
        assert name in text_of(result.content)
        said = text_of(result.content)
        assert "unavailable" in said or "No such tool" in said or "not found" in said
    assert leftovers(scratch_root) == []


async def test_python_tools_and_shared_stdio_servers_are_refused(
    server: InterceptionServer, tmp_path: Path
) -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    shim = Shim(tmp_path, "codex")
    with trio.fail_after(LIMIT):
        async with agent("codex", server, shim).chat(Task(0, prompt="hi"), tools=[lookup]) as s:
            reply = await s.turn()
        assert reply.stop_condition == "harness_error"
        assert "Python tools (lookup)" in s.trace.errors[0].message
        shared = counter(tmp_path, placement="shared")
        async with (
            open_mcp_servers([shared]) as (tools, _),
            agent("codex", server, shim).chat(Task(0, prompt="hi"), tools=tools) as s,
        ):
            reply = await s.turn()
        assert reply.stop_condition == "harness_error"
        assert "shared stdio server" in s.trace.errors[0].message
    assert shim.runs() == []  # refused before any agent started


async def test_a_harness_without_native_mcp_names_the_servers_it_cannot_take(
    server: InterceptionServer, tmp_path: Path
) -> None:
    acp = Agent(
        "agent",
        AgentConfig(model="builtin/echo"),
        harness=make_harness("acp", {"agent": "codex"}, field="env.agent"),
        services={"interception": server},
    )
    with trio.fail_after(LIMIT):
        async with (
            open_mcp_servers([counter(tmp_path)]) as (tools, _),
            acp.chat(Task(0, prompt="hi"), tools=tools) as s,
        ):
            reply = await s.turn()
    assert reply.stop_condition == "harness_error"
    message = s.trace.errors[0].message
    assert "taskset's MCP servers (counter)" in message
    assert "Python tools" not in message
    assert s.trace.turns == []  # refused before any agent started


def test_the_cli_configurations_name_every_field(tmp_path: Path) -> None:
    stdio = McpServer(
        name="counter",
        command=["python", "-m", "taketurns.envs.mcp_counter"],
        env={"A": "b"},
        cwd=str(tmp_path),
        call_timeout_s=7,
    )
    http = McpServer(name="web", url="http://127.0.0.1:9/mcp")
    assert codex_mcp_args([stdio, http]) == [
        "-c",
        f'mcp_servers.counter={{"command"={json.dumps(sys.executable)},'
        '"args"=["-m","taketurns.envs.mcp_counter"],"env"={"A"="b"},'
        f'"cwd"={json.dumps(str(tmp_path))},"required"=true,'
        '"default_tools_approval_mode"="approve","startup_timeout_sec"=60.0,"tool_timeout_sec"=7.0}',
        "-c",
        'mcp_servers.web={"url"="http://127.0.0.1:9/mcp","required"=true,'
        '"default_tools_approval_mode"="approve","startup_timeout_sec"=60.0,'
        '"tool_timeout_sec"=60.0}',
    ]
    assert gemini_mcp_config([stdio, http]) == {
        "counter": {
            "command": sys.executable,
            "args": ["-m", "taketurns.envs.mcp_counter"],
            "env": {"A": "b"},
            "cwd": str(tmp_path),
            "timeout": 7000,
            "trust": True,
        },
        "web": {"httpUrl": "http://127.0.0.1:9/mcp", "timeout": 60000, "trust": True},
    }
    config = claude_mcp_config([stdio, http])["mcpServers"]
    assert config["web"] == {"type": "http", "url": "http://127.0.0.1:9/mcp"}
    assert config["counter"]["args"][-3:] == [sys.executable, "-m", "taketurns.envs.mcp_counter"]
    assert config["counter"]["args"][2] == str(tmp_path)  # cd "$0" && exec "$@"
    assert config["counter"]["env"] == {"A": "b"}


def test_responses_namespace_tools_are_offered_flat_and_called_back_namespaced() -> None:
    from taketurns._http.responses import _items, parse_responses_body

    bump = {"type": "function", "name": "bump", "parameters": {"type": "object"}}
    body = {
        "model": "m",
        "tools": [{"type": "namespace", "name": "mcp__counter", "tools": [bump]}],
        "input": [
            {"role": "user", "content": "go"},
            {
                "type": "function_call",
                "call_id": "c1",
                "namespace": "mcp__counter",
                "name": "bump",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "count=1"},
        ],
    }
    parsed = parse_responses_body(json.dumps(body), "m")
    assert [t["function"]["name"] for t in parsed.request.tools] == ["mcp__counter__bump"]
    call = parsed.request.messages[1].tool_calls[0]
    assert call.name == "mcp__counter__bump"
    response = ModelResponse(AssistantMessage(None, (call,)), USAGE)
    (item,) = _items(response, parsed.options["namespaced"])
    assert (item["namespace"], item["name"]) == ("mcp__counter", "bump")
