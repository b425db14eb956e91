"""The ``mini-swe-agent`` harness with the real package (PyPI ``mini-swe-agent``, in
its own virtualenv with ``mini`` on PATH: ``.ci/run`` installs it): one-shot by
contract, its own ``bash`` tool, limits as stops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio
from agentprocs import leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from scripted import ScriptedModel, tool_call

from taketurns import Agent, AgentConfig, HarnessError, Limits, Task, ToolMessage
from taketurns._exchange.agent import make_harness
from taketurns.harness import text_of
from taketurns.http import InterceptionServer

LIMIT = 120  # seconds: importing litellm takes a while on a loaded machine


def seat(server: InterceptionServer, model: ScriptedModel, **limits: int) -> Agent:
    assert shutil.which("mini"), (
        "mini-swe-agent is not installed: python -m venv /opt/mini-swe-agent && "
        "/opt/mini-swe-agent/bin/pip install mini-swe-agent==2.4.6 && "
        "ln -s /opt/mini-swe-agent/bin/mini /usr/local/bin/mini"
    )
    return Agent(
        "agent",
        AgentConfig(model="builtin/echo", limits=Limits(**limits)),
        client=model,
        harness=make_harness("mini-swe-agent", {"step_limit": 5}, field="env.agent"),
        services={"interception": server},
    )


def bash(call_id: str, command: str) -> object:
    return tool_call(call_id, "bash", json.dumps({"command": command}))


SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nforty-two\\n'"


async def test_chat_is_refused_by_the_contract(server: InterceptionServer) -> None:
    with pytest.raises(HarnessError, match=r"cannot chat: it has no native resume"):
        seat(server, ScriptedModel()).chat(Task(0, prompt="hi"))


async def test_run_uses_its_own_bash_tool_and_submits(
    server: InterceptionServer, scratch_root: Path
) -> None:
    model = ScriptedModel(bash("call_m1", "echo mini-marker-3"), bash("call_m2", SUBMIT))
    task = Task(0, prompt="What is six times seven?", system_prompt="SYSMARK-9 be exact.")
    with trio.fail_after(LIMIT):
        trace = await seat(server, model).run(task)
    assert trace.errors == []
    assert trace.stop_condition == "agent_completed"
    assert len(trace.turns) == 2
    results = [m for m in trace.turns[1].request if isinstance(m, ToolMessage)]
    assert any("mini-marker-3" in text_of(m.content) for m in results)
    assert trace.info["mini_swe_agent"] == {"exit_status": "Submitted", "submission": "forty-two\n"}
    assert "SYSMARK-9" in text_of(trace.turns[0].request[0].content)
    assert "six times seven" in text_of(trace.turns[0].request[-1].content)
    assert leftovers(scratch_root) == []


async def test_a_limit_refusal_is_that_stop(server: InterceptionServer) -> None:
    model = ScriptedModel(bash("call_m3", "echo hi"), bash("call_m4", SUBMIT))
    with trio.fail_after(LIMIT):
        trace = await seat(server, model, max_turns=1).run(Task(0, prompt="go"))
    assert trace.stop_condition == "max_turns"
    assert trace.errors == []
    assert len(trace.turns) == 1
