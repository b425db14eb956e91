"""Nothing secret on an agent's command line: a Kuhn seat's system prompt (its card),
its prompt and its rollout's key never appear in any process's ``/proc/PID/cmdline``
(every process on the machine can read those, ``ps`` shows them) while the real CLI
runs its segment; and the CLIs' sub-agent features are off unless asked for, as
the tools each CLI offers its model show. Real CLIs on a scripted or built-in model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from agentprocs import Arrival
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from scripted import Sleep
from test_agent_clis import LIMIT, Shim, agent

from taketurns import Agent, AgentConfig, Task
from taketurns._exchange.agent import make_harness
from taketurns.envs.kuhn import ask_text, rules_prompt
from taketurns.http import InterceptionServer


def cmdlines() -> dict[int, bytes]:
    """Every live process's command line (NUL-separated words), by pid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:  # exited meanwhile
                continue
    return found


@pytest.mark.parametrize("harness", ["codex", "claude-code", "opencode", "gemini-cli"])
async def test_no_card_prompt_or_key_on_any_command_line(
    harness: str, server: InterceptionServer, tmp_path: Path
) -> None:
    shim = Shim(tmp_path, harness)
    system = rules_prompt(0, "K", 1) + " CARD-MARK-Kq7"
    prompt = ask_text([]) + " PROMPT-MARK-p3x"
    model = Arrival(Sleep(120), "too late")  # holds the CLI in its segment
    with trio.fail_after(3 * LIMIT):
        # unsandboxed: the shim records the run outside the scratch, and the host must
        # see the CLI's pid (a sandbox's PID namespace hides it from other rollouts)
        seat = agent(harness, server, shim, model, sandbox="none")
        task = Task(0, prompt=prompt, system_prompt=system, info={"card": "INFO-MARK-z9"})
        async with seat.chat(task) as session, trio.open_nursery() as nursery:
            nursery.start_soon(session.turn)
            await model.arrived.wait()  # the CLI runs, waiting on its model call
            secret = session.rollout.state["endpoint"].secret
            seen = cmdlines()
            settings = session.rollout.scratch_dir() / "home" / ".gemini" / "settings.json"
            gemini_settings = settings.read_text() if harness == "gemini-cli" else ""
            nursery.cancel_scope.cancel()
    (run,) = shim.runs()
    assert run["pid"] in seen  # the CLI itself was running (the shim exec'd it)
    # what turns sub-agents off reached the CLI (argv is fine for flags)
    if harness == "codex":
        assert "features.multi_agent=false" in run["argv"]
    elif harness == "claude-code":
        assert run["argv"][run["argv"].index("--disallowedTools") + 1] == "Agent"
    elif harness == "gemini-cli":
        assert "invoke_agent" in json.loads(gemini_settings)["tools"]["exclude"]
    else:
        config = json.loads(run["env"]["OPENCODE_CONFIG_CONTENT"])
        assert config["permission"] == {"task": "deny"}
    request = json.dumps([str(m.content) for m in model.requests[0].messages])
    assert "CARD-MARK-Kq7" in request  # they reached the model, not the command line
    assert "PROMPT-MARK-p3x" in request
    assert_nowhere(seen, secret)


def assert_nowhere(seen: dict[int, bytes], secret: str) -> None:
    for marker in ("CARD-MARK-Kq7", "Your card: K", "PROMPT-MARK-p3x", "INFO-MARK-z9", secret):
        holders = [pid for pid, line in seen.items() if marker.encode() in line]
        assert holders == [], (marker, [seen[pid][:200] for pid in holders])


@pytest.mark.parametrize(
    ("harness", "options"),
    [("acp", {"agent": "codex"}), ("acp", {"agent": "claude"}), ("mini-swe-agent", {})],
)
async def test_no_card_prompt_or_key_on_an_adapters_command_line(
    harness: str, options: dict[str, Any], server: InterceptionServer
) -> None:
    """The same for the ACP adapters (the prompt goes over JSON-RPC on stdin) and
    mini-swe-agent (task and system prompt in files), one-shot."""
    system = rules_prompt(1, "K", 1) + " CARD-MARK-Kq7"
    prompt = ask_text([]) + " PROMPT-MARK-p3x"
    model = Arrival(Sleep(120), "too late")
    seat = Agent(
        "agent",
        AgentConfig(model="builtin/echo"),
        client=model,
        harness=make_harness(harness, options, field="x"),
        services={"interception": server},
    )
    task = Task(0, prompt=prompt, system_prompt=system, info={"card": "INFO-MARK-z9"})
    with trio.fail_after(3 * LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(seat.run, task)
            await model.arrived.wait()
            (session,) = seat.sessions
            secret = session.rollout.state["endpoint"].secret
            seen = cmdlines()
            nursery.cancel_scope.cancel()
    request = json.dumps([str(m.content) for m in model.requests[0].messages])
    assert "CARD-MARK-Kq7" in request
    assert "PROMPT-MARK-p3x" in request
    assert_nowhere(seen, secret)


def offered_tools(trace: Any) -> set[str]:
    return {name for turn in trace.turns for name in turn.tools}


@pytest.mark.parametrize(
    ("harness", "options", "sub_agent_tools"),
    [
        ("codex", {}, {"multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent"}),
        ("claude-code", {}, {"Agent", "Task", "ListAgents", "Workflow"}),
        ("opencode", {}, {"task"}),
        ("gemini-cli", {}, {"invoke_agent"}),
        ("acp", {"agent": "codex"}, {"multi_agent_v1__spawn_agent"}),
        ("acp", {"agent": "claude"}, {"Agent", "Task"}),
    ],
)
async def test_sub_agents_are_off_unless_asked_for(
    harness: str,
    options: dict[str, Any],
    sub_agent_tools: set[str],
    server: InterceptionServer,
) -> None:
    """The model is offered no sub-agent tool by default; ``sub_agents = true`` gives
    the CLI its own default back (codex and claude-code offer them: checked there)."""
    traces = {}
    for sub_agents in (False, True):
        seat = Agent(
            "agent",
            AgentConfig(model="builtin/echo"),
            harness=make_harness(harness, {**options, "sub_agents": sub_agents}, field="x"),
            services={"interception": server},
        )
        with trio.fail_after(3 * LIMIT):
            traces[sub_agents] = await seat.run(Task(0, prompt="hi"))
    off, on = offered_tools(traces[False]), offered_tools(traces[True])
    assert traces[False].errors == []
    assert traces[True].errors == []
    assert off, "the model was offered no tools at all"
    assert not off & sub_agent_tools, off
    if harness in ("codex", "claude-code", "opencode", "gemini-cli"):
        assert on & sub_agent_tools, on  # the option really turns them back on
