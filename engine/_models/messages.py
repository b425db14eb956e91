"""Chat messages: immutable values, shared freely between turns, traces and sessions.

Content is either a plain string or a tuple of content parts (text and images).
The OpenAI chat-completions wire format lives in ``taketurns._models.wire``; nothing here
knows about JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import attrs

__all__ = [
    "AssistantMessage",
    "Content",
    "ImagePart",
    "Message",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "last_text",
    "text_of",
]


@attrs.frozen
class TextPart:
    text: str
    type: Literal["text"] = "text"


@attrs.frozen
class ImagePart:
    """An image by URL (``https://...`` or a ``data:image/png;base64,...`` URL)."""

    url: str
    detail: str | None = None
    type: Literal["image_url"] = "image_url"


Part = TextPart | ImagePart
Content = str | tuple[Part, ...]


def _content(value: str | Sequence[Part]) -> Content:
    return value if isinstance(value, str) else tuple(value)


@attrs.frozen
class ToolCall:
    """One function call the model asked for; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


@attrs.frozen
class SystemMessage:
    content: Content = attrs.field(converter=_content)
    role: Literal["system"] = "system"


@attrs.frozen
class UserMessage:
    content: Content = attrs.field(converter=_content)
    role: Literal["user"] = "user"


@attrs.frozen
class AssistantMessage:
    content: Content | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    role: Literal["assistant"] = "assistant"


@attrs.frozen
class ToolMessage:
    tool_call_id: str
    content: Content = attrs.field(converter=_content)
    name: str | None = None
    role: Literal["tool"] = "tool"


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage


def last_text(messages: Sequence[Message]) -> str:
    """The text of the last assistant message that has content, or ""."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage) and message.content:
            return text_of(message.content)
    return ""


def text_of(content: Content | None) -> str:
    """The text of a message's content: the string itself, or its text parts joined
    by newlines (image parts contribute nothing)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if isinstance(p, TextPart))
