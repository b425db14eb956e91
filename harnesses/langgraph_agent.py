"""The ``langgraph`` harness: a compiled LangGraph graph (PyPI ``langgraph`` with
``langchain-openai``, ``pip install 'taketurns[langgraph]'``) as a seat, in process.

The factory builds the graph around the model it is given and compiles it with a
checkpointer; its state has a ``messages`` channel (``MessagesState``):

    def make(model, tools):
        builder = StateGraph(MessagesState)
        ...  # nodes calling model (or model.bind_tools(tools))
        return builder.compile(checkpointer=InMemorySaver())

``model`` is a ``ChatOpenAI`` over the rollout's model boundary
(``taketurns.harnesses.framework``; streaming off, ``max_retries=0``): a model the graph
builds itself is not the rollout's and is never recorded. A segment is one
``graph.ainvoke({"messages": [...new messages]}, {"configurable": {"thread_id": T}})``;
the rollout's own thread ``T`` carries its state to the next ``turn()`` through the
graph's checkpointer. Write nodes and tools as ``async def``: langchain runs a plain
``def`` in the loop's default executor, and langchain-openai turns each response into
its result there too; for a seat those jobs run on the seat's own worker threads,
joined when the rollout closes (``taketurns.harnesses.framework_workers``).
"""

from __future__ import annotations

import uuid
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


class LangGraphHarness(FrameworkHarness):
    """A compiled graph built by the ``agent`` factory, run by ``graph.ainvoke`` on
    the rollout's checkpointer thread."""

    id = "langgraph"
    package = "langgraph"
    distribution = "langgraph and langchain-openai"
    extra = "langgraph"
    returns = "a compiled graph with a checkpointer (builder.compile(checkpointer=...))"

    def make_model(self, http: Any, name: str) -> Any:
        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            from taketurns import HarnessError

            raise HarnessError(
                f"harness {self.id!r} needs langchain-openai: pip install 'taketurns[langgraph]'"
            ) from None
        model = ChatOpenAI(
            model=name,
            api_key=API_KEY,  # type: ignore[arg-type]  # pydantic coerces it to a SecretStr
            base_url=BASE_URL,
            max_retries=0,
            http_async_client=http,
            disable_streaming=True,
            use_responses_api=False,
        )
        without_platform_thread(model.root_async_client)
        return model

    def refusal(self, built: Any) -> str | None:
        from langgraph.graph import StateGraph
        from langgraph.pregel import Pregel

        if isinstance(built, StateGraph):
            return "compile it: return builder.compile(checkpointer=InMemorySaver())"
        if not isinstance(built, Pregel):
            return f"the factory must return {self.returns}"
        if not built.checkpointer:
            return (
                "it has no checkpointer, so no turn could continue its state: "
                "builder.compile(checkpointer=InMemorySaver())"
            )
        return None

    def framework_tools(self, rollout: Rollout, gate: Gate) -> list[Any]:
        from langchain_core.tools import StructuredTool

        return [
            StructuredTool(
                name=name,
                description=description or name,
                args_schema=schema,
                coroutine=_invoker(run, name),
            )
            for run, name, description, schema in tool_specs(rollout, gate)
        ]

    async def run(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        if first:
            seat.memory = uuid.uuid4().hex  # the rollout's thread
        inputs: list[dict[str, str]] = []
        if first and seat.system is not None:
            inputs.append({"role": "system", "content": seat.system})
        inputs += [{"role": m.role, "content": text_of(m.content)} for m in messages]
        config = {"configurable": {"thread_id": seat.memory}}
        await seat.agent.ainvoke({"messages": inputs}, config)


def _invoker(run: Any, name: str) -> Any:
    """A langchain tool coroutine for one rollout tool: runs it on trio."""

    async def invoke(**arguments: Any) -> str:
        import json

        message = await on_trio(run, ToolCall("", name, json.dumps(arguments)))
        return text_of(message.content)

    return invoke
