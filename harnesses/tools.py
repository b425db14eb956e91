"""The ``tools`` harness: an in-process tool loop (the tau-bench assistant shape).

One segment: model -> tool calls -> the rollout's Python tools -> model ... until a
reply with no tool calls ends it. Tool failures and bad arguments go back to the
model as tool messages; every model call counts toward ``max_turns``.
"""

from __future__ import annotations

from collections.abc import Sequence

from taketurns import AssistantMessage, Message, ToolMessage
from taketurns.harness import Harness, Prompt, Rollout, as_tools


class ToolsHarness(Harness):
    id = "tools"

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        tools = as_tools(rollout.tools)
        schemas = [t.schema for t in tools.values()]
        messages: list[Message] = list(prompt.wire_messages())
        while True:
            response = await rollout.complete(messages, tools=schemas)
            reply: AssistantMessage = response.message
            rollout.emit(reply)
            messages.append(reply)
            if not reply.tool_calls:
                return
            for call in reply.tool_calls:
                tool = tools.get(call.name)
                if tool is None:
                    known = ", ".join(tools) or "none"
                    result = ToolMessage(
                        call.id, f"Error: no tool named {call.name!r}; tools: {known}", call.name
                    )
                else:
                    result = await tool.call(call)
                rollout.emit(result)
                messages.append(result)

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        await self.launch(rollout, rollout.relaunch_prompt())
