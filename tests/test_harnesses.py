"""The ``program``, ``stateful`` and ``tools`` harnesses, end to end: real subprocesses
(the reference programs) talking to a real interception server over loopback HTTP,
on the real clock (docs/design.md "Testing": autojump + sockets gives false timeouts).

Scratch directories are created in the test's own ``TMPDIR`` (``tests/conftest.py``),
so "none is left" is checked without racing other runs."""

from __future__ import annotations

import json
import os
import signal
import sys
import tomllib
import uuid
from collections.abc import AsyncIterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from procs import children, marked
from scripted import ScriptedModel, Sleep
from segments import HoldingHarness, held_segment

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    Limits,
    ModelEndpointError,
    RunDir,
    SessionOver,
    SystemMessage,
    Task,
    Timeouts,
    ToolMessage,
    UserMessage,
    load_eval_config,
    read_episodes,
    run_eval,
)
from taketurns._cli.main import main
from taketurns._eval.plan import Plan, make_env
from taketurns.env import ModelClient, ModelRequest, ModelResponse
from taketurns.envs.kuhn import KuhnConfig
from taketurns.harness import Harness, messages_from_wire, text_of
from taketurns.harnesses.program import ProgramHarness
from taketurns.harnesses.program_pool import ProgramPool
from taketurns.harnesses.program_process import ProgramProcess
from taketurns.harnesses.stateful import StatefulHarness
from taketurns.harnesses.tools import ToolsHarness
from taketurns.http import InterceptionServer, open_interception_server

# Generous: each segment starts a Python process.
LIMIT = 30


@pytest.fixture(autouse=True)
def scratch_root(private_tmpdir: Path) -> Path:
    """Where this test's rollouts make their scratch directories: the test's own
    ``TMPDIR`` (``tests/conftest.py``), short enough for the interception server's
    socket directory to be made there too (past 90 bytes it falls back to ``/tmp``,
    where a leftover fails no test)."""
    return private_tmpdir


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("taketurns-"))


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running


def lookup(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id, such as A17.
    """
    return {"order": order_id, "status": "shipped"}


class Arrival(ScriptedModel):
    """A ``ScriptedModel`` whose ``arrived`` event is set by its first request."""

    def __init__(self, *script: Any) -> None:
        super().__init__(*script)
        self.arrived = trio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.arrived.set()
        return await super().complete(request)


def make_agent(
    harness: Harness,
    server: InterceptionServer | None = None,
    *,
    model: str = "builtin/echo",
    client: ModelClient | None = None,
    limits: Limits | None = None,
    timeouts: Timeouts | None = None,
    tools: Sequence[Any] = (),
    sandbox: str = "bwrap",
) -> Agent:
    config = AgentConfig(
        model=model,
        harness=type(harness).id,
        limits=limits or Limits(),
        timeouts=timeouts or Timeouts(),
        sandbox=sandbox,
    )
    return Agent(
        "agent",
        config,
        client=client,
        harness=harness,
        services={"interception": server} if server is not None else None,
        tools=tools,
    )


def roles(messages: Sequence[Any]) -> list[str]:
    return [m.role for m in messages]


def no_errors(session_or_trace: Any) -> None:
    trace = getattr(session_or_trace, "trace", session_or_trace)
    assert trace.errors == [], trace.errors


# -- program -----------------------------------------------------------------------------


async def test_program_one_shot(server: InterceptionServer, scratch_root: Path) -> None:
    agent = make_agent(ProgramHarness(), server)
    task = Task(0, prompt="hello there", system_prompt="Be brief.")
    with trio.fail_after(LIMIT):
        trace = await agent.run(task)
    no_errors(trace)
    assert trace.stop_condition == "agent_completed"
    assert trace.agent.harness == "program"
    assert len(trace.turns) == 1
    assert trace.turns[0].request == (SystemMessage("Be brief."), UserMessage("hello there"))
    assert trace.messages == [
        SystemMessage("Be brief."),
        UserMessage("hello there"),
        AssistantMessage("hello there"),
    ]
    assert leftovers(scratch_root) == []


async def test_program_chat_relaunches_on_the_conversation(
    server: InterceptionServer, scratch_root: Path
) -> None:
    agent = make_agent(ProgramHarness(), server)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, system_prompt="Echo.")) as session:
            first = await session.turn("one")
            second = await session.turn("two")
            workdir = session.rollout.scratch_dir()
            relaunch = json.loads((workdir / "prompt-1.json").read_text())
            assert workdir.parent == scratch_root
    no_errors(session)
    assert (first.text, second.text) == ("one", "two")
    assert second.messages == (AssistantMessage("two"),)
    # the relaunch carries the whole conversation, system prompt once
    assert messages_from_wire(relaunch["messages"]) == [
        SystemMessage("Echo."),
        UserMessage("one"),
        AssistantMessage("one"),
        UserMessage("two"),
    ]
    assert session.trace.turns[1].request == tuple(messages_from_wire(relaunch["messages"]))
    assert not workdir.exists()
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("persistent", [False, True])
async def test_program_calls_the_rollouts_python_tools(
    persistent: bool, pools: Pools, server: InterceptionServer, scratch_root: Path
) -> None:
    harness = pools() if persistent else ProgramHarness()
    agent = make_agent(harness, server, model="builtin/tools", tools=[lookup])
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="Where is order_id=A17 now?"))
    no_errors(trace)
    result = json.dumps({"order": "A17", "status": "shipped"})
    assert roles(trace.messages) == ["user", "assistant", "tool", "assistant"]
    call = trace.messages[1].tool_calls[0]
    assert (call.name, json.loads(call.arguments)) == ("lookup", {"order_id": "A17"})
    assert trace.messages[2] == ToolMessage(call.id, result, "lookup")
    assert trace.messages[3] == AssistantMessage(f"The tool said: {result}")
    assert len(trace.turns) == 2
    assert trace.turns[0].tools == ("lookup",)
    assert trace.turns[1].request[-1] == trace.messages[2]
    await pools.close()
    assert leftovers(scratch_root) == []


@pytest.mark.parametrize("persistent", [False, True])
async def test_program_stopped_by_a_limit_ends_cleanly(
    persistent: bool, pools: Pools, server: InterceptionServer, scratch_root: Path
) -> None:
    harness = pools() if persistent else ProgramHarness()
    agent = make_agent(
        harness,
        server,
        model="builtin/tools",
        tools=[lookup],
        limits=Limits(max_turns=1),
    )
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="order_id=B2")) as session:
            reply = await session.turn()
            with pytest.raises(SessionOver):
                await session.turn("more")
    assert reply.stopped
    assert reply.stop_condition == "max_turns"
    # what the program produced before the refusal is kept
    assert roles(reply.messages) == ["assistant", "tool"]
    assert session.trace.stop_condition == "max_turns"
    assert len(session.trace.turns) == 1
    no_errors(session)  # exit status 3 after a refusal is not a harness error
    if persistent:  # it answered "stopped" on its line: it serves on
        assert len(pool_of(harness).idle) == 1
        await pools.close()
    assert leftovers(scratch_root) == []


async def test_the_reference_program_exits_3_when_refused(
    server: InterceptionServer, tmp_path: Path
) -> None:
    agent = make_agent(HoldingHarness(), server, limits=Limits(max_turns=1))
    prompt = tmp_path / "prompt.json"
    prompt.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    output = tmp_path / "output.json"
    with trio.fail_after(LIMIT):
        chat = agent.chat(Task(0, prompt="go"))
        async with chat as session, held_segment(session) as endpoint:
            env = {**os.environ, "OPENAI_BASE_URL": endpoint.base_url}
            command = [sys.executable, "-m", "taketurns.harnesses.programs.chat"]
            args = ["--prompt-file", str(prompt), "--output-file", str(output)]
            first = await trio.run_process(
                [*command, *args],
                env={**env, "OPENAI_API_KEY": endpoint.secret},
                capture_stderr=True,
            )
            second = await trio.run_process(
                [*command, *args],
                env={**env, "OPENAI_API_KEY": endpoint.secret},
                capture_stderr=True,
                check=False,
            )
    assert first.returncode == 0
    assert second.returncode == 3
    assert b"stopped" in second.stderr
    assert json.loads(output.read_text()) == {"messages": []}
    assert session.trace.stop_condition == "max_turns"
    assert len(session.trace.turns) == 1


@pytest.mark.parametrize("persistent", [False, True])
async def test_program_survives_a_retryable_upstream_failure(
    persistent: bool,
    pools: Pools,
    server: InterceptionServer,
) -> None:
    model = ScriptedModel(ModelEndpointError("overloaded", status=503, retryable=True), "fine")
    agent = make_agent(pools() if persistent else ProgramHarness(), server, client=model)
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="hi"))
    # the program's retry (marked x-stainless-retry-count: 1) was a fresh attempt
    assert trace.last_text == "fine"
    assert trace.stop_condition == "agent_completed"
    assert [t.error for t in trace.turns] == ["overloaded", None]
    assert [e.kind for e in trace.errors] == ["model"]


@pytest.mark.parametrize("persistent", [False, True])
async def test_program_failing_on_a_non_retryable_upstream_failure(
    persistent: bool,
    pools: Pools,
    server: InterceptionServer,
) -> None:
    model = ScriptedModel(ModelEndpointError("bad request", status=400, retryable=False))
    agent = make_agent(pools() if persistent else ProgramHarness(), server, client=model)
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="hi"))
    assert len(trace.turns) == 1
    assert trace.turns[0].error == "bad request"
    assert [e.kind for e in trace.errors] == ["model", "harness"]
    assert "424" in trace.errors[1].message
    assert trace.stop_condition == "model_error"  # as in process; the tail is kept


async def test_a_failing_program_is_a_harness_error_with_a_scrubbed_tail(
    server: InterceptionServer, scratch_root: Path
) -> None:
    script = (
        "import os, sys; key = os.environ['OPENAI_API_KEY']; "
        "print('stdout says hi'); sys.stderr.write('leaked ' + key + ' oops'); sys.exit(1)"
    )
    harness = ProgramHarness([sys.executable, "-c", script])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
            secret = session.rollout.state["endpoint"].secret
            workdir = session.rollout.scratch_dir()
            assert workdir.exists()
    assert reply.stopped
    assert reply.stop_condition == "harness_error"
    [error] = session.trace.errors
    assert error.kind == "harness"
    assert "status 1" in error.message
    assert "leaked *** oops" in error.message
    assert "stdout says hi" in error.message
    assert secret not in error.message
    assert secret not in repr(session.trace)
    assert not workdir.exists()
    assert leftovers(scratch_root) == []


async def test_a_program_that_writes_no_output_is_a_harness_error(
    server: InterceptionServer,
) -> None:
    harness = ProgramHarness([sys.executable, "-c", "pass"])
    with trio.fail_after(LIMIT):
        trace = await make_agent(harness, server).run(Task(0, prompt="hi"))
    assert trace.stop_condition == "harness_error"
    assert "no output file" in trace.errors[0].message


async def test_a_served_harness_without_the_server_says_how_to_get_one(
    scratch_root: Path,
) -> None:
    with trio.fail_after(LIMIT):
        trace = await make_agent(ProgramHarness()).run(Task(0, prompt="hi"))
    assert trace.stop_condition == "harness_error"
    assert "open_interception_server" in trace.errors[0].message
    assert leftovers(scratch_root) == []


async def test_cancelling_a_segment_kills_the_program_and_its_model_call(
    server: InterceptionServer, scratch_root: Path
) -> None:
    model = Arrival(Sleep(60), "never")
    agent = make_agent(ProgramHarness(), server, client=model)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="hi")) as session:
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.turn)
                    await model.arrived.wait()  # the program is waiting on the model
                    workdir = session.rollout.scratch_dir()
                    scope.cancel()
            assert scope.cancelled_caught
            assert model.in_flight == 0  # the segment's end cancelled and joined its call
            assert workdir.exists()
    assert not workdir.exists()
    assert leftovers(scratch_root) == []
    assert session.trace.turns == []
    assert session.trace.stop_condition == "user_closed"


async def test_a_segment_timeout_stops_a_sleeping_program(
    server: InterceptionServer, scratch_root: Path
) -> None:
    harness = ProgramHarness([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = make_agent(harness, server, timeouts=Timeouts(segment_s=1.0))
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
    assert reply.stopped
    assert reply.stop_condition == "segment_timeout"
    no_errors(session)
    assert leftovers(scratch_root) == []


# -- program, persistent: a pool of programs shared by the harness's rollouts ------------


def start_log_command(log: Path, module: str = "taketurns.harnesses.programs.chat") -> list[str]:
    """Runs the reference program ``module`` after appending [cwd, argv] to ``log``:
    one line per process started. ``log`` lies outside the program's scratch: its
    agent needs ``sandbox = "none"`` (a sandbox refuses that write)."""
    script = (
        "import json, os, runpy, sys\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps([os.getcwd(), sys.argv[1:]]) + '\\n')\n"
        f"runpy.run_module({module!r}, run_name='__main__')\n"
    )
    return [sys.executable, "-c", script]


def starts(log: Path) -> list[Any]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# A serving program that answers "<n>: <text>" to the last message's text without
# calling the model (n: its number in the pool, the name of its own directory),
# except: "die" exits 5 (its key on stderr), "hang" never answers.
ECHO_SERVER = """\
import json, os, sys, time
for line in iter(sys.stdin.readline, ""):
    prompt = json.loads(line)
    text = prompt["messages"][-1]["content"]
    sys.stderr.write("serving " + text + "\\n")
    sys.stderr.flush()
    if text == "die":
        sys.stderr.write("dying with " + prompt["api_key"] + " in hand\\n")
        sys.exit(5)
    if text == "hang":
        time.sleep(60)
    answer = {"role": "assistant", "content": f"{os.path.basename(os.getcwd())}: {text}"}
    print(json.dumps({"messages": [answer]}), flush=True)
"""


def number_of(reply_or_trace: Any) -> int:
    text = getattr(reply_or_trace, "text", None) or reply_or_trace.last_text
    return int(text.split(":")[0])


class Pools:
    """Makes pooled harnesses whose programs carry a fresh marker in their
    environment; ``close`` shuts them all down and checks nothing is left."""

    def __init__(self) -> None:
        self.marker = f"TAKETURNS_POOLED_{uuid.uuid4().hex}"
        self.made: list[ProgramHarness] = []

    def __call__(self, command: Sequence[str] | None = None, **options: Any) -> ProgramHarness:
        harness = ProgramHarness(command, env={self.marker: "1"}, persistent=True, **options)
        self.made.append(harness)
        return harness

    def alive(self) -> list[int]:
        return marked(self.marker)

    async def close(self) -> None:
        pools = [h.pool for h in self.made if h.pool is not None]
        programs = [p for pool in pools for p in pool.programs]
        for harness in self.made:
            await harness.shutdown()
        for program in programs:
            gone(program)
        assert self.alive() == []
        assert all(pool.directory is None for pool in pools)


@pytest.fixture
async def pools() -> AsyncIterator[Pools]:
    made = Pools()
    try:
        yield made
    finally:
        await made.close()


def pool_of(harness: ProgramHarness) -> ProgramPool:
    assert harness.pool is not None
    return harness.pool


def gone(program: ProgramProcess) -> None:
    """The program was reaped: not running, not a zombie child of this process, its
    files removed."""
    assert program.process.returncode is not None
    assert program.process.pid not in [pid for pid, _ in children()]
    assert not program.workdir.exists()
    assert not program.stderr_path.exists()


async def warm(harness: ProgramHarness, server: InterceptionServer, n: int) -> None:
    """Run ``n`` segments at once, so the pool holds ``n`` idle programs."""
    agent = make_agent(harness, server)
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(agent.run, Task(i, prompt=f"warm {i}"))
    assert len(pool_of(harness).idle) == n


async def test_pooled_chat_runs_every_turn_on_one_warm_program(
    pools: Pools, server: InterceptionServer, scratch_root: Path, tmp_path: Path
) -> None:
    log = tmp_path / "starts.jsonl"
    harness = pools(start_log_command(log))
    agent = make_agent(harness, server, model="builtin/tools", tools=[lookup], sandbox="none")
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, system_prompt="Look orders up.")) as session:
            one = await session.turn("order_id=A1")
            two = await session.turn("and order_id=B2")
            three = await session.turn("last one: order_id=C3")
            workdir = session.rollout.scratch_dir()
        again = await agent.run(Task(1, prompt="order_id=D4"))  # another rollout, same program
    no_errors(session)
    no_errors(again)
    pool = pool_of(harness)
    directory = pool.directory
    assert directory is not None
    [(cwd, argv)] = starts(log)
    assert (Path(cwd).parent, argv) == (directory, ["--serve"])  # its own dir in the pool's
    for reply, order in ((one, "A1"), (two, "B2"), (three, "C3")):
        assert roles(reply.messages) == ["assistant", "tool", "assistant"]
        assert reply.text == "The tool said: " + json.dumps({"order": order, "status": "shipped"})
    conversation = session.trace.messages
    assert roles(conversation) == ["system", *(["user", "assistant", "tool", "assistant"] * 3)]
    assert conversation[9] == UserMessage("last one: order_id=C3")
    # every model call saw the conversation up to that point, system prompt once
    requests = [turn.request for turn in session.trace.turns]
    assert requests == [tuple(conversation[:n]) for n in (2, 4, 6, 8, 10, 12)]
    assert "D4" in (again.last_text or "")
    assert not workdir.exists()  # the rollout's scratch dir is not the program's
    assert leftovers(scratch_root) == [directory.name]
    [program] = pool.programs
    await harness.shutdown()
    gone(program)
    assert harness.pool is None
    assert leftovers(scratch_root) == []
    await harness.shutdown()  # idempotent
    # a later segment opens a new pool
    with trio.fail_after(LIMIT):
        assert "E5" in ((await agent.run(Task(2, prompt="order_id=E5"))).last_text or "")
    assert len(starts(log)) == 2
    assert pool_of(harness) is not pool


async def test_pooled_programs_route_every_call_to_its_own_rollout(
    pools: Pools, server: InterceptionServer, tmp_path: Path
) -> None:
    log = tmp_path / "starts.jsonl"
    harness = pools(start_log_command(log), max_programs=2)
    agent = make_agent(harness, server, sandbox="none")  # builtin/echo: echoes the last message
    sessions: list[Any] = []

    async def converse(i: int) -> None:
        async with agent.chat(Task(i)) as session:
            sessions.append(session)
            for j in range(3):
                reply = await session.turn(f"rollout {i} turn {j}")
                assert reply.text == f"rollout {i} turn {j}"

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(converse, i)
    assert len(starts(log)) == pool_of(harness).starts <= 2  # 6 rollouts, 18 segments
    for session in sessions:
        no_errors(session)
        conversation = session.trace.messages
        assert roles(conversation) == ["user", "assistant"] * 3
        # each call is on its own rollout's trace, with that rollout's conversation
        assert [turn.request for turn in session.trace.turns] == [
            tuple(conversation[:n]) for n in (1, 3, 5)
        ]


async def test_a_pooled_program_that_exits_mid_segment_is_replaced_by_a_fresh_one(
    pools: Pools, server: InterceptionServer
) -> None:
    harness = pools([sys.executable, "-c", ECHO_SERVER], max_programs=1)
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        first = await agent.run(Task(0, prompt="hi"))
        [program] = pool_of(harness).programs
        async with agent.chat(Task(1, prompt="die")) as session:
            reply = await session.turn()
            secret = session.rollout.state["endpoint"].secret
        after = await agent.run(Task(2, prompt="still there?"))  # another rollout
    assert number_of(first) == int(program.workdir.name)
    assert reply.stopped
    assert reply.stop_condition == "harness_error"
    [error] = session.trace.errors
    assert (error.kind, error.type) == ("harness", "HarnessError")
    assert "exited with status 5" in error.message
    assert "serving die" in error.message
    assert "dying with *** in hand" in error.message
    assert "serving hi" not in error.message  # only this segment's stderr is quoted
    assert secret not in error.message
    assert secret not in repr(session.trace)
    gone(program)
    no_errors(after)
    assert after.last_text == f"{number_of(after)}: still there?"
    assert number_of(after) != int(program.workdir.name)
    assert pool_of(harness).starts == 2


GARBAGE = """\
import json, os, sys
sys.stdin.readline()
print(json.dumps({{"messages": [{{"role": "assistant", "content": "ready"}}]}}), flush=True)
key = json.loads(sys.stdin.readline())["api_key"]
sys.stderr.write("about to answer\\n")
print({line!r}.replace("KEY", key), flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize(
    "line",
    [
        "not json, KEY",
        '{"text": "KEY"}',
        '{"messages": [{"role": "wizard", "content": "KEY"}]}',
        '["messages", "KEY"]',
    ],
)
async def test_a_pooled_program_answering_garbage_is_a_harness_error_and_killed(
    line: str, pools: Pools, server: InterceptionServer
) -> None:
    harness = pools([sys.executable, "-c", GARBAGE.format(line=line)])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        assert (await agent.run(Task(0, prompt="hi"))).last_text == "ready"
        [program] = pool_of(harness).idle
        async with agent.chat(Task(1, prompt="hi")) as session:
            reply = await session.turn()
            secret = session.rollout.state["endpoint"].secret
    assert program.process.returncode == 128 + signal.SIGKILL  # killed (supervisor: 128 + n)
    gone(program)
    assert pool_of(harness).programs == set()
    assert reply.stop_condition == "harness_error"
    assert reply.messages == ()
    [error] = session.trace.errors
    assert error.type == "HarnessError"
    assert "answered garbage" in error.message
    assert "about to answer" in error.message  # the stderr tail
    assert "***" in error.message
    assert secret not in repr(session.trace)


@pytest.mark.parametrize("how", ["cancelled", "segment_timeout"])
async def test_a_pooled_segment_cancelled_or_timed_out_kills_only_its_program(
    how: str, pools: Pools, server: InterceptionServer
) -> None:
    harness = pools([sys.executable, "-c", ECHO_SERVER])
    with trio.fail_after(LIMIT):
        await warm(harness, server, 2)
        pool = pool_of(harness)
        other, busy = pool.idle  # the most recently used is taken first
        if how == "cancelled":
            agent = make_agent(harness, server)
            async with agent.chat(Task(0, prompt="hang")) as session:
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(session.turn)
                        await trio.testing.wait_all_tasks_blocked()  # the line is sent
                        scope.cancel()
            assert session.trace.stop_condition == "user_closed"
        else:
            agent = make_agent(harness, server, timeouts=Timeouts(segment_s=0.5))
            reply = await agent.run(Task(0, prompt="hang"))
            assert reply.stop_condition == "segment_timeout"
            no_errors(reply)
        assert busy.process.returncode == 128 + signal.SIGKILL  # as the supervisor reports it
        gone(busy)
        assert pool.idle == [other]
        assert pool.programs == {other}
        after = await make_agent(harness, server).run(Task(1, prompt="next"))
    assert number_of(after) == int(other.workdir.name)
    assert pool.starts == 2


async def test_cancelling_a_pooled_segment_cancels_its_programs_model_call(
    pools: Pools, server: InterceptionServer
) -> None:
    model = Arrival(Sleep(60), "never")
    harness = pools()
    agent = make_agent(harness, server, client=model)
    with trio.fail_after(LIMIT), trio.CancelScope() as scope:
        async with agent.chat(Task(0, prompt="hi")) as session, trio.open_nursery() as nursery:
            nursery.start_soon(session.turn)
            await model.arrived.wait()  # the program is waiting on the model
            [program] = pool_of(harness).programs
            scope.cancel()
    assert scope.cancelled_caught
    assert session.trace.stop_condition == "cancelled"
    assert program.process.returncode == 128 + signal.SIGKILL  # as the supervisor reports it
    gone(program)
    assert model.in_flight == 0  # the segment's end cancelled and joined its call


async def test_a_pooled_program_that_died_while_idle_is_replaced_transparently(
    pools: Pools, server: InterceptionServer
) -> None:
    harness = pools([sys.executable, "-c", ECHO_SERVER])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        first = await agent.run(Task(0, prompt="one"))
        [program] = pool_of(harness).idle
        program.process.send_signal(signal.SIGTERM)
        await program.process.wait()
        second = await agent.run(Task(1, prompt="two"))
    no_errors(second)
    assert number_of(first) == int(program.workdir.name)
    assert second.last_text == f"{number_of(second)}: two"
    assert number_of(second) != int(program.workdir.name)
    gone(program)
    assert pool_of(harness).starts == 2


# -- stateful ----------------------------------------------------------------------------


async def test_stateful_one_shot(server: InterceptionServer, scratch_root: Path) -> None:
    agent = make_agent(StatefulHarness(), server)
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="hello", system_prompt="Echo."))
    no_errors(trace)
    assert trace.agent.harness == "stateful"
    assert trace.last_text == "hello"
    assert trace.stop_condition == "agent_completed"
    assert leftovers(scratch_root) == []


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


async def test_stateful_resumes_natively_with_only_the_new_message(
    server: InterceptionServer, scratch_root: Path
) -> None:
    agent = make_agent(StatefulHarness(), server)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="first", system_prompt="Echo.")) as session:
            one = await session.turn()
            two = await session.turn("second")
            three = await session.turn([UserMessage("third"), UserMessage("fourth")])
            workdir = session.rollout.scratch_dir()
            files = sorted(p.name for p in workdir.iterdir())
            message_1 = read_json(workdir / "message-1.json")
            message_2 = read_json(workdir / "message-2.json")
            kept = messages_from_wire(read_json(workdir / "session.json")["messages"])
    no_errors(session)
    assert (one.text, two.text, three.text) == ("first", "second", "fourth")
    assert files == [
        "message-1.json",
        "message-2.json",
        "output-0.json",
        "output-1.json",
        "output-2.json",
        "prompt-0.json",
        "session.json",
    ]
    # resumed segments get only the user's new messages...
    assert message_1 == {"messages": [{"role": "user", "content": "second"}]}
    assert message_2 == {
        "messages": [{"role": "user", "content": "third"}, {"role": "user", "content": "fourth"}]
    }
    # ...and the program's own session supplies the rest
    conversation = [
        SystemMessage("Echo."),
        UserMessage("first"),
        AssistantMessage("first"),
        UserMessage("second"),
        AssistantMessage("second"),
        UserMessage("third"),
        UserMessage("fourth"),
        AssistantMessage("fourth"),
    ]
    assert kept == conversation
    assert session.trace.messages == conversation
    assert session.trace.turns[2].request == tuple(conversation[:-1])
    assert not workdir.exists()
    assert leftovers(scratch_root) == []


def logging_command(log: Path, module: str) -> list[str]:
    """Runs the reference program ``module`` after appending its argv to ``log``."""
    script = (
        "import json, runpy, sys\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"runpy.run_module({module!r}, run_name='__main__')\n"
    )
    return [sys.executable, "-c", script]


def flags(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


async def test_stateful_first_segment_opened_by_the_user_launches_fresh(
    server: InterceptionServer, scratch_root: Path, tmp_path: Path
) -> None:
    log = tmp_path / "argv.jsonl"
    harness = StatefulHarness(logging_command(log, "taketurns.harnesses.programs.stateful"))
    agent = make_agent(harness, server, sandbox="none")  # the log is outside scratch
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, system_prompt="Echo.")) as session:
            hi = await session.turn("hi")
            workdir = session.rollout.scratch_dir()
            after_first = sorted(p.name for p in workdir.iterdir())
            fresh = read_json(workdir / "prompt-0.json")
            again = await session.turn("again")
            resumed = read_json(workdir / "message-1.json")
    no_errors(session)
    assert (hi.text, again.text) == ("hi", "again")
    assert after_first == ["output-0.json", "prompt-0.json", "session.json"]
    assert fresh["messages"] == [
        {"role": "system", "content": "Echo."},
        {"role": "user", "content": "hi"},
    ]
    assert resumed == {"messages": [{"role": "user", "content": "again"}]}
    launches = [json.loads(line) for line in log.read_text().splitlines()]
    assert [flags(argv) for argv in launches] == [
        ["--session-dir", "--prompt-file", "--output-file"],
        ["--session-dir", "--resume", "--message-file", "--output-file"],
    ]
    assert session.trace.turns[1].request == (
        SystemMessage("Echo."),
        UserMessage("hi"),
        AssistantMessage("hi"),
        UserMessage("again"),
    )
    assert leftovers(scratch_root) == []


async def test_stateful_keeps_its_tools_across_resumes(
    server: InterceptionServer, scratch_root: Path
) -> None:
    agent = make_agent(StatefulHarness(), server, model="builtin/tools", tools=[lookup])
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="order_id=A1")) as session:
            first = await session.turn()
            second = await session.turn("and order_id=B2?")
    no_errors(session)
    assert "A1" in first.text
    assert "B2" in second.text
    assert roles(second.messages) == ["assistant", "tool", "assistant"]
    assert [t.tools for t in session.trace.turns] == [("lookup",)] * 4
    assert leftovers(scratch_root) == []


async def test_stateful_cleans_up_after_a_failing_program(
    server: InterceptionServer, scratch_root: Path
) -> None:
    harness = StatefulHarness([sys.executable, "-c", "import sys; sys.exit(1)"])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="hi")) as session:
            reply = await session.turn()
            assert leftovers(scratch_root) != []
    assert reply.stop_condition == "harness_error"
    assert session.trace.errors[0].kind == "harness"
    assert leftovers(scratch_root) == []


async def test_stateful_cleans_up_after_cancellation(
    server: InterceptionServer, scratch_root: Path
) -> None:
    harness = StatefulHarness([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0, prompt="hi")) as session:
            with trio.move_on_after(1.0) as scope:
                await session.turn()
            assert scope.cancelled_caught
            assert leftovers(scratch_root) != []
    assert leftovers(scratch_root) == []
    assert session.trace.stop_condition == "user_closed"


async def test_cancelling_the_chat_block_cleans_up(
    server: InterceptionServer, scratch_root: Path
) -> None:
    harness = StatefulHarness([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = make_agent(harness, server)
    with trio.fail_after(LIMIT), trio.move_on_after(1.0):
        async with agent.chat(Task(0, prompt="hi")) as session:
            await session.turn()
    assert leftovers(scratch_root) == []
    assert session.trace.stop_condition == "cancelled"


# -- tools (in process) ------------------------------------------------------------------


async def test_tools_one_shot_calls_a_tool_then_answers(scratch_root: Path) -> None:
    agent = make_agent(ToolsHarness(), model="builtin/tools", tools=[lookup])
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="order_id=C3"))
    no_errors(trace)
    result = json.dumps({"order": "C3", "status": "shipped"})
    assert roles(trace.messages) == ["user", "assistant", "tool", "assistant"]
    assert text_of(trace.messages[2].content) == result
    assert trace.last_text == f"The tool said: {result}"
    assert len(trace.turns) == 2
    assert leftovers(scratch_root) == []


async def test_tools_chat_runs_one_tool_loop_per_segment() -> None:
    async def slow_lookup(order_id: str) -> str:
        """Look an order up (slowly)."""
        await trio.lowlevel.checkpoint()
        return f"{order_id} is late"

    agent = make_agent(ToolsHarness(), model="builtin/tools", tools=[slow_lookup])
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0)) as session:
            one = await session.turn("order_id=D4")
            two = await session.turn("order_id=E5")
    no_errors(session)
    assert one.text == "The tool said: D4 is late"
    assert two.text == "The tool said: E5 is late"
    assert roles(two.messages) == ["assistant", "tool", "assistant"]
    assert roles(session.trace.messages) == ["user", "assistant", "tool", "assistant"] * 2
    # the second segment relaunches on the whole conversation
    assert session.trace.turns[2].request == tuple(session.trace.messages[:5])


async def test_tools_every_model_call_counts_toward_max_turns() -> None:
    agent = make_agent(
        ToolsHarness(), model="builtin/tools", tools=[lookup], limits=Limits(max_turns=3)
    )
    with trio.fail_after(LIMIT):
        async with agent.chat(Task(0)) as session:
            one = await session.turn("order_id=F6")
            two = await session.turn("order_id=G7")
    assert not one.stopped
    assert two.stopped
    assert two.stop_condition == "max_turns"
    assert roles(two.messages) == ["assistant", "tool"]  # the tool ran; the answer was refused
    assert len(session.trace.turns) == 3
    no_errors(session)


async def test_tools_offers_no_tools_when_there_are_none() -> None:
    model = ScriptedModel("plain")
    agent = make_agent(ToolsHarness(), client=model)
    with trio.fail_after(LIMIT):
        trace = await agent.run(Task(0, prompt="hi"))
    assert trace.last_text == "plain"
    assert model.requests[0].tools == ()


# -- Kuhn seats through the CLI ----------------------------------------------------------


@pytest.mark.parametrize("harness", ["program", "stateful"])
def test_kuhn_seats_on_served_harnesses(harness: str, tmp_path: Path, scratch_root: Path) -> None:
    out = tmp_path / "run"
    argv = [
        "eval",
        "kuhn-poker",
        "-n",
        "4",
        f"--env.player0.harness={harness}",
        f"--env.player1.harness={harness}",
        "-o",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 4
    for episode in episodes:
        assert episode["ok"]
        assert episode["errors"] == []
        assert sum(t["rewards"]["payoff"] for t in episode["traces"]) == 0
        for trace in episode["traces"]:
            assert trace["agent"]["harness"] == harness
            assert trace["errors"] == []
            assert trace["turns"]
            assert trace["stop_condition"] == "user_closed"
    assert leftovers(scratch_root) == []
    # no secret reached the output files
    text = (out / "episodes.jsonl").read_text()
    assert "Bearer" not in text
    assert "OPENAI_API_KEY" not in text


def pooled_kuhn_config(path: Path, command: Sequence[str], marker: str) -> Path:
    """An eval config: both Kuhn seats on pooled ``command`` programs marked ``marker``."""
    options = (
        f"{{ command = {json.dumps(list(command))}, persistent = true, "
        f'env = {{ {marker} = "1" }} }}'
    )
    path.write_text(
        'env_id = "kuhn-poker"\n'
        + "".join(
            f'[env.{seat}]\nharness = "program"\nsandbox = "none"\nharness_options = {options}\n'
            for seat in ("player0", "player1")
        )
    )
    return path


def test_kuhn_self_play_on_pooled_programs(tmp_path: Path, scratch_root: Path) -> None:
    log = tmp_path / "starts.jsonl"
    marker = f"TAKETURNS_POOLED_{uuid.uuid4().hex}"
    config = pooled_kuhn_config(tmp_path / "eval.toml", start_log_command(log), marker)
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-C", str(config), "-n", "20", "-c", "2", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 20
    segments = 0
    for episode in episodes:
        assert episode["ok"]
        assert episode["errors"] == []
        assert sum(t["rewards"]["payoff"] for t in episode["traces"]) == 0
        for trace in episode["traces"]:
            assert trace["errors"] == []
            assert trace["stop_condition"] == "user_closed"
            # every call is on its own rollout's trace: its seat's, in its hand
            own = f"You are player{trace['info']['seat']} in hand #{episode['task']['idx']} "
            assert trace["turns"]
            for turn in trace["turns"]:
                assert turn["request"][0]["content"].startswith(own)
            segments += len(trace["turns"])  # one model call per segment here
    # one pool per seat, each at most as many programs as episodes run at once
    launched = starts(log)
    assert len(launched) <= 4
    assert all(argv == ["--serve"] for _, argv in launched)
    assert segments > 40
    # after the eval: every program killed and reaped, the pools' directories removed
    assert marked(marker) == []
    assert leftovers(scratch_root) == []


# player0 checks; player1 never answers
CHECK_THEN_HANG = """\
import json, sys, time
for line in iter(sys.stdin.readline, ""):
    if "You are player1" in json.loads(line)["messages"][0]["content"]:
        time.sleep(60)
    print(json.dumps({"messages": [{"role": "assistant", "content": "[check]"}]}), flush=True)
"""


async def test_an_eval_cancelled_from_outside_closes_its_pools(
    tmp_path: Path, scratch_root: Path
) -> None:
    marker = f"TAKETURNS_POOLED_{uuid.uuid4().hex}"
    command = [sys.executable, "-c", CHECK_THEN_HANG]
    config_path = pooled_kuhn_config(tmp_path / "eval.toml", command, marker)
    config = load_eval_config(
        KuhnConfig, file_data={**tomllib.loads(config_path.read_text()), "num_tasks": 2}
    )
    plan = Plan(config, make_env(config))
    seat0, seat1 = (plan.agents[seat].harness for seat in ("player0", "player1"))
    assert isinstance(seat0, ProgramHarness)
    assert isinstance(seat1, ProgramHarness)
    (tmp_path / "run").mkdir()
    before = children()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            run = partial(run_eval, config, RunDir(tmp_path / "run"), plan=plan, progress=False)
            nursery.start_soon(partial(run, report=False))
            # both hands: player0 checked (its programs idle), player1 is thinking
            while not (seat1.pool and len(seat1.pool.programs) == 2):  # noqa: ASYNC110
                await trio.sleep(0.02)  # (other processes: no event to wait on)
            idle = list(pool_of(seat0).idle)
            assert idle
            nursery.cancel_scope.cancel()
    for program in idle:  # killed by the pool's shutdown, not by a segment
        gone(program)
    assert seat0.pool is None
    assert marked(marker) == []
    assert set(children()) <= set(before)  # reaped
    assert leftovers(scratch_root) == []


def test_a_failing_seat_program_from_harness_options(tmp_path: Path, scratch_root: Path) -> None:
    config = tmp_path / "eval.toml"
    command = json.dumps([sys.executable, "-c", "import sys; sys.exit(1)"])
    config.write_text(
        'env_id = "kuhn-poker"\n'
        "[env.player0]\n"
        'harness = "program"\n'
        f"harness_options = {{ command = {command} }}\n"
        "[env.player1]\n"
        'harness = "stateful"\n'
    )
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-C", str(config), "-n", "2", "-o", str(out), "--no-progress"]
    assert main(argv) == 1  # the seat's harness crashed: the episodes failed
    for episode in read_episodes(out / "episodes.jsonl"):
        assert (episode["ok"], episode["cause"]) == (False, "harness")
        seat0, seat1 = episode["traces"]
        assert seat0["stop_condition"] == "harness_error"
        assert [e["kind"] for e in seat0["errors"]] == ["harness"]
        assert "status 1" in seat0["errors"][0]["message"]
        # a crashed harness is no forfeit: the hand has no result
        assert (seat0["rewards"]["payoff"], seat1["rewards"]["payoff"]) == (0.0, 0.0)
        assert seat1["errors"] == []
    assert leftovers(scratch_root) == []
