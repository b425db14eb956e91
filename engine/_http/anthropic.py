"""The Anthropic Messages dialect (``POST /v1/messages``, what Claude Code speaks).

In: the key as ``x-api-key`` or a bearer token; ``system`` as a string or text blocks
(the first system message); ``messages`` with content as a string or blocks: ``text``,
``image`` (base64 -> a data URL, or by URL), ``tool_use`` (a tool call; ``input``
becomes the arguments' JSON), ``tool_result`` (a tool message, placed before the rest
of its user message; ``is_error`` results are prefixed ``Error: ``; blocks other than
text and image inside a result, such as Claude Code's tool references, are kept as
their JSON text); ``role: "system"``
entries become system messages. ``thinking`` and ``redacted_thinking`` blocks are
dropped (a chat model's conversation has no reasoning), as are server-side tool
blocks. Custom tools (``input_schema``) pass on as chat tool schemas; Anthropic's
built-in tools (``bash_2025...``, ``web_search_...``) are dropped. ``tool_choice``
(``auto``/``any``/``tool``/``none``), ``max_tokens``, ``temperature``, ``top_p`` and
``stop_sequences`` become sampling; ``thinking``, ``metadata``, ``top_k`` and beta
fields are ignored.

Out: a ``message`` (text block, then ``tool_use`` blocks; ``stop_reason``
``end_turn``/``tool_use``/``max_tokens``) as JSON, or SSE ``message_start``,
``content_block_start``/``_delta``/``_stop`` (``text_delta``, ``input_json_delta``),
``message_delta`` (stop reason, usage) and ``message_stop``. Errors use Anthropic's
``{"type": "error", "error": {...}}`` body. A refused (stopped) turn answers 403:
Claude Code and the Anthropic SDK neither retry it nor fall back (a 400 or 422 makes
Claude Code re-send the request with fewer beta features).

``POST /v1/messages/count_tokens`` answers a word-count estimate
(``estimate_tokens``); it is never a model call and never recorded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from quart import Response

from taketurns._errors import BadRequest
from taketurns._http.dialect import (
    Dialect,
    Failure,
    Parsed,
    bearer,
    estimate_tokens,
    load_object,
    sse_event,
    sse_response,
    words,
)
from taketurns._models.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    text_of,
)
from taketurns._models.model import ModelRequest, ModelResponse

__all__ = ["AnthropicMessages"]

Json = dict[str, Any]
_EMPTY: Mapping[str, str] = MappingProxyType({})
Part = TextPart | ImagePart
_DROPPED_BLOCKS = frozenset(
    {"thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"}
)
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _image(block: Json, where: str) -> ImagePart:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return ImagePart(f"data:{source.get('media_type', 'image/png')};base64,{source['data']}")
    if isinstance(source, dict) and source.get("type") == "url":
        return ImagePart(str(source.get("url")))
    raise BadRequest(f"{where}.source must be a base64 or url image source")


def _parts(raw: Any, where: str, *, other_as_text: bool = False) -> list[Part]:
    """Text and image blocks; thinking dropped; anything else refused, or (inside a
    tool result, where agents put blocks of their own) kept as its JSON text."""
    if isinstance(raw, str):
        return [TextPart(raw)]
    if not isinstance(raw, list):
        raise BadRequest(f"{where} must be a string or a list of content blocks")
    parts: list[Part] = []
    for i, block in enumerate(raw):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(TextPart(block["text"]))
        elif kind == "image":
            parts.append(_image(block, f"{where}[{i}]"))
        elif other_as_text and isinstance(block, dict):
            parts.append(TextPart(json.dumps(block)))
        elif kind not in _DROPPED_BLOCKS:
            raise BadRequest(f"{where}[{i}] must be a text or image block (got {kind!r})")
    return parts


def _content(parts: list[Part]) -> str | tuple[Part, ...]:
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return tuple(parts)


def _tool_result(block: Json, names: Mapping[str, str], where: str) -> ToolMessage:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise BadRequest(f"{where}.tool_use_id must be a string")
    content = _content(_parts(block.get("content", ""), f"{where}.content", other_as_text=True))
    if block.get("is_error"):
        content = f"Error: {text_of(content)}"
    return ToolMessage(call_id, content, names.get(call_id))


def _user(raw: Any, names: Mapping[str, str], where: str) -> list[Message]:
    """A user turn: its tool results first (they answer the calls before them), then
    the rest of its content as one user message."""
    if isinstance(raw, str):
        return [UserMessage(raw)]
    if not isinstance(raw, list):
        raise BadRequest(f"{where}.content must be a string or a list of content blocks")
    results: list[Message] = []
    rest = []
    for i, block in enumerate(raw):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            results.append(_tool_result(block, names, f"{where}.content[{i}]"))
        else:
            rest.append(block)
    parts = _parts(rest, f"{where}.content") if rest else []
    return results + ([UserMessage(_content(parts))] if parts else [])


def _assistant(raw: Any, names: dict[str, str], where: str) -> AssistantMessage:
    if isinstance(raw, str):
        return AssistantMessage(raw or None)
    if not isinstance(raw, list):
        raise BadRequest(f"{where}.content must be a string or a list of content blocks")
    texts: list[Any] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(raw):
        if isinstance(block, dict) and block.get("type") == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise BadRequest(f"{where}.content[{i}] needs a string id and name")
            calls.append(ToolCall(call_id, name, json.dumps(block.get("input", {}))))
            names[call_id] = name
        else:
            texts.append(block)
    text = text_of(_content(_parts(texts, f"{where}.content")))
    return AssistantMessage(text or None, tuple(calls))


def messages_from_body(body: Json) -> list[Message]:
    """The conversation in a Messages body: ``system``, then ``messages``."""
    out: list[Message] = []
    system = body.get("system")
    if system is not None:
        text = text_of(_content(_parts(system, "system")))
        if text:
            out.append(SystemMessage(text))
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("'messages' is required: a non-empty list of message objects")
    names: dict[str, str] = {}
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object")
        role, content = message.get("role"), message.get("content", "")
        if role == "user":
            out += _user(content, names, where)
        elif role == "assistant":
            out.append(_assistant(content, names, where))
        elif role == "system":  # Claude Code sends these for models it does not know
            out.append(SystemMessage(_content(_parts(content, f"{where}.content"))))
        else:
            raise BadRequest(f"{where}.role must be user or assistant (got {role!r})")
    return out


def _tools(raw: Any) -> list[Json]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise BadRequest("'tools' must be a list of tool objects")
    out = []
    for i, tool in enumerate(raw):
        if tool.get("type") not in (None, "custom"):
            continue  # Anthropic's built-in tools: a chat model cannot call them
        if not isinstance(tool.get("name"), str):
            raise BadRequest(f"'tools[{i}]' needs a string 'name'")
        fn = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _sampling(body: Json, has_tools: bool) -> dict[str, Any]:
    sampling: dict[str, Any] = {k: body[k] for k in ("temperature", "top_p") if k in body}
    budget = body.get("max_tokens")
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise BadRequest(f"'max_tokens' must be an integer (got {budget!r})")
        sampling["max_tokens"] = budget
    if isinstance(body.get("stop_sequences"), list) and body["stop_sequences"]:
        sampling["stop"] = body["stop_sequences"]
    choice = body.get("tool_choice")
    if has_tools and isinstance(choice, dict):
        kind = choice.get("type")
        modes = {"auto": "auto", "any": "required", "none": "none"}
        mapped = modes.get(kind) if isinstance(kind, str) else None
        if kind == "tool" and isinstance(choice.get("name"), str):
            sampling["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        elif mapped is not None:
            sampling["tool_choice"] = mapped
        if choice.get("disable_parallel_tool_use") is True:
            sampling["parallel_tool_calls"] = False
    return sampling


def parse_messages_body(raw: str | bytes, default_model: str) -> Parsed:
    body = load_object(raw)
    messages = messages_from_body(body)
    model = body.get("model", default_model)
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string")
    tools = _tools(body.get("tools"))
    request = ModelRequest(model, tuple(messages), tuple(tools), _sampling(body, bool(tools)))
    return Parsed(request, bool(body.get("stream")))


# -- answers ----------------------------------------------------------------------------


def _blocks(message: AssistantMessage) -> list[Json]:
    blocks: list[Json] = []
    text = text_of(message.content)
    if text or not message.tool_calls:
        blocks.append({"type": "text", "text": text})
    for call in message.tool_calls:
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):  # the model wrote no JSON object: say so
            arguments = {"arguments": call.arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{uuid.uuid4().hex[:24]}",
                "name": call.name,
                "input": arguments,
            }
        )
    return blocks


def _message_json(response: ModelResponse, model: str, id_: str) -> Json:
    message = response.message
    reason = "tool_use" if message.tool_calls else _STOP_REASONS.get(response.finish_reason or "")
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(message),
        "stop_reason": reason or "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": response.usage.prompt_tokens,
            "output_tokens": response.usage.completion_tokens,
        },
    }


def _block_events(index: int, block: Json) -> Iterator[tuple[str, Json]]:
    if block["type"] == "text":
        yield "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}
        for delta in words(block["text"]):
            yield (
                "content_block_delta",
                {
                    "index": index,
                    "delta": {"type": "text_delta", "text": delta},
                },
            )
    else:
        start = {**block, "input": {}}
        yield "content_block_start", {"index": index, "content_block": start}
        partial = json.dumps(block["input"])
        yield (
            "content_block_delta",
            {
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": partial},
            },
        )
    yield "content_block_stop", {"index": index}


def _stream(message: Json) -> Iterator[tuple[str, Json]]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 0}
    yield "message_start", {"message": start}
    for index, block in enumerate(message["content"]):
        yield from _block_events(index, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {}


async def _chunks(message: Json) -> Any:
    for event, data in _stream(message):
        yield sse_event(event, {"type": event, **data})


def anthropic_error(failure: Failure) -> Response:
    error: Json = {"type": failure.kind, "message": failure.message}
    if failure.code is not None:
        error["code"] = failure.code
    body = {"type": "error", "error": error}
    return Response(json.dumps(body), status=failure.status, mimetype="application/json")


class AnthropicMessages(Dialect):
    """``POST /v1/messages``: Anthropic Messages, JSON and SSE (module docstring)."""

    name = "anthropic"
    auth_hint = "'x-api-key: <key>' (or 'Authorization: Bearer <key>')"
    stopped_status = 403
    paths = ("v1/messages", "messages")
    count_paths = ("v1/messages/count_tokens",)

    def secret(self, headers: Mapping[str, str], query: Mapping[str, str] = _EMPTY) -> str | None:
        key = (headers.get("x-api-key") or "").strip()
        return key or bearer(headers)

    def parse(
        self, raw: str | bytes, default_model: str, route: Mapping[str, str] = _EMPTY
    ) -> Parsed:
        return parse_messages_body(raw, default_model)

    def count_tokens(self, parsed: Parsed) -> Json:
        return {"input_tokens": estimate_tokens(parsed.request)}

    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        message = _message_json(response, parsed.request.model, f"msg_{uuid.uuid4().hex}")
        if parsed.stream:
            return sse_response(_chunks(message))
        return Response(json.dumps(message), mimetype="application/json")

    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        return anthropic_error(failure)
