"""MCP tool servers (the official SDK, real servers): per-rollout and shared
placement, stdio and streamable HTTP, every harness path, and every failure mode
ending as a tool error or a recorded failure with no server process left behind."""

from __future__ import annotations

import json
import sys
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from httpservers import serve_app
from procs import marked

from taketurns import Agent, AgentConfig, AssistantMessage, ConfigError, HarnessError
from taketurns._cli.main import main
from taketurns._output.records import read_episodes
from taketurns.env import EpisodeInfo, ModelRequest, ModelResponse
from taketurns.envs.mcp_counter import make_server
from taketurns.harness import McpServer, ToolCall, open_mcp_servers
from taketurns.http import open_interception_server
from taketurns.taskset import open_taskset
from taketurns.testing import ScriptedModel

FAULTY = str(Path(__file__).with_name("mcp_faulty.py"))


def servers(mark: str) -> list[int]:
    """The marked processes that are servers, not the supervisors the engine runs
    them under (``taketurns._procs.supervisor``)."""
    found = []
    for pid in marked(mark):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"_procs/supervisor.py" not in cmdline and b"supervisor.cpython" not in cmdline:
            found.append(pid)
    return found


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


def test_without_the_sdk_servers_are_refused_at_config_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if taketurns[mcp] were not installed
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    ref = {"id": "jsonl", "path": str(path), "mcp_servers": [{"name": "c", "command": COUNTER}]}
    with pytest.raises(ConfigError, match=r"pip install 'taketurns\[mcp\]'"):
        open_taskset(ref)
    with pytest.raises(ConfigError, match=r"env\.taskset\.tools = 'mcp'.*taketurns\[mcp\]"):
        open_taskset({"id": "retail-lite", "tools": "mcp"})


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
        assert len(servers(mark)) == 1
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
            assert len(servers(mark)) == 1
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


def _faulty(*args: str, **options: object) -> McpServer:
    mark, env = _marker()
    server = McpServer("faulty", command=[sys.executable, FAULTY, *args], env=env, **options)
    server.env["TT_TEST_MARK"] = mark
    return server


@pytest.mark.parametrize(
    ("server", "why"),
    [
        (McpServer("nope", command=["/no/such/mcp-server"]), "failed to start: .*No such file"),
        (_faulty("--die-at-start"), "failed to start: .*stderr ends: faulty: refusing to start"),
        (_faulty("--mute", startup_timeout_s=1.0), r"no answer within 1s \(startup_timeout_s\)"),
        (
            McpServer("down", url="http://127.0.0.1:9/mcp"),
            r"'down' \(http://127.0.0.1:9/mcp\) failed",
        ),
    ],
)
async def test_a_server_that_does_not_start_is_a_clear_error(server: McpServer, why: str) -> None:
    with trio.fail_after(20), pytest.raises(HarnessError, match=why):
        async with open_mcp_servers([server]):
            pytest.fail("unreachable")
    if "TT_TEST_MARK" in server.env:
        assert marked(server.env["TT_TEST_MARK"]) == []


async def test_tool_failures_come_back_to_the_model_as_errors() -> None:
    server = _faulty(call_timeout_s=3.0)
    with trio.fail_after(30):
        async with open_mcp_servers([server]) as (tools, _):
            by_name = {t.name: t for t in tools}
            failed = await by_name["fail"].call(ToolCall("1", "fail", '{"why": "test"}'))
            assert failed.content.startswith("Error: ")
            assert "fail was asked to fail: test" in failed.content
            hung = await by_name["hang"].call(ToolCall("2", "hang", "{}"))
            assert hung.content == (
                "Error: MCP server 'faulty' did not answer within 3s (call_timeout_s)"
            )
            # the server still serves after a timed-out call
            assert (await by_name["whoami"].call(ToolCall("3", "whoami", "{}"))).content.startswith(
                "pid="
            )
            crashed = await by_name["crash"].call(ToolCall("4", "crash", "{}"))
            assert crashed.content.startswith("Error: MCP server 'faulty' ")
            again = await by_name["whoami"].call(ToolCall("5", "whoami", "{}"))
            assert again.content.startswith("Error: MCP server 'faulty' ")
    assert marked(server.env["TT_TEST_MARK"]) == []


async def test_cancelled_mid_call_leaves_no_server_and_a_recorded_trace(tmp_path: Path) -> None:
    server = _faulty()
    taskset = _jsonl_taskset(tmp_path, [attrs.asdict(server)])
    task = taskset.tasks(1)[0]
    model = _Signalling(AssistantMessage(None, (ToolCall("c1", "hang", "{}"),)))
    agent = Agent("a", AgentConfig(harness="tools"), client=model)
    traces = []
    agent = agent.bind(agent.episode or _episode(), on_close=traces.append)
    with trio.move_on_after(8) as scope:
        async with taskset.open_resources(task) as resources:
            assert len(servers(server.env["TT_TEST_MARK"])) == 1
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(agent.run, task, tools=resources.tools))
                with trio.fail_after(5):
                    await model.answered.wait()
                await trio.sleep(0.5)  # the hang call is in flight
                scope.cancel()
    assert scope.cancelled_caught
    (trace,) = traces
    assert trace.stop_condition == "cancelled"
    assert marked(server.env["TT_TEST_MARK"]) == []


class _Signalling(ScriptedModel):
    """Sets ``answered`` once it has answered a request."""

    def __init__(self, *script: Any) -> None:
        super().__init__(*script)
        self.answered = trio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await super().complete(request)
        finally:
            self.answered.set()


def _episode() -> EpisodeInfo:
    return EpisodeInfo("e", "test", 0)


async def test_program_harness_calls_mcp_tools_through_the_tool_url(tmp_path: Path) -> None:
    taskset = _jsonl_taskset(tmp_path, [{"name": "c", "command": COUNTER}], prompt="bump by=4")
    task = taskset.tasks(1)[0]
    async with open_interception_server() as server:
        agent = Agent(
            "a",
            AgentConfig(model="builtin/tools", harness="program"),
            services={"interception": server},
        )
        with trio.fail_after(60):
            async with taskset.open_resources(task) as resources:
                trace = await agent.run(task, tools=resources.tools)
    assert trace.stop_condition == "agent_completed", trace.errors
    tool = [m for m in trace.messages if m.role == "tool"]
    assert [m.content for m in tool] == ["count=4"]
    assert trace.last_text == "The tool said: count=4"


def test_cli_shared_server_serves_every_rollout_of_the_eval(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"prompt": "bump by=2"}) + "\n")
    mark, _ = _marker()
    table = (
        f'[{{name = "c", command = ["python", "-m", "taketurns.envs.mcp_counter"], '
        f'placement = "shared", env = {{ TT_TEST_MARK = "{mark}" }}}}]'
    )
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={tasks}", "--model", "builtin/tools"]
    argv += [f"--env.taskset.mcp_servers={table}", "-r", "3", "-c", "1"]
    assert main([*argv, "-o", str(out), "--no-progress"]) == 0
    said = sorted(
        e["traces"][0]["messages"][-1]["content"] for e in read_episodes(out / "episodes.jsonl")
    )
    assert said == [f"The tool said: count={n}" for n in (2, 4, 6)]
    assert marked(mark) == []


def test_cli_a_server_that_cannot_start_fails_the_episode_clearly(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"prompt": "bump by=2"}) + "\n")
    table = '[{name = "gone", command = ["/no/such/server"]}]'
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={tasks}", "--model", "builtin/tools"]
    argv += [f"--env.taskset.mcp_servers={table}", "-o", str(out), "--no-progress"]
    main(argv)  # the exit status of failed episodes is the CLI's business, not tested here
    (episode,) = read_episodes(out / "episodes.jsonl")
    assert (episode["ok"], episode["stop"]) == (False, "env_error")
    assert "MCP server 'gone' (/no/such/server) failed to start" in episode["errors"][0]["message"]


async def test_servers_start_together_and_one_failing_stops_the_others() -> None:
    ok, down = _faulty(), _faulty("--die-at-start")
    ok.name, down.name = "ok", "down"
    counter = McpServer("counter", command=COUNTER, env=ok.env)
    async with open_mcp_servers([ok, counter]) as (tools, connections):
        assert [t.name for t in tools][:4] == ["whoami", "fail", "hang", "crash"]
        assert [t.name for t in tools][4:] == ["bump", "whoami"]
        assert set(connections) == {"ok", "counter"}
        assert len(servers(ok.env["TT_TEST_MARK"])) == 2
    with pytest.raises(HarnessError, match="MCP server 'down'"):
        async with open_mcp_servers([ok, down]):
            pytest.fail("unreachable")
    assert marked(ok.env["TT_TEST_MARK"]) == []
