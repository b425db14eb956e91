"""``Task``: one row of a taskset, the unit an episode runs on."""

from __future__ import annotations

from typing import Any

import attrs

from taketurns._models.messages import Message, SystemMessage, UserMessage, text_of

__all__ = ["Task"]


def _prompt(value: str | list[Message] | tuple[Message, ...] | None) -> Any:
    return value if value is None or isinstance(value, str) else tuple(value)


@attrs.frozen(eq=True, hash=False)
class Task:
    """One row. ``prompt`` is a string, a sequence of messages, or None (a task the
    user opens with its first message). ``info`` is free-form and JSON-able."""

    idx: int
    name: str = ""
    prompt: str | tuple[Message, ...] | None = attrs.field(default=None, converter=_prompt)
    system_prompt: str | None = None
    answer: Any = None
    info: dict[str, Any] = attrs.field(factory=dict)

    def opening_messages(self) -> tuple[Message, ...]:
        """The messages the prompt contributes (without any ``system_prompt``)."""
        if self.prompt is None:
            return ()
        if isinstance(self.prompt, str):
            return (UserMessage(self.prompt),)
        return self.prompt

    def prompt_text(self) -> str:
        """The prompt as plain text: the string, or the text of its user messages."""
        if self.prompt is None:
            return ""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(
            text_of(m.content) for m in self.prompt if not isinstance(m, SystemMessage)
        )
