"""The ``pydantic-ai`` harness: a Pydantic AI agent (PyPI ``pydantic-ai-slim[openai]``,
``pip install 'taketurns[pydantic-ai]'``) as a seat, in process.

The factory returns a ``pydantic_ai.Agent``:

    def make(model, tools):
        return Agent(model, instructions="...", tools=tools)

``model`` is an ``OpenAIChatModel`` over the rollout's model boundary
(``taketurns.harnesses.framework``); every run also passes it as ``model=``. A segment
is one ``agent.run(user_prompt, message_history=...)`` on the user's message; the run's
``all_messages()`` is the history the next ``turn()`` continues. The task's system
prompt (and any system message of the prompt) rides as the run's ``instructions`` on
every run (pydantic-ai re-sends instructions, never stores them). The agent's own
retries (re-prompting on a bad tool call or output) are the model's behaviour and stay
as the agent sets them; the HTTP client's are off.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taketurns import AssistantMessage, Message, UserMessage
from taketurns.harness import Rollout, ToolCall, text_of
from taketurns.harnesses.framework import (
    API_KEY,
    FrameworkHarness,
    Seat,
    tool_specs,
    without_platform_thread,
)
from taketurns.harnesses.framework_gate import BASE_URL, Gate, on_trio


class PydanticAIHarness(FrameworkHarness):
    """A ``pydantic_ai.Agent`` built by the ``agent`` factory, run by ``agent.run``."""

    id = "pydantic-ai"
    package = "pydantic_ai"
    distribution = "pydantic-ai-slim[openai]"
    extra = "pydantic-ai"
    returns = "a pydantic_ai.Agent"

    def make_model(self, http: Any, name: str) -> Any:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        client = AsyncOpenAI(api_key=API_KEY, base_url=BASE_URL, max_retries=0, http_client=http)
        provider = OpenAIProvider(openai_client=without_platform_thread(client))
        return OpenAIChatModel(name, provider=provider)

    def refusal(self, built: Any) -> str | None:
        from pydantic_ai import Agent

        if isinstance(built, Agent):
            return None
        return "the factory must return a pydantic_ai.Agent, e.g. Agent(model, instructions=...)"

    def framework_tools(self, rollout: Rollout, gate: Gate) -> list[Any]:
        from pydantic_ai import Tool

        return [
            Tool.from_schema(_invoker(run, name), name, description, schema, takes_ctx=True)
            for run, name, description, schema in tool_specs(rollout, gate)
        ]

    async def run(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        if first:
            seat.memory = []
        history, prompt, system = _split(messages)
        if first and system:
            seat.system = "\n\n".join(p for p in (seat.system, system) if p)
        user_prompt = prompt[0] if len(prompt) == 1 else prompt or None
        result = await seat.agent.run(
            user_prompt,
            message_history=[*seat.memory, *history],
            model=seat.model,
            instructions=seat.system,
        )
        seat.memory = result.all_messages()


def _split(messages: Sequence[Message]) -> tuple[list[Any], list[str], str]:
    """pydantic-ai's history for all but the trailing user messages, their texts (the
    run's user prompt), and the text of the system messages."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    tail = len(messages)
    while tail > 0 and isinstance(messages[tail - 1], UserMessage):
        tail -= 1
    history: list[Any] = []
    system: list[str] = []
    for message in messages[:tail]:
        text = text_of(message.content)
        if isinstance(message, UserMessage):
            history.append(ModelRequest(parts=[UserPromptPart(text)]))
        elif isinstance(message, AssistantMessage):
            history.append(ModelResponse(parts=[TextPart(text)]))
        elif message.role == "system":
            system.append(text)
    prompt = [text_of(m.content) for m in messages[tail:]]
    return history, prompt, "\n\n".join(system)


def _invoker(run: Any, name: str) -> Any:
    """A pydantic-ai tool function for one rollout tool: runs it on trio."""

    async def invoke(context: Any, **arguments: Any) -> str:
        import json

        call_id = getattr(context, "tool_call_id", None) or ""
        call = ToolCall(call_id, name, json.dumps(arguments))
        message = await on_trio(run, call)
        return text_of(message.content)

    invoke.__name__ = name
    return invoke
