"""The real agent CLIs as seats: ``codex`` (``@openai/codex``), ``claude-code``
(``@anthropic-ai/claude-code``), ``gemini-cli`` (``@google/gemini-cli``) and
``opencode``, installed from npm (``.ci/run``), run offline against the interception
server on the built-in or a scripted model.

Every agent runs through a shim (``binary = <shim>``) that records its argv, pid and
environment before exec'ing the real program, so the tests can see native resume,
the scrubbed environment and the process that must be killed. The record is written
outside the rollout's scratch, which a sandbox refuses: the tests that read it run
their agents with ``sandbox = "none"`` (the sandboxed agents are tested in
``test_containment.py``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from agentprocs import Arrival, dead_after_kill, leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from scripted import ScriptedModel, Sleep, tool_call

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    Limits,
    ModelEndpointError,
    Task,
    Timeouts,
    ToolMessage,
    UserMessage,
    read_episodes,
)
from taketurns._cli.main import main
from taketurns._exchange.agent import make_harness
from taketurns.harness import text_of
from taketurns.http import InterceptionServer

AGENTS = {"codex": "codex", "claude-code": "claude", "opencode": "opencode", "gemini-cli": "gemini"}
# the CLIs the shared behaviour tests run (opencode, slow to start, has tests of its own)
CLIS = ["codex", "claude-code", "gemini-cli"]
LIMIT = 60  # seconds: each segment starts a native agent binary
SHIM = """#!{python}
import json, os, sys
log = {log!r}
record = {{"pid": os.getpid(), "argv": sys.argv[1:], "env": dict(os.environ)}}
try:
    with open(os.path.join(log, f"{{os.getpid()}}.json"), "w") as f:
        json.dump(record, f)
except OSError:  # sandboxed: the log is outside its scratch, invisible
    pass
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def real(program: str) -> str:
    path = shutil.which(program)
    assert path is not None, (
        f"{program!r} is not installed: run `npm install -g @openai/codex@0.171.0 "
        "@anthropic-ai/claude-code@2.1.332 opencode-ai@1.18.33 @google/gemini-cli@0.61.0` "
        "(as .ci/run does)"
    )
    return path


class Shim:
    """An executable standing in for ``harness``'s program; ``runs()`` reads back
    what each invocation recorded, in start order."""

    def __init__(self, tmp_path: Path, harness: str) -> None:
        self.log = tmp_path / f"{harness}-runs"
        self.log.mkdir()
        self.path = tmp_path / f"{harness}-shim"
        code = SHIM.format(python=sys.executable, log=str(self.log), real=real(AGENTS[harness]))
        self.path.write_text(code)
        self.path.chmod(0o755)

    def runs(self) -> list[dict[str, Any]]:
        records = [json.loads(p.read_text()) for p in self.log.iterdir()]
        return sorted(records, key=lambda r: os.stat(self.log / f"{r['pid']}.json").st_mtime_ns)


def agent(
    harness: str,
    server: InterceptionServer,
    shim: Shim,
    model: Any = None,
    limits: Limits | None = None,
    timeouts: Timeouts | None = None,
    sandbox: str = "bwrap",
    sandbox_network: str = "endpoint",
    **options: Any,
) -> Agent:
    if harness == "claude-code" and "allowed_tools" not in options:
        options["allowed_tools"] = ["Bash"]
    if harness == "gemini-cli" and "approval_mode" not in options:
        options["approval_mode"] = "yolo"  # headless, its shell tool needs approval
    return Agent(
        "agent",
        AgentConfig(
            model="builtin/echo",
            limits=limits or Limits(),
            timeouts=timeouts or Timeouts(),
            sandbox=sandbox,
            sandbox_network=sandbox_network,
        ),
        client=model,
        harness=make_harness(harness, {"binary": str(shim.path), **options}, field="env.agent"),
        services={"interception": server},
    )


def run_tool(harness: str) -> Any:
    """The model's call of the agent's own shell tool, running ``echo``."""
    if harness == "codex":
        return tool_call("call_echo1", "exec_command", json.dumps({"cmd": "echo tt-marker-42"}))
    if harness == "gemini-cli":
        arguments = {"command": "echo tt-marker-42", "description": "Print a marker"}
        return tool_call("call_echo1", "run_shell_command", json.dumps(arguments))
    arguments = {"command": "echo tt-marker-42", "description": "Print a marker"}
    return tool_call("toolu_echo1", "Bash", json.dumps(arguments))


# -- Kuhn through the CLI ------------------------------------------------------------------


def test_kuhn_with_codex_against_claude_code(tmp_path: Path, scratch_root: Path) -> None:
    real("codex"), real("claude")
    out = tmp_path / "run"
    argv = [
        "eval",
        "kuhn-poker",
        "-n",
        "4",
        "--env.player0.harness=codex",
        "--env.player1.harness=claude-code",
        "-o",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 4
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        assert sum(t["rewards"]["payoff"] for t in episode["traces"]) == 0
        assert [t["agent"]["harness"] for t in episode["traces"]] == ["codex", "claude-code"]
        for trace in episode["traces"]:
            assert trace["errors"] == []
            assert trace["turns"]
            assert trace["metrics"]["forfeit"] == 0.0
    assert leftovers(scratch_root) == []
    assert "TAKETURNS_API_KEY=" not in (out / "episodes.jsonl").read_text()


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_an_agent_cli_giving_up_on_cut_replies_is_the_models_doing(
    harness: str, tmp_path: Path, scratch_root: Path
) -> None:
    """Every reply cut at ``max_tokens`` (the echo model repeats its long prompt; 2
    tokens a reply): Claude Code asks again, four times, then exits 1 with
    ``api_error: max_output_tokens``; Codex fails its turn at once ("Incomplete
    response returned, reason: max_output_tokens"), exit 1. The model caused it: the
    seat's segments end on the cut replies (an illegal action, so a forfeit), no
    harness error, the episode ok."""
    real({"claude-code": "claude"}.get(harness, harness))
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "1", "--model", "builtin/echo"]
    argv += [f"--env.player0.harness={harness}", "--sampling.max_tokens=2"]
    assert main([*argv, "-o", str(out), "--no-progress"]) == 0
    (episode,) = read_episodes(out / "episodes.jsonl")
    assert episode["ok"], episode["errors"]
    seat = episode["traces"][0]
    assert seat["agent"]["harness"] == harness
    assert seat["errors"] == []
    assert len(seat["turns"]) >= (4 if harness == "claude-code" else 1)
    assert {t["finish_reason"] for t in seat["turns"]} == {"length"}
    assert seat["info"]["gave_up_on_cut_replies"] >= 1
    assert seat["metrics"]["forfeit"] == 1.0
    assert leftovers(scratch_root) == []


def test_kuhn_with_gemini_cli_against_codex(tmp_path: Path, scratch_root: Path) -> None:
    """The issue's own command: ``taketurns eval kuhn-poker -n 4
    --env.player0.harness=gemini-cli --env.player1.harness=codex``, offline on the
    built-in model, both seats sandboxed."""
    real("gemini"), real("codex")
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "4", "--env.player0.harness=gemini-cli"]
    argv += ["--env.player1.harness=codex", "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 4
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        assert sum(t["rewards"]["payoff"] for t in episode["traces"]) == 0
        assert [t["agent"]["harness"] for t in episode["traces"]] == ["gemini-cli", "codex"]
        for trace in episode["traces"]:
            assert trace["errors"] == []
            assert trace["turns"]
            assert trace["metrics"]["forfeit"] == 0.0
            assert trace["info"]["sandbox"].startswith("bwrap")
        gemini = episode["traces"][0]
        # one request per segment: no hidden calls (loop detection, routing, titles)
        users = [m for m in gemini["messages"] if m["role"] == "user"]
        assert len(gemini["turns"]) == len(users)
    assert leftovers(scratch_root) == []
    assert "GEMINI_API_KEY=" not in (out / "episodes.jsonl").read_text()


# -- user-sim: >= 3 user turns, resumed natively ---------------------------------------


@pytest.mark.parametrize("harness", CLIS)
def test_user_sim_resumes_the_agent_natively(
    harness: str, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    out = tmp_path / "run"
    tasks = tmp_path / "qa.jsonl"
    tasks.write_text(json.dumps({"prompt": "Ask what the capital of France is."}) + "\n")
    argv = [
        "eval",
        "user-sim",
        "-n",
        "1",
        "--env.taskset=jsonl",
        f"--env.taskset.path={tasks}",
        f"--env.assistant.harness={harness}",
        f"--env.assistant.harness_options.binary={shim.path}",
        "--env.assistant.sandbox=none",  # the shim's record is outside its scratch
        "--env.user.limits.max_turns=4",
        "-o",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    (episode,) = read_episodes(out / "episodes.jsonl")
    assert episode["ok"], episode["errors"]
    assistant = next(t for t in episode["traces"] if t["agent"]["harness"] == harness)
    assert assistant["errors"] == []
    assert assistant["metrics"]["user_turns"] >= 3
    turns = assistant["turns"]
    assert len(turns) >= 3
    for earlier, later in itertools.pairwise(turns):
        # each later request carries the earlier turns: the agent's own session
        assert earlier["response"] in later["request"]
    runs = shim.runs()
    assert len(runs) == len(turns)
    resume = "resume" if harness == "codex" else "--resume"
    if harness == "gemini-cli":  # a fresh session of a uuid of its own, then that session
        assert (
            runs[0]["argv"][runs[0]["argv"].index("--session-id") + 1]
            == (runs[1]["argv"][runs[1]["argv"].index("--resume") + 1])
        )
    assert resume not in runs[0]["argv"]
    assert all(resume in r["argv"] for r in runs[1:])
    assert leftovers(scratch_root) == []


# -- the agent's own tool, limits, cancellation, environment ---------------------------


@pytest.mark.parametrize("harness", CLIS)
async def test_a_tool_round_trip_through_the_agents_own_tool(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    model = ScriptedModel(run_tool(harness), "The marker was printed.")
    with trio.fail_after(LIMIT):
        async with agent(harness, server, shim, model).chat(Task(0, prompt="run it")) as session:
            reply = await session.turn()
    assert reply.text == "The marker was printed."
    trace = session.trace
    assert trace.errors == []
    assert len(trace.turns) == 2
    results = [m for m in trace.turns[1].request if isinstance(m, ToolMessage)]
    assert any("tt-marker-42" in text_of(m.content) for m in results)
    # the segment's messages: the call, its result, the answer
    assert [m.role for m in reply.messages] == ["assistant", "tool", "assistant"]
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", CLIS)
async def test_a_limit_refusal_ends_the_segment_as_that_stop(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    model = ScriptedModel(run_tool(harness), "never sent")
    seat = agent(harness, server, shim, model, Limits(max_turns=1), sandbox="none")
    with trio.fail_after(LIMIT):
        async with seat.chat(Task(0, prompt="run it")) as session:
            reply = await session.turn()
    assert reply.stopped
    assert reply.stop_condition == "max_turns"
    assert session.trace.errors == []  # a stop, not a harness error
    assert len(session.trace.turns) == 1
    assert len(shim.runs()) == 1
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", CLIS)
async def test_cancellation_kills_the_agents_processes(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    model = Arrival(Sleep(120), "too late")
    with trio.fail_after(LIMIT):
        seat = agent(harness, server, shim, model, sandbox="none")
        async with seat.chat(Task(0, prompt="hi")) as session, trio.open_nursery() as nursery:
            nursery.start_soon(session.turn)
            await model.arrived.wait()  # the agent waits on its model call
            nursery.cancel_scope.cancel()
    (run,) = shim.runs()
    assert await dead_after_kill(run["pid"]) == []  # the whole group is dead
    assert session.trace.stop_condition == "user_closed"
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", CLIS)
async def test_a_segment_timeout_kills_the_agent_waiting_on_its_model_a_model_failure(
    harness: str, server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, harness)
    model = Arrival(Sleep(120), "too late")
    seat = agent(harness, server, shim, model, timeouts=Timeouts(segment_s=8), sandbox="none")
    with trio.fail_after(LIMIT):
        async with seat.chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
    # it timed out waiting on its model call: time on the endpoint is never held
    # against the model, so the run failed (cause model) instead of timing out
    assert model.requests
    assert reply.stop_condition == "model_error"
    (run,) = shim.runs()
    assert await dead_after_kill(run["pid"]) == []
    assert [e.kind for e in session.trace.errors] == ["model"]
    assert "segment_timeout" in session.trace.errors[0].message
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("harness", CLIS)
async def test_the_agent_gets_a_scrubbed_environment_and_the_system_prompt(
    harness: str,
    server: InterceptionServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HOST_SECRET"):
        monkeypatch.setenv(var, "host-key-must-not-leak")
    shim = Shim(tmp_path, harness)
    task = Task(0, prompt="hello", system_prompt="You are terse. SYSTEM-MARK-7.")
    with trio.fail_after(LIMIT):
        async with agent(harness, server, shim, sandbox="none").chat(task) as session:
            reply = await session.turn()
            endpoint = session.rollout.state["endpoint"]
    assert reply.text.endswith("hello")  # builtin/echo, through the agent
    (run,) = shim.runs()
    assert "host-key-must-not-leak" not in json.dumps(run["env"])
    assert endpoint.secret in run["env"].values()
    request = session.trace.turns[0].request
    assert any("SYSTEM-MARK-7" in text_of(m.content) for m in request if m.role == "system")
    users = [text_of(m.content) for m in request if isinstance(m, UserMessage)]
    assert users[-1].endswith("hello")


@pytest.mark.parametrize(
    ("harness", "package"),
    [
        ("codex", "@openai/codex"),
        ("claude-code", "@anthropic-ai/claude-code"),
        ("opencode", "opencode-ai"),
        ("gemini-cli", "@google/gemini-cli"),
    ],
)
def test_a_missing_agent_binary_is_one_config_error_naming_the_install(
    harness: str, package: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_harness(harness, {"binary": "no-such-agent-binary"}, field="env.player0")
    message = str(caught.value)
    assert "no-such-agent-binary" in message
    assert f"npm install -g {package}@" in message


# -- opencode (slow to start here: ~10-20 s a run) --------------------------------------


async def test_opencode_resumes_its_session_natively(
    server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    shim = Shim(tmp_path, "opencode")
    task = Task(0, prompt="pick  [x] or [y]", system_prompt="You play cards. SYSMARK-5.")
    seat = agent("opencode", server, shim, sandbox="none")
    with trio.fail_after(3 * LIMIT):
        async with seat.chat(task) as session:
            first = await session.turn()
            second = await session.turn("-now [p] or [q]")
    trace = session.trace
    assert trace.errors == []
    assert first.text == "pick  [x] or [y]"  # builtin/echo: the prompt arrived as it is
    assert second.text == "-now [p] or [q]"
    assert len(trace.turns) == 2  # no title-generation call
    assert trace.turns[0].response in trace.turns[1].request  # its own session, resumed
    assert any("SYSMARK-5" in text_of(m.content) for m in trace.turns[0].request)
    first_run, second_run = shim.runs()
    assert "--session" not in first_run["argv"]
    assert "--session" in second_run["argv"]
    assert leftovers(scratch_root) == []


async def test_opencode_takes_any_message_whole(
    server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    """Bare numbers, quotes, a leading dash, blank runs and newlines: the message
    reaches the model exactly as sent (on opencode's stdin), never on its argv."""
    shim = Shim(tmp_path, "opencode")
    message = "42\n  \"quoted\" and 'single' -5 --flag\n\n7"
    seat = agent("opencode", server, shim)
    with trio.fail_after(2 * LIMIT):
        async with seat.chat(Task(0, prompt="3")) as session:
            first = await session.turn()
            second = await session.turn(message)
    assert session.trace.errors == []
    assert first.text == "3"  # builtin/echo: a bare number, as it is
    assert second.text == message
    for run in shim.runs():
        assert not [word for word in run["argv"] if "quoted" in word or word == "3"]
    assert leftovers(scratch_root) == []


async def test_opencode_never_resends_a_failed_call(
    server: InterceptionServer, tmp_path: Path
) -> None:
    shim = Shim(tmp_path, "opencode")
    model = ScriptedModel(ModelEndpointError("upstream 503 down", status=503, retryable=True))
    with trio.fail_after(2 * LIMIT):
        async with agent("opencode", server, shim, model).chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
    assert reply.stop_condition == "model_error"
    assert len(session.trace.turns) == 1  # opencode's own retries never reached the model


async def test_gemini_cli_never_resends_a_failed_call(
    server: InterceptionServer, tmp_path: Path, scratch_root: Path
) -> None:
    """Its own retries are off (``general.maxAttempts: 1``): a 502 from the
    interception server (the upstream failure, already retried by the model client)
    is one recorded turn and a model failure, never a second request."""
    shim = Shim(tmp_path, "gemini-cli")
    model = ScriptedModel(ModelEndpointError("upstream 503 down", status=503, retryable=True))
    with trio.fail_after(LIMIT):
        async with agent("gemini-cli", server, shim, model).chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
    assert reply.stop_condition == "model_error"
    assert len(session.trace.turns) == 1
    assert len(model.requests) == 1
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize(
    ("harness", "options", "words"),
    [
        ("codex", {"sandbox": "bogus"}, "sandbox must be one of read-only, workspace-write"),
        ("claude-code", {"allowed_tools": "Bash"}, "allowed_tools must be a list of strings"),
        ("opencode", {"auto": "yes"}, "auto must be true or false"),
        ("gemini-cli", {"approval_mode": "always"}, "approval_mode must be one of default"),
        ("gemini-cli", {"sub_agents": "no"}, "sub_agents must be true or false"),
        ("codex", {"env": {"A": 1}}, "env must be a table of strings"),
        ("acp", {"agent": "codex", "permissions": "maybe"}, "permissions must be allow or reject"),
        ("mini-swe-agent", {"step_limit": 0}, "step_limit must be a positive integer"),
    ],
)
def test_bad_harness_options_are_one_config_error(
    harness: str, options: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        make_harness(harness, options, field="env.player0")
