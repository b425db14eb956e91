"""Test doubles, injected only through public interfaces: the harnesses subclass
``taketurns.harness.Harness``; ``ScriptedModel`` and ``Sleep`` come from ``taketurns.testing``
(re-exported here for the tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    Limits,
    Message,
    Rubric,
    Timeouts,
    ToolMessage,
    UserMessage,
)
from taketurns.env import ModelClient
from taketurns.harness import Harness, Prompt, Rollout, ToolCall, text_of
from taketurns.testing import USAGE, ScriptedModel, Sleep  # noqa: F401 - re-exported for the tests

TOOLS = ({"type": "function", "function": {"name": "lookup", "parameters": {}}},)


def tool_call(id: str, name: str = "lookup", arguments: str = "{}") -> AssistantMessage:
    """A model message asking for one tool call."""
    return AssistantMessage(None, (ToolCall(id, name, arguments),))


def tool_results(trace: Any) -> list[str]:
    """The text of every tool result the model was sent, in order (each request's
    ``ToolMessage``s): what a tool run by an agent CLI returned, as the CLI showed it."""
    return [
        text_of(m.content)
        for turn in trace.turns
        for m in turn.request
        if isinstance(m, ToolMessage)
    ]


class ToolLoopHarness(Harness):
    """Runs its own tool loop inside one segment: calls the model, answers every tool
    call with a ``ToolMessage``, and calls again until the model answers in text.
    Multi-turn through the default ``resume`` (a relaunch). Records each ``Prompt``
    it was launched with, and ``(event, label)`` pairs around each segment."""

    def __init__(self, *, sleep: float = 0.0, max_calls: int = 10) -> None:
        self.sleep = sleep
        self.max_calls = max_calls
        self.prompts: list[Prompt] = []
        self.events: list[tuple[str, str]] = []

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        self.prompts.append(prompt)
        label = _last_user_text(prompt.messages)
        self.events.append(("start", label))
        if self.sleep:
            await trio.sleep(self.sleep)
        messages: list[Message] = list(prompt.wire_messages())
        for _ in range(self.max_calls):
            response = await rollout.complete(messages, tools=TOOLS)
            rollout.emit(response.message)
            messages.append(response.message)
            if not response.message.tool_calls:
                break
            for call in response.message.tool_calls:
                result = ToolMessage(call.id, f"result of {call.name}", call.name)
                rollout.emit(result)
                messages.append(result)
        self.events.append(("end", label))


class TextHarness(Harness):
    """Takes its prompt as plain text and has no ``resume``: one-shot only."""

    takes_text = True

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def launch(self, rollout: Rollout, prompt: str) -> None:
        self.prompts.append(prompt)
        response = await rollout.complete([UserMessage(prompt)])
        rollout.emit(response.message)


class TextResumeHarness(TextHarness):
    """A text harness with a native ``resume``: chat-capable."""

    resumes = True

    def __init__(self) -> None:
        super().__init__()
        self.resumed: list[tuple[Message, ...]] = []

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        self.resumed.append(tuple(messages))
        response = await rollout.complete(rollout.conversation)
        rollout.emit(response.message)


class FailingHarness(ToolLoopHarness):
    """Like ``ToolLoopHarness``, but segment number ``fail_on`` (0-based) raises ``error``
    (before or after its model calls, as ``after_calls`` says)."""

    def __init__(
        self, fail_on: int = 0, error: BaseException | None = None, *, after_calls: bool = False
    ) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.error = error if error is not None else RuntimeError("harness broke")
        self.after_calls = after_calls
        self.segments = 0

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        segment, self.segments = self.segments, self.segments + 1
        if segment == self.fail_on and not self.after_calls:
            raise self.error
        await super().launch(rollout, prompt)
        if segment == self.fail_on:
            raise self.error


class CloseRecordingHarness(ToolLoopHarness):
    """Counts ``aclose`` calls (finalize runs exactly once per session)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closed = 0

    async def aclose(self, rollout: Rollout) -> None:
        self.closed += 1


def _last_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            return text_of(message.content)
    return ""


class Counter:
    """A reward function that counts its calls: ``fn(task, trace) -> value``."""

    def __init__(self, value: float = 1.0, name: str = "counted") -> None:
        self.value = value
        self.calls = 0
        self.__name__ = name

    def __call__(self, task: Any, trace: Any) -> float:
        self.calls += 1
        return self.value


def make_agent(
    client: ModelClient | None = None,
    harness: Harness | None = None,
    *,
    name: str = "agent",
    rewards: Sequence[Callable[..., Any]] = (),
    limits: Limits | None = None,
    timeouts: Timeouts | None = None,
    retries: int = 0,
    **kwargs: Any,
) -> Agent:
    """An ``Agent`` over a scripted model (a fresh one by default) and a harness
    (``ToolLoopHarness`` by default)."""
    config = AgentConfig(
        model="scripted",
        harness="scripted",
        limits=limits if limits is not None else Limits(),
        timeouts=timeouts if timeouts is not None else Timeouts(),
        retries=retries,
    )
    return Agent(
        name,
        config,
        client=client if client is not None else ScriptedModel(),
        harness=harness if harness is not None else ToolLoopHarness(),
        rubric=Rubric.from_functions(rewards),
        **kwargs,
    )
