"""The agent-framework harnesses (``openai-agents``, ``pydantic-ai``, ``langgraph``):
the real packages, in process under trio-asyncio, offline against the built-in model.

Each framework plays a Kuhn seat, holds a three-turn conversation on its own state,
runs retail-lite's tools as its own function tools, has its model calls refused after
its segment, is cut off by a timeout with nothing left running, and is refused before
any episode when its factory is wrong. The built-in model is in process and there are
no sockets, but trio-asyncio runs the frameworks: the real clock, generous fail_after.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_asyncio

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    ConfigError,
    Limits,
    Task,
    Timeouts,
    ToolMessage,
)
from taketurns._cli.main import main
from taketurns._output.records import read_episodes
from taketurns.env import run_asyncio
from taketurns.envs.retail import RetailLite
from taketurns.harness import text_of
from taketurns.harnesses.framework import FrameworkHarness

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "openai-agents": ROOT / "examples" / "agents_sdk_seat.py",
    "pydantic-ai": ROOT / "examples" / "pydantic_ai_seat.py",
    "langgraph": ROOT / "examples" / "langgraph_seat.py",
}
FRAMEWORKS = sorted(EXAMPLES)
INSTRUCTIONS = "You are a careful agent."  # what the examples' agents are told


@pytest.fixture(autouse=True)
def _forget_the_examples() -> Iterator[None]:
    """The examples load as modules named after their files: forgotten after each test,
    so a later test in this process (the docs' commands, run on a copy of examples/)
    may load its own copy under the same name."""
    yield
    for path in EXAMPLES.values():
        sys.modules.pop(path.stem, None)


def example(framework: str) -> str:
    return f"{EXAMPLES[framework]}:make"


def agent_for(framework: str, model: str = "builtin/echo", **config: Any) -> Agent:
    options = {"agent": config.pop("agent", example(framework))}
    return Agent(
        "seat",
        AgentConfig(model=model, harness=framework, harness_options=options, **config),
    )


def request_texts(turn: Any) -> list[str]:
    return [text_of(m.content) for m in turn.request]


# --- a factory module the tests write: a model kept, a node that fails, a slow tool ----


FACTORIES = '''
import asyncio
KEPT = []

def keep(model, tools):
    """The example agent of FRAMEWORK, keeping the model it was given."""
    KEPT.append(model)
    return EXAMPLE(model, tools)

def make(model, tools):
    return EXAMPLE(model, tools)

def wrong(model):
    return {"not": "an agent"}

def pydantic_agent(model):
    from pydantic_ai import Agent
    return Agent()

def sdk_agent(model):
    from agents import Agent
    return Agent(name="seat")

def raises(model):
    raise RuntimeError("the factory failed")

def three(model, tools, extra):
    return None

def failing(model, tools):
    """An agent whose own code raises mid-run."""
    FAILING

USED = []  # the threads the plain def tool below ran on

def threaded(model, tools):
    """The example agent of FRAMEWORK with a plain def tool, as its own tool."""
    import threading
    def note() -> str:
        """Note the thread this runs on."""
        USED.append(threading.current_thread())
        return "noted"
    THREADED

def ends_on_tool(model, tools):
    """An agent whose run ends on the tool's result, never sent back to the model."""
    ENDS_ON_TOOL
'''

ENDS_ON_TOOL = {
    "openai-agents": """
    from agents import Agent
    return Agent(name="seat", model=model, tools=tools, tool_use_behavior="stop_on_first_tool")""",
    "pydantic-ai": """
    return EXAMPLE(model, tools)  # pydantic-ai always sends a tool's result back""",
    "langgraph": """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    llm = model.bind_tools(tools)
    async def agent(state):
        return {"messages": [await llm.ainvoke(state["messages"])]}
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=InMemorySaver())""",
}

THREADED = {
    "openai-agents": "from agents import function_tool\n    "
    "return EXAMPLE(model, [function_tool(note)])",
    "pydantic-ai": "return EXAMPLE(model, [note])",
    "langgraph": "from langchain_core.tools import StructuredTool\n    "
    "return EXAMPLE(model, [StructuredTool.from_function(note)])",
}

FAILING = {
    "openai-agents": """
    from agents import Agent, function_tool
    @function_tool(failure_error_function=None)
    async def explode() -> str:
        raise RuntimeError("the framework's own tool failed")
    return Agent(name="seat", model=model, tools=[explode])""",
    "pydantic-ai": """
    from pydantic_ai import Agent
    async def explode() -> str:
        raise RuntimeError("the framework's own tool failed")
    return Agent(model, tools=[explode])""",
    "langgraph": """
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    async def explode(state: MessagesState) -> dict:
        await model.ainvoke(state["messages"])
        raise RuntimeError("the framework's own tool failed")
    builder = StateGraph(MessagesState)
    builder.add_node("explode", explode)
    builder.add_edge(START, "explode")
    return builder.compile(checkpointer=InMemorySaver())""",
}


@pytest.fixture(params=FRAMEWORKS)
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def factories(tmp_path: Path, framework: str) -> Iterator[tuple[str, Any]]:
    """``(path, module)`` of a factory file for ``framework`` (its own module name)."""
    import importlib
    import sys

    name = f"factories_{framework.replace('-', '_')}"
    source = FACTORIES.replace("    FAILING", FAILING[framework].strip("\n"))
    source = source.replace("THREADED", THREADED[framework])
    source = source.replace("    ENDS_ON_TOOL", ENDS_ON_TOOL[framework].strip("\n"))
    example_module = EXAMPLES[framework].stem
    source = f"from {example_module} import make as EXAMPLE\n{source}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    sys.path.insert(0, str(EXAMPLES[framework].parent))
    try:
        yield str(path), lambda: importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES[framework].parent))
        sys.modules.pop(name, None)


# --- a Kuhn seat against another harness, through the CLI ------------------------------


def test_a_kuhn_seat_against_the_null_harness(tmp_path: Path, framework: str) -> None:
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "12", "-o", str(out), "--no-progress"]
    argv += [f"--env.player0.harness={framework}"]
    argv += [f"--env.player0.harness_options.agent={example(framework)}"]
    assert main(argv) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 12
    two_decisions = 0
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        seat = next(t for t in episode["traces"] if t["agent"]["name"] == "player0")
        assert seat["agent"]["harness"] == framework
        assert seat["errors"] == []
        answers = [m for m in seat["messages"] if m["role"] == "assistant"]
        assert len(seat["turns"]) == len(answers) >= 1  # every model call recorded
        for turn in seat["turns"]:
            assert turn["seed"] is not None  # the run's seeds reach the framework's calls
        if len(seat["turns"]) == 2:  # the second decision continues the framework's state
            two_decisions += 1
            first, second = seat["turns"]
            n = len(first["request"])
            assert second["request"][:n] == first["request"]
            assert [m["role"] for m in second["request"][n:]] == ["assistant", "user"]
            # the framework's own instructions: on the wire, not in the engine's record
            assert INSTRUCTIONS in first["request"][0]["content"]
            assert not any(INSTRUCTIONS in str(m["content"]) for m in seat["messages"])
    assert two_decisions > 0


# --- three turns on the framework's own state ------------------------------------------


async def test_three_turns_continue_the_frameworks_own_state(framework: str) -> None:
    """Turns 2 and 3 carry the framework's state, not a relaunch on the engine's record:
    a message slipped into the trace's conversation between turns reaches the wire
    under the relaunching ``tools`` harness, and never under the framework."""
    sent: dict[str, list[list[str]]] = {}
    for harness in ("tools", framework):
        if harness == "tools":
            agent = Agent("seat", AgentConfig(model="builtin/echo", harness="tools"))
        else:
            agent = agent_for(framework)
        with trio.fail_after(60):
            async with agent.chat(Task(0, "chat", None)) as session:
                replies = [(await session.turn("alpha")).text]
                session.trace.messages.append(AssistantMessage("FOREIGN"))
                replies.append((await session.turn("bravo")).text)
                replies.append((await session.turn("charlie")).text)
        trace = session.trace
        assert replies == ["alpha", "bravo", "charlie"]
        assert len(trace.turns) == 3
        sent[harness] = [request_texts(turn) for turn in trace.turns]
    assert "FOREIGN" in sent["tools"][1]
    native = sent[framework]
    assert "FOREIGN" not in native[1] + native[2]
    # each turn's request is the one before plus its answer and the new message
    assert native[1] == [*native[0], "alpha", "bravo"]
    assert native[2] == [*native[1], "bravo", "charlie"]
    assert INSTRUCTIONS in native[0][0]


def test_user_sim_three_turns_on_retail_tools(tmp_path: Path, framework: str) -> None:
    out = tmp_path / "run"
    argv = ["eval", "user-sim", "--env.taskset=retail-lite", "-n", "2", "-o", str(out)]
    argv += ["--no-progress", "--env.user.limits.max_turns=3"]
    argv += ["--env.assistant.model=builtin/tools", f"--env.assistant.harness={framework}"]
    argv += [f"--env.assistant.harness_options.agent={example(framework)}"]
    assert main(argv) == 0
    for episode in read_episodes(out / "episodes.jsonl"):
        assert episode["ok"], episode["errors"]
        assistant = next(t for t in episode["traces"] if t["agent"]["name"] == "assistant")
        assert assistant["errors"] == []
        users = [m for m in assistant["messages"] if m["role"] == "user"]
        assert len(users) == 3
        answers = [m for m in assistant["messages"] if m["role"] == "assistant"]
        assert len(assistant["turns"]) == len(answers)
        assert any(m["role"] == "tool" for m in assistant["messages"])
        for before, turn in zip(assistant["turns"], assistant["turns"][1:], strict=False):
            # every call extends the framework's history
            assert turn["request"][: len(before["request"])] == before["request"]


# --- retail-lite's tools as the framework's function tools ------------------------------


def _conversation(trace: Any) -> list[tuple[Any, ...]]:
    """A trace's messages past the system prompt: role, content, tool calls (name and
    arguments: a call's id is the model's, derived from what it was sent) and name."""
    return [
        (
            m.role,
            m.content,
            [(c.name, c.arguments) for c in getattr(m, "tool_calls", None) or ()],
            getattr(m, "name", None),
        )
        for m in trace.messages
        if m.role != "system"
    ]


@pytest.mark.parametrize("model", ["clerk", "builtin/tools"])
async def test_retail_tools_score_as_the_tools_harness_does(framework: str, model: str) -> None:
    """retail-lite's tools as the framework's function tools, called mid-segment: the
    same calls, turns, rewards and metrics as the ``tools`` harness, with a scripted
    clerk that earns 1.0 and with the built-in ``tools`` policy."""
    from test_retail import Clerk

    taskset = RetailLite()
    rubric = taskset.rubric()
    options = {"agent": example(framework)}
    configs = [
        AgentConfig(model=model, harness="tools"),
        AgentConfig(model=model, harness=framework, harness_options=options),
    ]
    earned = 0.0
    for task in taskset.tasks(6):
        traces = []
        for config in configs:
            client = Clerk() if model == "clerk" else None
            agent = Agent("a", config, rubric=rubric, client=client)
            resources = taskset.resources(task)
            with trio.fail_after(60):
                trace = await agent.run(task, tools=resources.tools, state=resources.state)
            assert trace.errors == [], task.name
            assert trace.stop_condition == "agent_completed"
            traces.append(trace)
        expected, got = traces
        assert got.rewards == expected.rewards, task.name
        assert got.metrics == expected.metrics, task.name
        # the conversation on the trace: the same answers, tool calls and tool results
        assert _conversation(got) == _conversation(expected), task.name
        assert any(isinstance(m, ToolMessage) for m in got.messages)  # a tool ran mid-segment
        assert len(got.turns) == len(expected.turns)
        earned += got.reward
    if model == "clerk":
        assert earned == 6.0


@pytest.mark.parametrize("framework", ["openai-agents", "langgraph"])
async def test_a_run_that_ends_on_a_tool_records_its_result(framework: str, factories: Any) -> None:
    """A framework's run may end on a tool (the SDK's ``stop_on_first_tool``, a graph
    whose last node is its tool node): no model request carries the result back, and
    it is on the trace as the tool returned it, as the ``tools`` harness records it."""

    async def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: shipped"

    path, _ = factories
    traces = []
    for seat in (
        Agent("seat", AgentConfig(model="builtin/tools", harness="tools")),
        agent_for(framework, "builtin/tools", agent=f"{path}:ends_on_tool"),
    ):
        with trio.fail_after(60):
            traces.append(await seat.run(Task(0, "t", "where is #W1?"), tools=[lookup]))
    expected, got = traces
    assert got.errors == []
    assert len(got.turns) == 1
    call, result = got.messages[-2:]
    assert isinstance(call, AssistantMessage)
    (tool_call,) = call.tool_calls
    (recorded,) = [m for m in expected.messages if isinstance(m, ToolMessage)]
    assert "shipped" in text_of(recorded.content)
    assert result == ToolMessage(tool_call.id, recorded.content, "lookup")


# --- the gate, limits, failures, cancellation -----------------------------------------


async def _call_kept_model(framework: str, model: Any) -> Exception:
    """A model call made with a framework's model object outside any segment."""

    async def call() -> None:
        if framework == "openai-agents":
            client = model._client
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "late"}]
            )
        elif framework == "pydantic-ai":
            from pydantic_ai.direct import model_request
            from pydantic_ai.messages import ModelRequest

            await model_request(model, [ModelRequest.user_text_prompt("late")])
        else:
            await model.ainvoke("late")

    with pytest.raises(Exception) as caught:  # noqa: PT011 - each SDK's own error type
        await run_asyncio(call)
    error = caught.value
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]  # a loop of its own wraps it in its nursery's group
    assert isinstance(error, Exception)
    return error


async def test_the_gate_refuses_a_call_after_the_segment(framework: str, factories: Any) -> None:
    path, module = factories
    agent = agent_for(framework, agent=f"{path}:keep")
    with trio.fail_after(60):
        async with agent.chat(Task(0, "chat", None)) as session:
            await session.turn("alpha")
            (model,) = module().KEPT[1:]  # [0] is the harness's probe when it was built
            error = await _call_kept_model(framework, model)
            assert "409" in str(error) or getattr(error, "status_code", None) == 409, error
            assert "rollout_idle" in str(error) or "no segment" in str(error)
            assert len(session.trace.turns) == 1  # nothing recorded
            await session.turn("bravo")  # the next segment opens it again
            assert len(session.trace.turns) == 2
        error = await _call_kept_model(framework, model)
        assert "closed" in str(error)
    assert len(session.trace.turns) == 2


async def test_a_refused_call_ends_the_run_with_the_limit(framework: str) -> None:
    taskset = RetailLite()
    (task,) = taskset.tasks(1)
    resources = taskset.resources(task)
    seat = agent_for(framework, "builtin/tools", limits=Limits(max_turns=1))
    with trio.fail_after(60):
        trace = await seat.run(task, tools=resources.tools, state=resources.state)
    assert trace.stop_condition == "max_turns"
    assert trace.errors == []
    assert len(trace.turns) == 1
    assert [m.role for m in trace.messages[-2:]] == ["assistant", "tool"]


async def test_the_frameworks_exception_is_the_harness_failing(
    framework: str, factories: Any
) -> None:
    path, _ = factories
    seat = agent_for(framework, "builtin/tools", agent=f"{path}:failing")
    with trio.fail_after(60):
        trace = await seat.run(Task(0, "t", "go"))
    assert trace.stop_condition == "harness_error"
    (error,) = trace.errors
    assert error.kind == "harness"
    assert "the framework's own tool failed" in (error.traceback or "")


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


async def test_a_cancelled_segment_leaves_no_task_or_thread(framework: str) -> None:
    entered = trio.Event()

    async def wait_forever(order_id: str) -> str:
        """Look an order up (never answers)."""
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    before = _threads()
    async with trio_asyncio.open_loop() as loop:
        seat = agent_for(framework, "builtin/tools", timeouts=Timeouts(segment_s=2.0))
        with trio.fail_after(60):
            trace = await seat.run(Task(0, "t", "where is #W1"), tools=[wait_forever])
        assert entered.is_set()
        assert trace.stop_condition == "segment_timeout", trace.errors
        assert trace.errors == []
        await trio.testing.wait_all_tasks_blocked()
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        assert left == []
    assert _threads() - before == set()


THREADED_GRAPH = """
import threading
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

USED = []  # the threads the graph's plain def node ran on

def make(model):
    async def agent(state):
        return {"messages": [await model.ainvoke(state["messages"])]}

    def note(state):
        USED.append(threading.current_thread())
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("note", note)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "note")
    builder.add_edge("note", END)
    return builder.compile(checkpointer=InMemorySaver())
"""


async def test_langgraph_leaves_no_thread_after_the_rollout(tmp_path: Path) -> None:
    """langchain runs a plain ``def`` node, and langchain-openai every response's
    conversion, in the loop's default executor: on the seat's own threads, joined when
    the rollout closes (trio's cached threads would linger ~10 s after their job)."""
    path = tmp_path / "threaded_graph.py"
    path.write_text(THREADED_GRAPH)
    before = _threads()
    seat = agent_for("langgraph", agent=f"{path}:make")
    try:
        async with trio_asyncio.open_loop():  # outlives the rollout, as an eval's loop does
            with trio.fail_after(60):
                async with seat.chat(Task(0, "t", None)) as session:
                    assert (await session.turn("alpha")).text == "alpha"
                    assert (await session.turn("bravo")).text == "bravo"
            used = sys.modules["threaded_graph"].USED
            assert len(used) == 2
            assert threading.main_thread() not in used  # each node ran in a worker thread
            assert [t for t in used if t.is_alive()] == []  # joined at close, no sleep
            assert _threads() - before == set()
    finally:
        sys.modules.pop("threaded_graph", None)


async def test_a_plain_def_tool_leaves_no_thread(framework: str, factories: Any) -> None:
    """Each framework runs a plain ``def`` tool in a worker thread (the SDK through
    ``asyncio.to_thread`` and langchain through ``run_in_executor``: the seat's own,
    joined when the rollout closes; pydantic-ai through anyio, whose threads stop when
    the segment's asyncio task ends): none is left once the rollout is closed."""
    path, module = factories
    before = _threads()
    async with trio_asyncio.open_loop():  # outlives the rollout, as an eval's loop does
        seat = agent_for(framework, "builtin/tools", agent=f"{path}:threaded")
        with trio.fail_after(60):
            trace = await seat.run(Task(0, "t", "go"))
        assert trace.errors == []
        assert trace.messages[-1].content == "The tool said: noted"
        used = module().USED
        assert len(used) == 1
        assert threading.main_thread() not in used
        if framework == "pydantic-ai":
            # anyio's worker was told to stop when the segment's task ended; it exits
            # on its own schedule, well before its 10 s idle time-out would end it
            for thread in used:
                thread.join(timeout=5)
        assert [t for t in used if t.is_alive()] == []  # joined at close, no sleep needed
        assert _threads() - before == set()


# --- refused before any episode --------------------------------------------------------


def test_refusals_before_any_episode(framework: str, factories: Any, capsys: Any) -> None:
    path, _ = factories

    def refused(agent: str | None, *needles: str) -> None:
        argv = ["eval", "kuhn-poker", "-n", "1", "--no-progress"]
        argv += [f"--env.player0.harness={framework}"]
        if agent is not None:
            argv += [f"--env.player0.harness_options.agent={agent}"]
        assert main(argv) == 2
        text = " ".join(capsys.readouterr().err.split())
        assert text.startswith("error:"), text
        assert "Traceback" not in text
        for needle in needles:
            assert needle in text, text

    refused(None, "needs the option agent", "harness_options.agent=./my_agent.py:make")
    refused(f"{path}:mkae", "has no 'mkae'", "did you mean 'make'?")
    refused("no/such/file.py:make", "no such file")
    refused("no_such_module_xyz:make", "no module 'no_such_module_xyz'")
    refused(f"{path}:wrong", "returned dict", "must return")
    refused(f"{path}:three", "takes (model, tools, extra)", "(model) or (model, tools)")
    refused(f"{path}:raises", "the factory raised RuntimeError: the factory failed")
    other, other_id = ("sdk_agent", "openai-agents")
    if framework != "pydantic-ai":
        other, other_id = ("pydantic_agent", "pydantic-ai")
    refused(f"{path}:{other}", "returned Agent", f"did you mean --env.<role>.harness={other_id}?")


def test_a_missing_framework_names_the_extra() -> None:
    class Missing(FrameworkHarness):
        id = "missing"
        package = "no_such_framework_package"
        distribution = "no-such-framework"
        extra = "no-such-extra"
        returns = "an agent"
        make_model = refusal = framework_tools = run = None  # type: ignore[assignment]

    with pytest.raises(Exception, match=r"pip install 'taketurns\[no-such-extra\]'") as caught:
        Missing("x.py:make")
    assert "\n" not in str(caught.value)


def test_the_langgraph_factory_must_compile_with_a_checkpointer(tmp_path: Path) -> None:
    path = tmp_path / "graphs.py"
    path.write_text(
        "from langgraph.graph import START, END, MessagesState, StateGraph\n"
        "async def node(state):\n    return {}\n"
        "def builder(model):\n"
        "    b = StateGraph(MessagesState)\n    b.add_node('n', node)\n"
        "    b.add_edge(START, 'n')\n    b.add_edge('n', END)\n    return b\n"
        "def no_memory(model):\n    return builder(model).compile()\n"
    )
    for name, needle in [("builder", "compile it"), ("no_memory", "no checkpointer")]:
        with pytest.raises(ConfigError, match=needle):
            agent_for("langgraph", agent=f"{path}:{name}")
