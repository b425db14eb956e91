"""The ``openai-agents`` harness: an OpenAI Agents SDK agent (PyPI ``openai-agents``,
``pip install 'taketurns[openai-agents]'``) as a seat, in process.

The factory returns an ``agents.Agent``:

    def make(model, tools):
        return Agent(name="seat", instructions="...", model=model, tools=tools)

``model`` is an ``OpenAIChatCompletionsModel`` over the rollout's model boundary
(``taketurns.harnesses.framework``); the run also sets it as ``RunConfig.model``, so an
agent handed off to runs on it too. A segment is one ``Runner.run`` on the user's
message with the rollout's ``Session`` (an in-memory one the harness keeps; the next
``turn()`` continues it); tracing is off (the SDK's exporter would start a thread and
call OpenAI); the runner's retries are opt-in and stay off. The SDK's ``max_turns``
(10 model calls a run) applies; past it the run fails as the harness
(``MaxTurnsExceeded``): cap turns with ``--env.<role>.limits.max_segment_turns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taketurns import Message
from taketurns.harness import Rollout, ToolCall, text_of
from taketurns.harnesses.framework import (
    API_KEY,
    FrameworkHarness,
    Seat,
    tool_specs,
    without_platform_thread,
)
from taketurns.harnesses.framework_gate import BASE_URL, Gate, on_trio


class Memory:
    """The SDK's ``Session`` protocol over a list: the rollout's conversation as the
    SDK keeps it (the SDK's SQLite session would add a database and locks)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.session_settings = None
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:] if limit else [])

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


class OpenAIAgentsHarness(FrameworkHarness):
    """An ``agents.Agent`` built by the ``agent`` factory, run by ``Runner.run``."""

    id = "openai-agents"
    package = "agents"
    distribution = "openai-agents"
    extra = "openai-agents"
    returns = "an agents.Agent"

    def make_model(self, http: Any, name: str) -> Any:
        from agents import OpenAIChatCompletionsModel
        from openai import AsyncOpenAI

        client = AsyncOpenAI(api_key=API_KEY, base_url=BASE_URL, max_retries=0, http_client=http)
        return OpenAIChatCompletionsModel(model=name, openai_client=without_platform_thread(client))

    def refusal(self, built: Any) -> str | None:
        from agents import Agent

        if isinstance(built, Agent):
            return None
        return "the factory must return an agents.Agent, e.g. Agent(name=..., model=model)"

    def framework_tools(self, rollout: Rollout, gate: Gate) -> list[Any]:
        from agents import FunctionTool

        return [
            FunctionTool(
                name=name,
                description=description,
                params_json_schema=schema,
                on_invoke_tool=_invoker(run, name),
                strict_json_schema=False,
            )
            for run, name, description, schema in tool_specs(rollout, gate)
        ]

    async def run(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        from agents import RunConfig, Runner

        if seat.memory is None:
            seat.memory = Memory(f"taketurns-{id(seat):x}")
        items: list[Any] = []
        if first and seat.system is not None:
            items.append({"role": "system", "content": seat.system})
        items += [{"role": m.role, "content": text_of(m.content)} for m in messages]
        config = RunConfig(model=seat.model, tracing_disabled=True)
        await Runner.run(seat.agent, items, session=seat.memory, run_config=config)


def _invoker(run: Any, name: str) -> Any:
    """The SDK's ``on_invoke_tool`` for one rollout tool: runs it on trio."""

    async def invoke(context: Any, arguments: str) -> str:
        call = ToolCall(getattr(context, "tool_call_id", "") or "", name, arguments or "{}")
        message = await on_trio(run, call)
        return text_of(message.content)

    return invoke
