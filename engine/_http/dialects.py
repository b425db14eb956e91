"""The dialects every server speaks, one stateless instance each, with the path each
is served at (under ``/v1``, and bare)."""

from __future__ import annotations

from taketurns._http.anthropic import AnthropicMessages
from taketurns._http.chat_completions import ChatCompletions
from taketurns._http.dialect import Dialect
from taketurns._http.responses import Responses

__all__ = ["CHAT", "DIALECT_PATHS", "MESSAGES", "RESPONSES"]

CHAT = ChatCompletions()
RESPONSES = Responses()
MESSAGES = AnthropicMessages()
DIALECT_PATHS: tuple[tuple[Dialect, str], ...] = (
    (CHAT, "chat/completions"),
    (RESPONSES, "responses"),
    (MESSAGES, "messages"),
)
