"""``_exchange.tools``: JSON schemas from signatures and docstrings, and calls from the model's
JSON arguments (every mistake goes back to the model as a tool message), checked
directly and through the in-process ``tools`` harness (no I/O: virtual clock)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

import pytest
import trio
from scripted import ScriptedModel, make_agent, tool_call

from taketurns import AssistantMessage, Limits, Task, Tool, ToolMessage, UserMessage
from taketurns.harness import ToolCall, as_tools, tool_schema
from taketurns.harnesses.tools import ToolsHarness


def params(fn: Any) -> dict[str, Any]:
    return tool_schema(fn)["function"]["parameters"]


# -- schemas -----------------------------------------------------------------------------


def test_schema_shape_and_docstring() -> None:
    def find_order(order_id: str, verbose: bool = False) -> dict[str, Any]:
        """Find an order by its id,
        across every store.

        Returns the order as a dictionary.

        Args:
            order_id: The order's id, such as A17.
            verbose (bool): Include the order's history.

        Returns:
            The order.
        """
        return {}

    assert tool_schema(find_order) == {
        "type": "function",
        "function": {
            "name": "find_order",
            "description": "Find an order by its id, across every store.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order's id, such as A17."},
                    "verbose": {
                        "type": "boolean",
                        "description": "Include the order's history.",
                    },
                },
                "required": ["order_id"],
            },
        },
    }
    assert tool_schema(find_order, name="find")["function"]["name"] == "find"


def test_scalar_and_container_types() -> None:
    def f(
        s: str,
        i: int,
        x: float,
        b: bool,
        d: dict,
        ds: dict[str, int],
        m: Mapping[str, str],
        bare: list,
        names: list[str],
        pairs: tuple[int, ...],
        seq: Sequence[float],
        anything: Any,
        unannotated,
    ) -> None:
        """F."""

    props = params(f)["properties"]
    assert props == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "x": {"type": "number"},
        "b": {"type": "boolean"},
        "d": {"type": "object"},
        "ds": {"type": "object"},
        "m": {"type": "object"},
        "bare": {"type": "array"},
        "names": {"type": "array", "items": {"type": "string"}},
        "pairs": {"type": "array", "items": {"type": "integer"}},
        "seq": {"type": "array", "items": {"type": "number"}},
        "anything": {},
        "unannotated": {},
    }
    assert params(f)["required"] == list(props)


def test_optional_literal_and_union() -> None:
    def f(
        mode: Literal["fast", "slow"],
        level: Literal[1, 2, 3],
        limit: Optional[int] = None,  # noqa: UP045 - the typing spelling on purpose
        page: int | None = None,
        kind: Literal["a", "b"] | None = None,
        key: Union[int, str] = 0,  # noqa: UP007 - the typing spelling on purpose
        either: int | str | None = None,
        tags: list[Literal["x", "y"]] | None = None,
    ) -> None:
        """F."""

    schema = params(f)
    assert schema["properties"] == {
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "level": {"type": "integer", "enum": [1, 2, 3]},
        "limit": {"type": "integer"},
        "page": {"type": "integer"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "key": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
    }
    assert schema["required"] == ["mode", "level"]


def test_an_optional_without_default_is_not_required() -> None:
    def f(note: str | None) -> None:
        """F."""

    assert params(f)["required"] == []


def test_var_args_are_not_parameters() -> None:
    def f(a: int, *rest: int, **more: str) -> None:
        """F."""

    assert params(f) == {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
    }


def test_async_tools_and_methods() -> None:
    class Store:
        async def cancel(self, order_id: str, reason: str = "changed mind") -> str:
            """Cancel an order.

            Parameters:
                order_id: Which order.
            """
            return "cancelled"

    schema = tool_schema(Store().cancel)
    assert schema["function"]["name"] == "cancel"
    assert schema["function"]["description"] == "Cancel an order."
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": "Which order."},
            "reason": {"type": "string"},
        },
        "required": ["order_id"],
    }


def test_docstring_sections_without_blank_lines_and_multiline_descriptions() -> None:
    def f(query: str, limit: int = 5) -> None:
        """Search the catalogue.
        Args:
            query: What to look for; words are
                matched case-insensitively.
            limit: At most this many results.
        """

    schema = tool_schema(f)["function"]
    assert schema["description"] == "Search the catalogue."
    assert schema["parameters"]["properties"]["query"]["description"] == (
        "What to look for; words are matched case-insensitively."
    )
    assert schema["parameters"]["properties"]["limit"]["description"] == (
        "At most this many results."
    )


def test_no_docstring() -> None:
    def f(a: int) -> int:
        return a

    assert tool_schema(f)["function"]["description"] == ""


# -- calls -------------------------------------------------------------------------------


def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


async def shout(text: str) -> str:
    """Shout."""
    await trio.sleep(1)
    return text.upper()


def flexible(a: int, **extra: Any) -> dict[str, Any]:
    """Take anything."""
    return {"a": a, **extra}


def broken(a: int) -> None:
    """Always fails."""
    raise ValueError(f"cannot handle {a}")


async def run(fn: Any, arguments: str, call_id: str = "c1") -> ToolMessage:
    return await Tool(fn).call(ToolCall(call_id, Tool(fn).name, arguments))


async def test_sync_and_async_tools(autojump_clock: trio.testing.MockClock) -> None:
    assert await run(add, '{"a": 2, "b": 3}') == ToolMessage("c1", "5", "add")
    assert (await run(add, '{"a": 2}')).content == "3"
    start = trio.current_time()
    assert (await run(shout, '{"text": "hey"}')).content == "HEY"
    assert trio.current_time() - start == 1
    assert (await run(flexible, '{"a": 1, "z": [1, 2]}')).content == json.dumps(
        {"a": 1, "z": [1, 2]}
    )


async def test_results_are_text() -> None:
    def nothing() -> None:
        """Nothing."""

    def odd() -> object:
        """An object JSON does not know."""
        return {"when": {1, 2}}

    assert (await run(nothing, "")).content == "null"
    assert (await run(nothing, "{}")).content == "null"
    assert (await run(odd, "{}")).content == json.dumps({"when": "{1, 2}"})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"a": 1', "Error: ToolArgumentError: the arguments are not valid JSON"),
        ("[1, 2]", "Error: ToolArgumentError: the arguments must be a JSON object"),
        ('"a"', "Error: ToolArgumentError: the arguments must be a JSON object"),
        ('{"b": 2}', "Error: ToolArgumentError: missing required arguments: a"),
        ('{"a": 1, "c": 2, "d": 3}', "Error: ToolArgumentError: unknown arguments: c, d"),
    ],
)
async def test_bad_arguments_come_back_as_tool_messages(arguments: str, message: str) -> None:
    answer = await run(add, arguments, "call-9")
    assert answer.tool_call_id == "call-9"
    assert answer.name == "add"
    assert answer.content.startswith(message), answer.content


async def test_a_failing_tool_comes_back_as_a_tool_message() -> None:
    answer = await run(broken, '{"a": 4}')
    assert answer.content == "Error: ValueError: cannot handle 4"
    wrong_type = await run(add, '{"a": "x"}')
    assert wrong_type.content.startswith("Error: TypeError:")


async def test_cancellation_propagates(autojump_clock: trio.testing.MockClock) -> None:
    with trio.move_on_after(0.5) as scope:
        await run(shout, '{"text": "hey"}')
    assert scope.cancelled_caught


def test_as_tools() -> None:
    tools = as_tools([add, Tool(shout, name="yell")])
    assert list(tools) == ["add", "yell"]
    assert tools["yell"].schema["function"]["name"] == "yell"
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        as_tools([add, Tool(broken, name="add")])


# -- through the tools harness ----------------------------------------------------------


async def test_the_model_sees_every_mistake_and_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        tool_call("c1", "add", "{not json"),
        tool_call("c2", "add", '{"b": 1}'),
        tool_call("c3", "add", '{"a": 1, "zz": 2}'),
        tool_call("c4", "multiply", '{"a": 1}'),
        tool_call("c5", "broken", '{"a": 7}'),
        AssistantMessage(
            None,
            (ToolCall("c6", "add", '{"a": 40, "b": 2}'), ToolCall("c7", "shout", '{"text": "ok"}')),
        ),
        "the answer is 42",
    )
    agent = make_agent(model, ToolsHarness(), tools=[add, shout, broken])
    trace = await agent.run(Task(0, prompt="compute"))
    assert trace.errors == []
    assert trace.stop_condition == "agent_completed"
    assert trace.last_text == "the answer is 42"
    results = [m for m in trace.messages if isinstance(m, ToolMessage)]
    assert [(r.tool_call_id, r.content.split(":")[0]) for r in results] == [
        ("c1", "Error"),
        ("c2", "Error"),
        ("c3", "Error"),
        ("c4", "Error"),
        ("c5", "Error"),
        ("c6", "42"),
        ("c7", "OK"),
    ]
    assert "not valid JSON" in results[0].content
    assert "missing required arguments: a" in results[1].content
    assert "unknown arguments: zz" in results[2].content
    assert results[3].content == "Error: no tool named 'multiply'; tools: add, shout, broken"
    assert results[3].name == "multiply"
    assert results[4].content == "Error: ValueError: cannot handle 7"
    # each result reached the model in the next request
    assert len(model.requests) == 7
    for i, request in enumerate(model.requests[1:6]):
        assert request.messages[-1] == results[i]
    assert model.requests[6].messages[-2:] == tuple(results[5:])
    # the schemas were offered on every call
    schemas = [Tool(f).schema for f in (add, shout, broken)]
    assert all(list(r.tools) == schemas for r in model.requests)
    assert trace.messages[0] == UserMessage("compute")


async def test_a_tool_loop_stopped_by_max_turns(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel(*[tool_call(f"c{i}", "add", '{"a": 1}') for i in range(5)])
    agent = make_agent(model, ToolsHarness(), tools=[add], limits=Limits(max_turns=2))
    async with agent.chat(Task(0, prompt="loop")) as session:
        reply = await session.turn()
    assert reply.stopped
    assert reply.stop_condition == "max_turns"
    assert len(session.trace.turns) == 2
    assert [m.role for m in reply.messages] == ["assistant", "tool", "assistant", "tool"]
    assert session.trace.errors == []
