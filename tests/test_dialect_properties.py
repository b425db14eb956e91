"""Properties of the Responses, Anthropic Messages and Gemini translations: any
conversation written in a dialect's wire shape parses back to the same wire-neutral
messages, and streamed text deltas join back to the text exactly."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from taketurns import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from taketurns._http.anthropic import parse_messages_body
from taketurns._http.dialect import words
from taketurns._http.gemini import parse_gemini_body, response_json, stream_chunks
from taketurns._http.responses import parse_responses_body
from taketurns.env import ModelResponse
from taketurns.harness import ToolCall

text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
names = st.sampled_from(["lookup", "weather", "exec_command"])
arguments = st.dictionaries(st.sampled_from(["a", "city", "n"]), st.integers() | text, max_size=2)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """A system message, then user turns, each answered by text or by tool calls
    whose results follow (as an agent's loop produces), the final text sometimes left
    out (a segment that stopped after its tool results)."""
    out: list[Message] = [SystemMessage(draw(text))]
    n = 0
    for _ in range(draw(st.integers(1, 4))):
        out.append(UserMessage(draw(text)))
        rounds = draw(st.integers(0, 2))
        for _ in range(rounds):
            calls = []
            for _ in range(draw(st.integers(1, 2))):
                n += 1
                calls.append(ToolCall(f"call_{n}", draw(names), json.dumps(draw(arguments))))
            out.append(AssistantMessage(draw(st.none() | text), tuple(calls)))
            out += [ToolMessage(c.id, draw(text), c.name) for c in calls]
        if not rounds or draw(st.booleans()):  # else the next user turn follows the results
            out.append(AssistantMessage(draw(text)))
    return out


def as_responses_input(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(instructions, input items), as Codex writes them."""
    system, *rest = messages
    items: list[dict[str, Any]] = []
    for m in rest:
        if isinstance(m, UserMessage):
            items.append({"role": "user", "content": [{"type": "input_text", "text": m.content}]})
        elif isinstance(m, AssistantMessage):
            if m.content is not None:
                part = {"type": "output_text", "text": m.content}
                items.append({"type": "message", "role": "assistant", "content": [part]})
            for c in m.tool_calls:
                call = {"call_id": c.id, "name": c.name, "arguments": c.arguments}
                items.append({"type": "function_call", **call})
        elif isinstance(m, ToolMessage):
            items.append(
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content}
            )
    return str(system.content), items


def as_messages_body(messages: list[Message]) -> dict[str, Any]:
    """A Messages body, as Claude Code writes it: tool results open the next user turn."""
    system, *rest = messages
    out: list[dict[str, Any]] = []
    for m in rest:
        if isinstance(m, UserMessage):
            block = {"type": "text", "text": m.content}
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif isinstance(m, AssistantMessage):
            blocks: list[dict[str, Any]] = [
                {"type": "thinking", "thinking": "...", "signature": ""}
            ]
            if m.content is not None:
                blocks.append({"type": "text", "text": m.content})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": blocks})
        elif isinstance(m, ToolMessage):
            result = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
    return {"model": "m", "max_tokens": 10, "system": system.content, "messages": out}


@given(conversations())
def test_responses_input_parses_back_to_the_conversation(messages: list[Message]) -> None:
    instructions, items = as_responses_input(messages)
    body = {"model": "m", "instructions": instructions, "input": items}
    parsed = parse_responses_body(json.dumps(body), "default")
    assert list(parsed.request.messages) == messages


def reencoded(message: AssistantMessage) -> AssistantMessage:
    """``message`` with its arguments as they come back from Anthropic's input objects."""
    calls = [
        ToolCall(c.id, c.name, json.dumps(json.loads(c.arguments))) for c in message.tool_calls
    ]
    return AssistantMessage(message.content, tuple(calls))


@given(conversations())
def test_messages_body_parses_back_to_the_conversation(messages: list[Message]) -> None:
    parsed = parse_messages_body(json.dumps(as_messages_body(messages)), "default")
    expected = [  # JSON arguments come back re-encoded from Anthropic's input objects
        AssistantMessage(
            m.content,
            tuple(
                ToolCall(c.id, c.name, json.dumps(json.loads(c.arguments))) for c in m.tool_calls
            ),
        )
        if isinstance(m, AssistantMessage)
        else m
        for m in messages
    ]
    assert list(parsed.request.messages) == expected


@given(st.text(st.sampled_from(" a\nb\t")))
def test_streamed_deltas_join_back_to_the_text(value: str) -> None:
    assert "".join(words(value)) == value


def as_gemini_body(messages: list[Message]) -> dict[str, Any]:
    """A ``generateContent`` body, as gemini-cli writes it: a thought part before the
    model's text, function responses (by id) in a user content of their own."""
    system, *rest = messages
    contents: list[dict[str, Any]] = []
    for m in rest:
        if isinstance(m, UserMessage):
            contents.append({"role": "user", "parts": [{"text": m.content}]})
        elif isinstance(m, AssistantMessage):
            parts: list[dict[str, Any]] = [{"text": "...", "thought": True}]
            if m.content is not None:
                parts.append({"text": m.content})
            parts += [
                {"functionCall": {"id": c.id, "name": c.name, "args": json.loads(c.arguments)}}
                for c in m.tool_calls
            ]
            contents.append({"role": "model", "parts": parts})
        elif isinstance(m, ToolMessage):
            part = {"functionResponse": {"id": m.tool_call_id, "name": m.name}}
            part["functionResponse"]["response"] = {"output": m.content}
            last = contents[-1]
            if last["role"] == "user" and "functionResponse" in last["parts"][-1]:
                last["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
    return {"systemInstruction": {"parts": [{"text": system.content}]}, "contents": contents}


@given(conversations())
def test_gemini_body_parses_back_to_the_conversation(messages: list[Message]) -> None:
    parsed = parse_gemini_body(json.dumps(as_gemini_body(messages)), "m")
    expected = [reencoded(m) if isinstance(m, AssistantMessage) else m for m in messages]
    assert list(parsed.request.messages) == expected


@given(conversations())
def test_gemini_answers_parse_back_as_the_model_turn(messages: list[Message]) -> None:
    """Each assistant message, answered as JSON and as stream chunks and sent back in
    the next request's contents, reads as the same message."""
    for message in (m for m in messages if isinstance(m, AssistantMessage)):
        response = ModelResponse(reencoded(message))
        streamed = list(stream_chunks(response, "m", "id"))
        joined = [p for chunk in streamed for p in chunk["candidates"][0]["content"]["parts"]]
        texts = [p["text"] for p in joined if "text" in p]
        calls = [p for p in joined if "functionCall" in p]
        content = response_json(response, "m", "id")["candidates"][0]["content"]
        merged = {"role": "model", "parts": [{"text": "".join(texts)}, *calls]}
        for model_content in (content, merged):
            body = {"contents": [{"role": "user", "parts": [{"text": "q"}]}, model_content]}
            parsed = parse_gemini_body(json.dumps(body), "m").request.messages[-1]
            assert parsed == response.message
