"""The OpenAI chat-completions wire format for messages and tool calls.

``openai`` is the private cattrs converter for this format; ``to_wire`` / ``from_wire``
are the two calls the rest of the engine makes. Malformed wire messages raise
``ValueError`` naming the problem (the interception server turns that into a 400).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import cattrs

from taketurns._models.messages import (
    AssistantMessage,
    Content,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["from_wire", "messages_from_wire", "messages_to_wire", "openai", "to_wire"]

Json = dict[str, Any]


def _content_out(content: Content | None) -> Any:
    if content is None or isinstance(content, str):
        return content
    out: list[Json] = []
    for part in content:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        else:
            image: Json = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            out.append({"type": "image_url", "image_url": image})
    return out


def _content_in(raw: Any, where: str) -> Content:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise ValueError(f"{where}.content must be a string or a list of parts")
    parts: list[TextPart | ImagePart] = []
    for i, part in enumerate(raw):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif kind == "image_url" and isinstance(part.get("image_url"), dict | str):
            image = part["image_url"]
            if isinstance(image, str):
                parts.append(ImagePart(image))
            elif isinstance(image.get("url"), str):
                parts.append(ImagePart(image["url"], image.get("detail")))
            else:
                raise ValueError(f"{where}.content[{i}].image_url.url must be a string")
        else:
            raise ValueError(f"{where}.content[{i}] must be a text or image_url part")
    return tuple(parts)


def _tool_call_out(call: ToolCall) -> Json:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _tool_call_in(raw: Any, where: str) -> ToolCall:
    fn = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"{where}.function.name is missing")
    arguments = fn.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise ValueError(f"{where}.function.arguments must be a JSON string")
    return ToolCall(id=str(raw.get("id", "")), name=fn["name"], arguments=arguments)


def to_wire(message: Message) -> Json:
    """One message as an OpenAI chat-completions message object."""
    if isinstance(message, AssistantMessage):
        out: Json = {"role": "assistant", "content": _content_out(message.content)}
        if message.tool_calls:
            out["tool_calls"] = [_tool_call_out(c) for c in message.tool_calls]
        return out
    if isinstance(message, ToolMessage):
        out = {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": _content_out(message.content),
        }
        if message.name is not None:
            out["name"] = message.name
        return out
    return {"role": message.role, "content": _content_out(message.content)}


def from_wire(raw: Any, where: str = "message") -> Message:
    """Parse one OpenAI message object; ``where`` prefixes error messages."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object")
    role = raw.get("role")
    if role in ("system", "developer", "user"):
        if "content" not in raw:
            raise ValueError(f"{where}.content is missing")
        content = _content_in(raw["content"], where)
        return UserMessage(content) if role == "user" else SystemMessage(content)
    if role == "assistant":
        raw_content = raw.get("content")
        content_or_none = None if raw_content is None else _content_in(raw_content, where)
        calls = raw.get("tool_calls") or []
        if not isinstance(calls, list):
            raise ValueError(f"{where}.tool_calls must be a list")
        return AssistantMessage(
            content_or_none,
            tuple(_tool_call_in(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)),
        )
    if role == "tool":
        if not isinstance(raw.get("tool_call_id"), str):
            raise ValueError(f"{where}.tool_call_id is missing")
        return ToolMessage(
            raw["tool_call_id"], _content_in(raw.get("content", ""), where), raw.get("name")
        )
    raise ValueError(f"{where}.role must be one of system, user, assistant, tool (got {role!r})")


def messages_to_wire(messages: Iterable[Message]) -> list[Json]:
    return [to_wire(m) for m in messages]


def messages_from_wire(raw: Any, where: str = "messages") -> list[Message]:
    if not isinstance(raw, list):
        raise ValueError(f"{where} must be a list of message objects")
    return [from_wire(m, f"{where}[{i}]") for i, m in enumerate(raw)]


def _register(converter: cattrs.Converter) -> None:
    for cls in (SystemMessage, UserMessage, AssistantMessage, ToolMessage):
        converter.register_unstructure_hook(cls, to_wire)
        converter.register_structure_hook(cls, lambda raw, _cls: from_wire(raw))
    converter.register_unstructure_hook(Message, to_wire)
    converter.register_structure_hook(Message, lambda raw, _t: from_wire(raw))
    converter.register_unstructure_hook(ToolCall, _tool_call_out)
    converter.register_structure_hook(ToolCall, lambda raw, _t: _tool_call_in(raw, "tool_call"))


openai = cattrs.Converter()
_register(openai)


def register_messages(converter: cattrs.Converter) -> None:
    """Teach another converter (the JSONL record, say) to write messages in wire shape."""
    _register(converter)


def tool_calls_to_wire(calls: Sequence[ToolCall]) -> list[Json]:
    return [_tool_call_out(c) for c in calls]
