"""The ``acp`` harness with the real adapters (``@zed-industries/codex-acp``,
``@zed-industries/claude-agent-acp``, installed by ``.ci/run``): one live process per
rollout, ``session/prompt`` per turn, ``session/load`` in a fresh process after the
first one died, everything killed and removed at close."""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest
import trio
from agentprocs import Arrival, leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from procs import marked
from scripted import ScriptedModel, Sleep, tool_call

from taketurns import Agent, AgentConfig, ConfigError, Limits, Task, ToolMessage
from taketurns._exchange.agent import make_harness
from taketurns.harness import text_of
from taketurns.http import InterceptionServer

ADAPTERS = {"codex": "codex-acp", "claude": "claude-agent-acp"}
LIMIT = 90  # seconds: claude-agent-acp takes several seconds to start


MARK = f"TT_ACP_MARK={uuid.uuid4().hex}"  # in every adapter's environment


async def none_marked() -> list[int]:
    """The live processes carrying ``MARK`` once none is left (waits up to 10 s): an
    adapter's whole tree, counted by PID."""
    with trio.move_on_after(10):
        while marked(MARK):  # noqa: ASYNC110 - a dying process sends no event
            await trio.sleep(0.05)
    return marked(MARK)


def seat(adapter: str, server: InterceptionServer, model: object = None, **limits: int) -> Agent:
    assert shutil.which(ADAPTERS[adapter]), (
        f"{ADAPTERS[adapter]} is not installed: run `npm install -g "
        "@zed-industries/codex-acp@0.16.0 @zed-industries/claude-agent-acp@0.23.1`"
    )
    return Agent(
        "agent",
        AgentConfig(model="builtin/bracket", limits=Limits(**limits)),
        client=model,  # type: ignore[arg-type]
        harness=make_harness(
            "acp",
            {"agent": adapter, "env": {"TT_ACP_MARK": MARK.split("=")[1]}},
            field="env.agent",
        ),
        services={"interception": server},
    )


@pytest.mark.parametrize("adapter", ["codex", "claude"])
async def test_one_live_process_per_rollout_and_session_load_after_a_crash(
    adapter: str, server: InterceptionServer, scratch_root: Path
) -> None:
    task = Task(0, prompt="pick [x] or [y]", system_prompt="You play cards. SYSMARK-3.")
    with trio.fail_after(LIMIT):
        async with seat(adapter, server).chat(task) as session:
            first = await session.turn()
            second = await session.turn("now [p] or [q]")
            state = session.rollout.state
            assert state["starts"] == 1  # the second turn started no process
            live = state["acp"]
            # claude-agent-acp writes its session transcript asynchronously: a crash
            # right at the end of a turn can lose that turn (the adapter's durability)
            await trio.sleep(3)
            # the adapter's process (its sandbox, as the harness sees it) dies between turns
            os.killpg(live.owned.process.pid, signal.SIGKILL)
            await live.owned.process.wait()
            third = await session.turn("last [m] or [n]")
            assert state["starts"] == 2
    assert first.text in ("[x]", "[y]")
    assert second.text in ("[p]", "[q]")
    assert third.text in ("[m]", "[n]")
    trace = session.trace
    assert trace.errors == []
    assert len(trace.turns) == 3
    # the restarted adapter loaded the session: the third request carries the first turn
    loaded = [text_of(m.content) for m in trace.turns[2].request]
    assert any(t.endswith("pick [x] or [y]") for t in loaded)
    assert first.text in loaded
    assert any("SYSMARK-3" in text_of(m.content) for m in trace.turns[0].request)
    assert await none_marked() == []
    assert leftovers(scratch_root) == []


async def test_codex_acp_runs_its_own_tool_with_permission(server: InterceptionServer) -> None:
    command = json.dumps({"cmd": "echo acp-marker-9"})
    model = ScriptedModel(tool_call("call_acp1", "exec_command", command), "Done.")
    with trio.fail_after(LIMIT):
        async with seat("codex", server, model).chat(Task(0, prompt="run it")) as session:
            reply = await session.turn()
    assert reply.text == "Done."
    results = [m for m in session.trace.turns[1].request if isinstance(m, ToolMessage)]
    assert any("acp-marker-9" in text_of(m.content) for m in results)


def echo_call(adapter: str) -> object:
    if adapter == "codex":
        return tool_call("call_acp2", "exec_command", json.dumps({"cmd": "echo hi"}))
    arguments = {"command": "echo hi", "description": "Print hi"}
    return tool_call("toolu_acp2", "Bash", json.dumps(arguments))


@pytest.mark.parametrize("adapter", ["codex", "claude"])
async def test_a_limit_refusal_inside_the_agents_loop_is_that_stop(
    adapter: str, server: InterceptionServer
) -> None:
    model = ScriptedModel(echo_call(adapter), "never sent")
    with trio.fail_after(LIMIT):
        async with seat(adapter, server, model, max_turns=1).chat(Task(0, prompt="go")) as session:
            reply = await session.turn()
    assert reply.stopped
    assert reply.stop_condition == "max_turns"
    assert session.trace.errors == []  # a stop, not a harness error
    assert len(session.trace.turns) == 1


def test_a_missing_adapter_names_its_install() -> None:
    with pytest.raises(ConfigError, match=r"npm install -g @zed-industries/claude-agent-acp@"):
        make_harness("acp", {"agent": "claude", "command": ["no-such-acp"]}, field="env.p")
    with pytest.raises(ConfigError, match=r"agent must be one of codex, claude"):
        make_harness("acp", {}, field="env.p")


async def test_a_cancelled_acp_segment_kills_the_adapter(
    server: InterceptionServer, scratch_root: Path
) -> None:
    model = Arrival(Sleep(120), "too late")
    with trio.fail_after(LIMIT):
        async with seat("codex", server, model).chat(Task(0, prompt="hi")) as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.turn)
                await model.arrived.wait()  # the adapter waits on its model call
                nursery.cancel_scope.cancel()
            assert "acp" not in session.rollout.state  # dropped with its segment
    assert await none_marked() == []
    assert leftovers(scratch_root) == []
