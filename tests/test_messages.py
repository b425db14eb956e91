"""Message records and the OpenAI chat-completions wire format (``taketurns._models.wire``):
exact wire shapes, round trips (text, image parts, tool calls) and refusals."""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taketurns import AssistantMessage, Message, SystemMessage, Task, ToolMessage, UserMessage
from taketurns._models.wire import (
    from_wire,
    messages_from_wire,
    messages_to_wire,
    openai,
    register_messages,
    to_wire,
    tool_calls_to_wire,
)
from taketurns.harness import ImagePart, TextPart, ToolCall, text_of

PICTURE = "data:image/png;base64,iVBORw0KGgo="

# (record, its exact wire form)
CASES: list[tuple[Message, dict[str, Any]]] = [
    (SystemMessage("be brief"), {"role": "system", "content": "be brief"}),
    (UserMessage("hi"), {"role": "user", "content": "hi"}),
    (
        UserMessage(
            [TextPart("what is this?"), ImagePart(PICTURE, "low"), ImagePart("https://x/y.jpg")]
        ),
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": PICTURE, "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.jpg"}},
            ],
        },
    ),
    (AssistantMessage("hello"), {"role": "assistant", "content": "hello"}),
    (AssistantMessage(), {"role": "assistant", "content": None}),
    (
        AssistantMessage(
            None, [ToolCall("call_1", "search", '{"q": "trio"}'), ToolCall("call_2", "clock")]
        ),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "trio"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "clock", "arguments": "{}"},
                },
            ],
        },
    ),
    (
        AssistantMessage("let me look", [ToolCall("c", "search")]),
        {
            "role": "assistant",
            "content": "let me look",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{}"}}
            ],
        },
    ),
    (
        ToolMessage("call_1", "42", "search"),
        {"role": "tool", "tool_call_id": "call_1", "content": "42", "name": "search"},
    ),
    (ToolMessage("call_2", "noon"), {"role": "tool", "tool_call_id": "call_2", "content": "noon"}),
    (
        ToolMessage("call_3", [TextPart("a chart"), ImagePart(PICTURE)]),
        {
            "role": "tool",
            "tool_call_id": "call_3",
            "content": [
                {"type": "text", "text": "a chart"},
                {"type": "image_url", "image_url": {"url": PICTURE}},
            ],
        },
    ),
]


# Records -------------------------------------------------------------------------------


def test_records_are_frozen_hashable_values() -> None:
    message = UserMessage([TextPart("a"), ImagePart(PICTURE)])
    assert message.content == (TextPart("a"), ImagePart(PICTURE))  # a list becomes a tuple
    assert hash(message) == hash(UserMessage((TextPart("a"), ImagePart(PICTURE))))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.content = "b"  # type: ignore[misc]
    call = AssistantMessage(None, [ToolCall("c", "f")])
    assert call.tool_calls == (ToolCall("c", "f", "{}"),)
    assert [m.role for m in (SystemMessage(""), UserMessage(""), call, ToolMessage("c", ""))] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]


def test_text_of() -> None:
    assert text_of(None) == ""
    assert text_of("plain") == "plain"
    assert text_of((TextPart("one"), ImagePart(PICTURE), TextPart("two"))) == "one\ntwo"
    assert text_of((ImagePart(PICTURE),)) == ""


def test_task_prompts() -> None:
    assert Task(0).opening_messages() == ()
    assert Task(0, prompt="hi").opening_messages() == (UserMessage("hi"),)
    messages = [SystemMessage("rules"), UserMessage("a"), UserMessage([TextPart("b")])]
    task = Task(1, prompt=messages)
    assert task.prompt == tuple(messages)
    assert task.opening_messages() == tuple(messages)
    assert task.prompt_text() == "a\nb"
    assert Task(2, prompt="hi").prompt_text() == "hi"
    assert Task(3).prompt_text() == ""


# The wire format ----------------------------------------------------------------------------


@pytest.mark.parametrize(("message", "wire"), CASES)
def test_to_wire_and_back(message: Message, wire: dict[str, Any]) -> None:
    assert to_wire(message) == wire
    assert from_wire(wire) == message
    assert from_wire(json.loads(json.dumps(to_wire(message)))) == message


@pytest.mark.parametrize(("message", "wire"), CASES)
def test_the_private_converter_is_the_same_format(message: Message, wire: dict[str, Any]) -> None:
    assert openai.unstructure(message) == wire
    assert openai.structure(wire, type(message)) == message
    assert openai.structure(wire, Message) == message  # type: ignore[arg-type]


def test_conversations_round_trip() -> None:
    messages = [m for m, _ in CASES]
    wire = messages_to_wire(messages)
    assert wire == [w for _, w in CASES]
    assert messages_from_wire(wire) == messages
    assert openai.unstructure(messages, list[Message]) == wire
    assert openai.structure(wire, list[Message]) == messages


def test_tool_calls_on_their_own() -> None:
    calls = [ToolCall("a", "f", '{"x": 1}'), ToolCall("b", "g")]
    wire = tool_calls_to_wire(calls)
    assert wire[0] == {
        "id": "a",
        "type": "function",
        "function": {"name": "f", "arguments": '{"x": 1}'},
    }
    assert [openai.structure(w, ToolCall) for w in wire] == calls
    assert openai.unstructure(calls[1]) == wire[1]


def test_lenient_inputs_the_wire_allows() -> None:
    assert from_wire({"role": "developer", "content": "rules"}) == SystemMessage("rules")
    assert from_wire(
        {"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}
    ) == UserMessage((ImagePart("https://x/y.png"),))
    assert from_wire({"role": "assistant"}) == AssistantMessage()
    assert from_wire({"role": "assistant", "content": "x", "tool_calls": None}) == (
        AssistantMessage("x")
    )
    assert from_wire(
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}
    ) == AssistantMessage(None, (ToolCall("", "f", "{}"),))
    assert from_wire({"role": "tool", "tool_call_id": "c"}) == ToolMessage("c", "")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("hello", r"^messages must be a list of message objects$"),
        (["hello"], r"^messages\[0\] must be an object$"),
        ([{"role": "bot", "content": "x"}], r"^messages\[0\]\.role must be one of .*'bot'"),
        ([{}], r"^messages\[0\]\.role must be one of"),
        ([{"role": "user"}], r"^messages\[0\]\.content is missing$"),
        ([{"role": "user", "content": 3}], r"content must be a string or a list of parts"),
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": [{"type": "audio"}]}],
            r"^messages\[1\]\.content\[0\] must be a text or image_url part$",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"uri": "x"}}]}],
            r"^messages\[0\]\.content\[0\]\.image_url\.url must be a string$",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            r"must be a text or image_url part",
        ),
        (
            [{"role": "assistant", "tool_calls": {"id": "x"}}],
            r"^messages\[0\]\.tool_calls must be a list$",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "x", "function": {}}]}],
            r"^messages\[0\]\.tool_calls\[0\]\.function\.name is missing$",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}],
            r"^messages\[0\]\.tool_calls\[0\]\.function\.arguments must be a JSON string$",
        ),
        ([{"role": "tool", "content": "x"}], r"^messages\[0\]\.tool_call_id is missing$"),
    ],
)
def test_malformed_wire_messages_are_refused_by_name(raw: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        messages_from_wire(raw)


def test_another_converter_can_learn_the_format() -> None:
    @attrs.define
    class Record:
        messages: list[Message]

    converter = cattrs.Converter()
    register_messages(converter)
    record = Record([m for m, _ in CASES])
    raw = converter.unstructure(record)
    assert raw == {"messages": [w for _, w in CASES]}
    assert converter.structure(json.loads(json.dumps(raw)), Record) == record


# Any message survives the round trip -------------------------------------------------------

texts = st.text(max_size=20)
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(ImagePart, st.sampled_from([PICTURE, "https://x/y.png"]), st.none() | texts),
)
contents = st.one_of(texts, st.lists(parts, max_size=3).map(tuple))
tool_calls = st.builds(ToolCall, texts, texts, st.sampled_from(["{}", '{"a": [1, 2]}', ""]))
messages = st.one_of(
    st.builds(SystemMessage, contents),
    st.builds(UserMessage, contents),
    st.builds(AssistantMessage, st.none() | contents, st.lists(tool_calls, max_size=2)),
    st.builds(ToolMessage, texts, contents, st.none() | texts),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(messages, max_size=5))
def test_any_conversation_round_trips_through_json(conversation: list[Message]) -> None:
    wire = json.loads(json.dumps(messages_to_wire(conversation)))
    assert messages_from_wire(wire) == conversation
