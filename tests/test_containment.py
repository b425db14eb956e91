"""Containment with adversaries, real processes: every out-of-process agent runs owned
(its whole process tree dies on every path) and, by default, in a bubblewrap sandbox
(``taketurns._procs``).

The adversary is ``probe.py``: it tries to read the opponent's scratch (a Kuhn card),
the host's home directories and other processes' environments, to write outside its
scratch, to connect to a host port, and to leave ``setsid`` and double-forked children
behind. In a sandbox every attempt fails; with ``sandbox = "none"`` the same probe
succeeds (which shows the probe can see what it looks for), and its children still
die. Processes are counted by a marker in their environment (``/proc/*/environ``),
scratch directories in a private temp directory.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from agentprocs import leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from procs import marked as any_marked

from taketurns import Agent, AgentConfig, Task, Timeouts, read_episodes
from taketurns._cli.main import main
from taketurns.harnesses.program import ProgramHarness
from taketurns.http import InterceptionServer

PROBE = Path(__file__).with_name("probe.py")
MCP_PROBE = Path(__file__).with_name("mcp_probe.py")  # an MCP stdio server running it
# the probe as an agent CLI's shell runs it: its source on the command line (the
# sandbox holds no file of the checkout's but the package and what the agent's own
# command line names)
_SOURCE = base64.b64encode(PROBE.read_bytes()).decode()
PROBE_SHELL = f"{sys.executable} -c \"import base64; exec(base64.b64decode('{_SOURCE}'))\" --report"
LIMIT = 60


def marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``TT_PROBE_MARK=<mark>``."""
    return any_marked(f"TT_PROBE_MARK={mark}")


def none_left(mark: str, within: float = 10.0) -> list[int]:
    """``marked(mark)`` once it is empty (a killed process takes a moment to go),
    waiting up to ``within`` seconds; what is left then."""
    deadline = time.monotonic() + within
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    return marked(mark)


async def none_left_async(mark: str, within: float = 10.0) -> list[int]:
    with trio.move_on_after(within):
        while marked(mark):  # noqa: ASYNC110 - a dying process sends no event
            await trio.sleep(0.05)
    return marked(mark)


@pytest.fixture
def listener() -> Iterator[int]:
    """A host port the agents must not reach (it accepts connections)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.fixture
def host_sockets(tmp_path: Path) -> Iterator[list[str]]:
    """Listening host Unix sockets, in a visible and in a hidden folder."""
    paths = [tmp_path / "sockets" / "host.sock", tmp_path / ".hidden" / "s"]
    servers = []
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        server.listen(64)
        servers.append(server)
    yield [str(p) for p in paths]
    for server in servers:
        server.close()


# -- Kuhn self-play, both seats on the probe ----------------------------------------------


def eval_config(
    tmp_path: Path, command: list[str], env: dict[str, str], sandbox: str, *seats: str
) -> Path:
    """A Kuhn eval config: ``seats`` on the program harness running ``command``."""
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    options = f"{{ command = {json.dumps(command)}, env = {{ {table} }} }}"
    config = tmp_path / "eval.toml"
    config.write_text(
        'env_id = "kuhn-poker"\n'
        + "".join(
            f'[env.{seat}]\nharness = "program"\nsandbox = "{sandbox}"\n'
            f"harness_options = {options}\n"
            for seat in seats
        )
    )
    return config


def kuhn_probe_eval(
    tmp_path: Path, port: int, sandbox: str, *, extra: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], str]:
    """Kuhn self-play (8 hands) with both seats on ``probe.py``, run as the CLI in a
    process of its own whose environment holds a canary; its episodes and the
    processes' marker."""
    mark = uuid.uuid4().hex
    temp = Path(tempfile.gettempdir())  # the test's own TMPDIR (tests/conftest.py)
    env = {
        "TT_ESCAPE": str(tmp_path / "escaped"),
        "TT_FORBIDDEN_PORT": str(port),
        "TT_PROBE_MARK": mark,
    }
    config = eval_config(tmp_path, [sys.executable, str(PROBE)], env, sandbox, "player0", "player1")
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-C", str(config), "-n", "8", "-c", "2", "-o", str(out)]
    host = {**os.environ, "TMPDIR": str(temp), "TT_HOST_CANARY": f"tt-host-canary-{mark}"}
    done = subprocess.run(
        [sys.executable, "-m", "taketurns", *argv, *extra, "--no-progress"],
        env=host,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert leftovers(temp) == []
    return list(read_episodes(out / "episodes.jsonl")), mark


def reports(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """What the probe reported in each of the seat's answers."""
    found = []
    for message in trace["messages"]:
        content = message.get("content")
        if message["role"] == "assistant" and isinstance(content, str) and "PROBE " in content:
            encoded = content.rsplit("PROBE ", 1)[1]
            found.append(json.loads(base64.b64decode(encoded)))
    return found


def test_kuhn_probes_in_sandboxes_reach_nothing(
    tmp_path: Path, listener: int, scratch_root: Path
) -> None:
    episodes, mark = kuhn_probe_eval(tmp_path, listener, "bwrap")
    assert len(episodes) == 8
    probes = 0
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        cards = {t["info"]["seat"]: t["info"]["card"] for t in episode["traces"]}
        for trace in episode["traces"]:
            assert trace["info"]["sandbox"] == "bwrap"
            opponent = cards[1 - trace["info"]["seat"]]
            assert f"Your card: {opponent}" not in json.dumps(trace)
            for report in reports(trace):
                probes += 1
                assert report["foreign"] == []  # no other rollout's scratch
                assert report["homes"] == []  # no host home (the interpreter aside)
                assert report["environ"] == []  # no host environment
                assert report["wrote"] == []  # nothing written outside its scratch
                assert report["connected"] == []  # no host port
                assert report["pids_seen"] <= 3  # bwrap's init, the supervisor, itself
                assert f"Your card: {opponent}" not in json.dumps(report)
    assert probes >= 16
    assert not (tmp_path / "escaped").exists()
    assert none_left(mark) == []  # every setsid and double-forked child died


def test_kuhn_probes_without_sandbox_reach_everything_but_leave_nothing(
    tmp_path: Path, listener: int, scratch_root: Path
) -> None:
    """The control: the same probe, unsandboxed, finds the opponent's card, the host's
    homes and environment, writes outside and connects; its children still die."""
    episodes, mark = kuhn_probe_eval(tmp_path, listener, "none")
    found = [r for e in episodes for t in e["traces"] for r in reports(t)]
    assert all(e["traces"][0]["info"]["sandbox"] == "none" for e in episodes)
    assert any(r["foreign"] for r in found)
    assert any(r["homes"] for r in found)
    assert any(r["environ"] for r in found)
    assert any(r["wrote"] for r in found)
    assert any(r["connected"] for r in found)
    assert (tmp_path / "escaped").exists()
    assert none_left(mark) == []


def test_sandbox_none_is_warned_in_the_runs_output(tmp_path: Path, scratch_root: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "1", "--env.player0.harness=program"]
    argv += ["--env.player0.sandbox=none", "-o", str(out), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-m", "taketurns", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "env.player0.sandbox = none" in done.stdout + done.stderr
    assert "env.player1.sandbox" not in done.stdout + done.stderr  # in process: no sandbox


def test_a_missing_bwrap_refuses_the_eval_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(empty))
    argv = ["eval", "kuhn-poker", "-n", "1", "--env.player0.harness=program"]
    assert main([*argv, "-o", str(tmp_path / "run"), "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "env.player0.sandbox = 'bwrap' needs bubblewrap" in error
    assert "apt-get install bubblewrap" in error
    assert "--env.player0.sandbox=none" in error
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


# -- program faults: the right outcome, nothing left --------------------------------------

# Programs speaking the program harness's file protocol; every child they start
# inherits TT_PROBE_MARK (the harness's env option).
PRELUDE = """\
import json, os, subprocess, sys, time
args = sys.argv[1:]
out = args[args.index("--output-file") + 1]
def answer(text):
    with open(out, "w") as f:
        json.dump({"messages": [{"role": "assistant", "content": text}]}, f)
"""
FAULTS = {
    # a child that keeps the program's stdout and stderr open for 300 s
    "child_holds_stdout": "subprocess.Popen(['sleep', '300'])\nanswer('kept')\n",
    # a detached child (own session, no pipes), then exit
    "setsid_child": (
        "subprocess.Popen(['sleep', '300'], start_new_session=True,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nanswer('kept')\n"
    ),
    # a failure that leaves a double-forked daemon behind
    "fails_with_daemon": (
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '300'])\n    os._exit(0)\n"
        "os.wait()\nsys.exit(3)\n"
    ),
    # children (one ignoring SIGTERM, one in its own session), then a hang
    "hangs_with_children": (
        "subprocess.Popen(['bash', '-c', 'trap \"\" TERM; sleep 300'])\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\ntime.sleep(300)\n"
    ),
}


def fault_agent(server: InterceptionServer, fault: str, sandbox: str, mark: str) -> Agent:
    harness = ProgramHarness(
        [sys.executable, "-c", PRELUDE + FAULTS[fault]], env={"TT_PROBE_MARK": mark}
    )
    config = AgentConfig(
        model="builtin/echo",
        harness="program",
        timeouts=Timeouts(segment_s=4),
        sandbox=sandbox,
    )
    return Agent("agent", config, harness=harness, services={"interception": server})


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
@pytest.mark.parametrize(
    ("fault", "outcome", "text"),
    [
        ("child_holds_stdout", "agent_completed", "kept"),
        ("setsid_child", "agent_completed", "kept"),
        ("fails_with_daemon", "harness_error", None),
        ("hangs_with_children", "segment_timeout", None),
    ],
)
async def test_a_program_fault_ends_as_its_outcome_with_nothing_left(
    server: InterceptionServer,
    scratch_root: Path,
    sandbox: str,
    fault: str,
    outcome: str,
    text: str | None,
) -> None:
    mark = uuid.uuid4().hex
    agent = fault_agent(server, fault, sandbox, mark)
    start = trio.current_time()
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="go"))
    elapsed = trio.current_time() - start
    assert trace.stop_condition == outcome, trace.errors
    if text is not None:
        assert trace.last_text == text  # the answer kept, not a timeout
        assert elapsed < 4  # ended when the program exited, not at segment_s
    assert trace.info["sandbox"] == sandbox
    assert await none_left_async(mark) == []
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_cancelling_a_segment_kills_the_whole_tree(
    server: InterceptionServer, scratch_root: Path, sandbox: str
) -> None:
    mark = uuid.uuid4().hex
    agent = fault_agent(server, "hangs_with_children", sandbox, mark)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.run, Task(0, prompt="go"))
            while len(marked(mark)) < 3:  # noqa: ASYNC110 - a process sends no event
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()  # a Ctrl-C inside the eval is this
    assert await none_left_async(mark) == []
    assert leftovers(scratch_root) == []


# -- the eval's process stopped from outside: Ctrl-C, a killed process or worker --------

HANG = PRELUDE + FAULTS["hangs_with_children"]


def start_hanging_eval(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str, Path]:
    """A CLI eval whose player0 hangs with children (player1 in process); its process,
    the marker, its private temp directory."""
    mark = uuid.uuid4().hex
    temp = Path(tempfile.gettempdir())  # the test's own TMPDIR (tests/conftest.py)
    program = tmp_path / "hang.py"
    program.write_text(HANG)
    command = [sys.executable, str(program)]
    config = eval_config(tmp_path, command, {"TT_PROBE_MARK": mark}, "bwrap", "player0")
    argv = ["eval", "kuhn-poker", "-C", str(config), "-n", "2", "-c", "2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "taketurns", *argv, "-o", str(tmp_path / "run"), *extra],
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + LIMIT
    while len(marked(mark)) < 6 and time.monotonic() < deadline:  # 2 programs, 2 children each
        assert process.poll() is None, process.communicate()[0]
        time.sleep(0.1)
    assert len(marked(mark)) >= 6
    return process, mark, temp


def test_ctrl_c_on_the_eval_leaves_nothing(tmp_path: Path, scratch_root: Path) -> None:
    process, mark, temp = start_hanging_eval(tmp_path)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=LIMIT)
    assert process.returncode == 130, output
    assert none_left(mark) == []
    assert leftovers(temp) == []


def test_a_killed_eval_process_leaves_nothing_after_its_resume(
    tmp_path: Path, scratch_root: Path
) -> None:
    """SIGKILL: no cleanup runs in the eval; the supervisors see their lifelines cut
    and kill their trees. What it had made in its temp directory (the rollouts'
    scratch, naming the cards, and the interception socket's directory) is swept by
    the next run in its directory, from the journal there."""
    process, mark, temp = start_hanging_eval(tmp_path)
    process.kill()
    process.communicate(timeout=LIMIT)
    assert none_left(mark) == []
    left = sorted(os.listdir(temp))
    assert any(n.startswith("taketurns-") for n in left), left
    assert any(n.startswith("interception-") for n in left), left
    argv = ["eval", "--resume", "-o", str(tmp_path / "run"), "--episode-timeout", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "taketurns", *argv, "--no-progress"],
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=4 * LIMIT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert none_left(mark) == []
    assert sorted(os.listdir(temp)) == []


def test_a_killed_worker_leaves_nothing(tmp_path: Path, scratch_root: Path) -> None:
    process, mark, temp = start_hanging_eval(
        tmp_path, "--backend", "processes", "--workers", "1", "--env.player0.timeouts.segment_s=3"
    )
    workers = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit()
        and b"taketurns._backends.processes" in _cmdline(p)
        and _parent(p) == process.pid
    ]
    assert len(workers) == 1
    os.kill(workers[0], signal.SIGKILL)
    output, _ = process.communicate(timeout=4 * LIMIT)  # its pairs run again, then time out
    assert process.returncode == 0, output
    assert none_left(mark) == []
    assert leftovers(temp) == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


# -- the agent CLIs, driven by a scripted model through their own shell ------------------


def shell_call(harness: str, command: str, n: int = 1) -> Any:
    """The model's ``n``-th call of the CLI's own shell tool, running ``command``."""
    from scripted import tool_call

    if harness in ("codex", "acp-codex"):
        return tool_call(f"call_probe{n}", "exec_command", json.dumps({"cmd": command}))
    arguments = {"command": command, "description": "Probe"}
    if harness == "gemini-cli":
        return tool_call(f"call_probe{n}", "run_shell_command", json.dumps(arguments))
    if harness == "opencode":
        return tool_call(f"call_probe{n}", "bash", json.dumps(arguments))
    return tool_call(f"toolu_probe{n}", "Bash", json.dumps(arguments))


@pytest.mark.parametrize("harness", ["codex", "claude-code", "gemini-cli", "opencode", "acp-codex"])
async def test_an_agent_clis_shell_reaches_nothing_and_leaves_nothing(
    harness: str,
    server: InterceptionServer,
    scratch_root: Path,
    tmp_path: Path,
    listener: int,
    host_sockets: list[str],
) -> None:
    from scripted import ScriptedModel, tool_results

    from taketurns._exchange.agent import make_harness

    mark = uuid.uuid4().hex
    other = scratch_root / "taketurns-opponent"  # another rollout's scratch, with a card
    other.mkdir()
    (other / "session.json").write_text("Your card: K. Act now.")
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-fake\n")
    env = {
        "TT_ESCAPE": str(tmp_path / "escaped"),
        "TT_FORBIDDEN_PORT": str(listener),
        "TT_PROBE_MARK": mark,
        "TT_CANARIES": str(tmp_path / ".env"),
        "TT_HOST_SOCKETS": os.pathsep.join(host_sockets),
    }
    command = PROBE_SHELL
    if harness in ("gemini-cli", "opencode"):
        # its shell tool (no pty here) returns when the command's output pipes close,
        # which the children the probe leaves would hold: they get a file instead
        command = f"{command} > probe.out 2>&1; cat probe.out"
    model = ScriptedModel(shell_call(harness, command), "probed")
    options: dict[str, Any] = {"env": env}
    if harness == "claude-code":
        options["allowed_tools"] = ["Bash"]
    if harness == "gemini-cli":
        options["approval_mode"] = "yolo"  # headless, its shell tool needs approval
    kind = harness
    if harness == "acp-codex":  # an ACP adapter, codex's
        kind, options["agent"] = "acp", "codex"
    agent = Agent(
        "agent",
        AgentConfig(model="builtin/echo"),
        client=model,
        harness=make_harness(kind, options, field="env.agent"),
        services={"interception": server},
    )
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="probe")) as session:
            reply = await session.turn()
    assert reply.text == "probed"
    results = tool_results(session.trace)
    # the report's line (gemini-cli's shell prefixes its output with ``Output: ``)
    [line] = [ln for r in results for ln in r.splitlines() if "PROBE {" in ln]
    report = json.loads(line[line.index("PROBE {") :].removeprefix("PROBE "))
    assert report["foreign"] == []
    assert report["homes"] == []
    assert report["environ"] == []
    assert report["wrote"] == []
    assert report["connected"] == []
    assert report["sockets"] == report["canaries"] == []
    assert report["shadow"] is False
    assert report["uid"] == 65534
    assert report["children"] == 2
    assert "Your card: K" not in json.dumps(session.trace.messages, default=str)
    assert not (tmp_path / "escaped").exists()
    assert await none_left_async(mark) == []
    (other / "session.json").unlink()
    other.rmdir()
    assert leftovers(scratch_root) == []


def test_probe_is_standalone() -> None:
    """The probe uses the standard library only: it runs where a sandbox shows only
    the interpreter."""
    source = PROBE.read_text()
    assert "taketurns" not in textwrap.dedent(source).split('"""', 2)[2]


async def _one_mcp_tool_turn(
    harness: str,
    server: InterceptionServer,
    mcp: Any,
    tool: str,
    arguments: str,
    reply: str,
) -> Any:
    """One turn of agent CLI ``harness`` with the MCP stdio server ``mcp`` as its own:
    the scripted model calls ``tool`` with ``arguments`` once, then says ``reply``.
    Returns the closed session (its trace)."""
    from scripted import ScriptedModel, tool_call

    from taketurns._exchange.agent import make_harness
    from taketurns.harness import open_mcp_servers

    call = tool_call("call_mcp1", tool, arguments)
    options: dict[str, Any] = {"allowed_tools": [tool]} if harness == "claude-code" else {}
    agent = Agent(
        "agent",
        AgentConfig(model="builtin/echo"),
        client=ScriptedModel(call, reply),
        harness=make_harness(harness, options, field="env.agent"),
        services={"interception": server},
    )
    with trio.fail_after(LIMIT):
        async with (
            open_mcp_servers([mcp]) as (tools, _),
            agent.chat(Task(0, prompt="go"), tools=tools) as session,
        ):
            assert (await session.turn()).text == reply
    return session


@pytest.mark.parametrize("harness", ["codex", "claude-code", "gemini-cli"])
async def test_an_agent_clis_own_mcp_server_runs_in_its_sandbox_and_dies_with_it(
    harness: str, server: InterceptionServer, scratch_root: Path
) -> None:
    from taketurns import ToolMessage
    from taketurns.harness import McpServer, text_of

    mark = uuid.uuid4().hex
    counter = McpServer(
        name="counter",
        command=["python", "-m", "taketurns.envs.mcp_counter"],
        env={"TT_PROBE_MARK": mark},
    )
    name = "mcp_counter_bump" if harness == "gemini-cli" else "mcp__counter__bump"
    session = await _one_mcp_tool_turn(
        harness, server, counter, name, json.dumps({"by": 5}), "Counted."
    )
    results = [m for m in session.trace.turns[1].request if isinstance(m, ToolMessage)]
    assert any("count=5" in text_of(m.content) for m in results), results
    assert session.trace.info["sandbox"] == "bwrap"
    assert await none_left_async(mark) == []
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", ["codex", "claude-code"])
async def test_a_probe_through_an_agent_clis_mcp_stdio_server_reaches_nothing(
    harness: str,
    server: InterceptionServer,
    scratch_root: Path,
    tmp_path: Path,
    listener: int,
    host_sockets: list[str],
) -> None:
    """The MCP stdio server an agent CLI starts is the agent's: it runs in the
    agent's sandbox, so the probe run as its tool reaches what the CLI's shell does
    (nothing), and it leaves nothing."""
    from scripted import tool_results

    from taketurns.harness import McpServer

    mark = uuid.uuid4().hex
    other = scratch_root / "taketurns-opponent"  # another rollout's scratch, with a card
    other.mkdir()
    (other / "session.json").write_text("Your card: K. Act now.")
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-fake\n")
    prober = McpServer(
        name="prober",
        command=[sys.executable, str(MCP_PROBE), str(PROBE)],
        env={
            "TT_ESCAPE": str(tmp_path / "escaped"),
            "TT_FORBIDDEN_PORT": str(listener),
            "TT_PROBE_MARK": mark,
            "TT_CANARIES": str(tmp_path / ".env"),
            "TT_HOST_SOCKETS": os.pathsep.join(host_sockets),
        },
    )
    session = await _one_mcp_tool_turn(
        harness, server, prober, "mcp__prober__run_probe", "{}", "probed"
    )
    results = tool_results(session.trace)
    # the tool's structured result, as the CLI shows it (codex: after its own header)
    [line] = [ln for r in results for ln in r.splitlines() if '"result":"PROBE ' in ln]
    result = json.loads(line[line.index("{") :])["result"]
    report = json.loads(result.removeprefix("PROBE "))
    assert session.trace.info["sandbox"] == "bwrap"
    assert report["foreign"] == report["homes"] == report["environ"] == []
    assert report["wrote"] == report["connected"] == []
    assert report["sockets"] == report["canaries"] == []
    assert report["shadow"] is False
    assert report["uid"] == 65534
    assert report["pids_seen"] < 20  # its own sandbox's processes, not the host's
    assert not (tmp_path / "escaped").exists()
    assert await none_left_async(mark) == []
    (other / "session.json").unlink()
    other.rmdir()
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize(
    ("network", "recorded"), [("endpoint", "bwrap"), ("host", "bwrap, host network")]
)
async def test_sandbox_network_host_opens_the_hosts_network_and_says_so(
    server: InterceptionServer, scratch_root: Path, listener: int, network: str, recorded: str
) -> None:
    mark = uuid.uuid4().hex
    harness = ProgramHarness(
        [sys.executable, str(PROBE)],
        env={"TT_FORBIDDEN_PORT": str(listener), "TT_PROBE_MARK": mark},
    )
    config = AgentConfig(model="builtin/echo", harness="program", sandbox_network=network)
    agent = Agent("agent", config, harness=harness, services={"interception": server})
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="probe"))
    assert trace.errors == []
    assert trace.info["sandbox"] == recorded
    [report] = reports({"messages": [{"role": "assistant", "content": trace.last_text}]})
    assert report["connected"] == ([listener] if network == "host" else [])
    assert report["foreign"] == report["homes"] == report["environ"] == []
    assert await none_left_async(mark) == []


# -- Kuhn with codex against claude-code, both seats probing through their shells -------


def kuhn_cli_agent(
    env: Any, server: InterceptionServer, options: dict[str, Any], script: dict[str, list[Any]]
) -> Any:
    """A ``run_episode`` factory: each seat on its agent CLI, driven by its script."""
    from scripted import ScriptedModel

    from taketurns._exchange.agent import make_harness

    def make(role: str, config: AgentConfig, info: Any, on_close: Any) -> Agent:
        harness = make_harness(config.harness, options[role], field=f"env.{role}")
        return Agent(
            role,
            config,
            client=ScriptedModel(*script[role]),
            harness=harness,
            services={"interception": server},
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    return make


async def test_kuhn_codex_against_claude_code_probing_through_their_shells(
    server: InterceptionServer, scratch_root: Path, tmp_path: Path, listener: int
) -> None:
    """The issue's "done when": a real Kuhn hand, player0 on ``codex`` and player1 on
    ``claude-code``, each model first running the probe through the CLI's own shell
    tool (player0 before each of its two actions, the second after player1's CLI has
    written its session): check, bet, fold. A host process holds a secret in its
    environment. No probe reads the opponent's card or the secret, writes outside,
    connects, or leaves a process; no scratch is left."""
    from taketurns import Episode, ToolMessage
    from taketurns.envs.kuhn import KuhnConfig, KuhnPoker
    from taketurns.harness import text_of
    from taketurns.testing import run_episode

    mark = uuid.uuid4().hex
    canary = f"tt-host-canary-{mark}"
    host = await trio.lowlevel.open_process(  # a host process, holding a secret
        ["sleep", "300"], env={"TT_HOST_CANARY": canary, "TT_PROBE_MARK": mark}
    )
    env_vars = {
        "TT_ESCAPE": str(tmp_path / "escaped"),
        "TT_FORBIDDEN_PORT": str(listener),
        "TT_PROBE_MARK": mark,
    }
    probe = PROBE_SHELL
    options = {
        "player0": {"env": env_vars},
        "player1": {"env": env_vars, "allowed_tools": ["Bash"]},
    }
    script = {
        "player0": [shell_call("codex", probe), "[check]", shell_call("codex", probe, 2), "[fold]"],
        "player1": [shell_call("claude-code", probe), "[bet]"],
    }
    seats = {
        seat: AgentConfig(model="builtin/echo", harness=harness)
        for seat, harness in (("player0", "codex"), ("player1", "claude-code"))
    }
    kuhn = KuhnPoker(KuhnConfig(**seats))
    episode = Episode("kuhn-poker/0/0", "kuhn-poker", kuhn.tasks(1)[0])
    try:
        with trio.fail_after(3 * LIMIT):
            await run_episode(kuhn, episode, kuhn_cli_agent(kuhn, server, options, script))
    finally:
        host.kill()
        await host.wait()
    assert episode.ok, episode.errors
    traces = {t.info["seat"]: t for t in episode.traces}
    assert [traces[s].info["history"] for s in (0, 1)] == [["check", "bet", "fold"]] * 2
    probes = 0
    for seat, trace in traces.items():
        assert trace.info["sandbox"] == "bwrap"
        opponent = f"Your card: {traces[1 - seat].info['card']}"
        results = {  # a turn's request repeats the segment's earlier tool results
            m.tool_call_id: text_of(m.content)
            for turn in trace.turns
            for m in turn.request
            if isinstance(m, ToolMessage)
        }
        lines = [ln for r in results.values() for ln in r.splitlines() if ln.startswith("PROBE ")]
        assert len(lines) == (2 if seat == 0 else 1), results
        for line in lines:
            probes += 1
            report = json.loads(line.removeprefix("PROBE "))
            assert report["foreign"] == []  # not the opponent's scratch
            assert report["homes"] == []
            assert report["environ"] == []  # not the host's secret
            assert report["wrote"] == []
            assert report["connected"] == []
            assert report["children"] == 2
        recorded = json.dumps([trace.messages, trace.turns], default=str)
        assert opponent not in recorded
        assert canary not in recorded
    assert probes == 3
    assert not (tmp_path / "escaped").exists()
    assert await none_left_async(mark) == []  # the probes' setsid and daemon children
    assert leftovers(scratch_root) == []


# segment n leaves links where the engine writes segment n + 1's prompt (to a host file
# the engine's uid may write) and, in segment n + 1, its own output file (to a host
# file holding a well-formed answer)
LINKING = """\
import json, os, sys
args = sys.argv[1:]
prompt = args[args.index("--prompt-file") + 1]
out = args[args.index("--output-file") + 1]
folder = os.path.dirname(prompt)
n = int(os.path.basename(prompt)[len("prompt-") : -len(".json")])
messages = json.load(open(prompt))["messages"]
if n == 0:
    os.symlink(os.environ["TT_VICTIM"], os.path.join(folder, "prompt-1.json"))
    with open(out, "w") as f:
        json.dump({"messages": [{"role": "assistant", "content": "first"}]}, f)
else:
    assert messages[-1]["content"] == "again", messages  # a prompt of its own
    os.symlink(os.environ["TT_ANSWER"], out)
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_the_engine_never_writes_or_reads_through_a_link_the_program_left(
    server: InterceptionServer, tmp_path: Path, scratch_root: Path, sandbox: str
) -> None:
    """A program that leaves a link where the next segment's prompt goes does not get
    the engine (root here) to overwrite the host file it points at; the next prompt is
    a file of its own. An output file that is a link to a host file (here a
    well-formed answer) is not read: the segment fails as the program's fault."""
    victim, answer = tmp_path / "victim", tmp_path / "answer.json"
    victim.write_text("precious")
    secret = {"messages": [{"role": "assistant", "content": "host secret"}]}
    answer.write_text(json.dumps(secret))
    harness = ProgramHarness(
        [sys.executable, "-c", LINKING],
        env={"TT_VICTIM": str(victim), "TT_ANSWER": str(answer)},
    )
    config = AgentConfig(model="builtin/echo", harness="program", sandbox=sandbox)
    agent = Agent("agent", config, harness=harness, services={"interception": server})
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="go")) as session:
            await session.turn()
            assert session.trace.last_text == "first"
            await session.turn("again")  # the harness's error ends the rollout
    assert victim.read_text() == "precious"
    assert session.trace.stop_condition == "harness_error"
    assert "output file cannot be read" in session.trace.errors[-1].message
    assert "host secret" not in repr(session.trace)
    assert leftovers(scratch_root) == []
