"""``builtin/tools`` follows an instruction that names an offered tool: in the user's
text it picks the tool, in the latest tool result it chains one more call."""

from __future__ import annotations

import json

from taketurns import AssistantMessage, ToolMessage, UserMessage
from taketurns._models.builtin import BuiltinModel
from taketurns.env import ModelRequest
from taketurns.harness import ToolCall


def schema(name: str, *params: str) -> dict[str, object]:
    props = {p: {"type": "string"} for p in params}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"properties": props, "required": [*params]}},
    }


TOOLS = (schema("look_up", "phone_number"), schema("toggle"), schema("resume", "phone_number"))
MODEL = BuiltinModel("tools")


def answer(*messages: object) -> AssistantMessage:
    request = ModelRequest("builtin/tools", tuple(messages), tools=TOOLS)  # type: ignore[arg-type]
    return MODEL.respond(request).message


def test_the_users_text_names_the_tool_to_call() -> None:
    (call,) = answer(UserMessage("Please call tool toggle.")).tool_calls
    assert call.name == "toggle"
    (call,) = answer(UserMessage("Please call tool fly_away, it is not offered")).tool_calls
    assert call.name == "look_up"  # the first offered tool, as before


def test_a_tool_result_naming_a_tool_chains_one_call_with_its_arguments() -> None:
    asked = UserMessage("phone_number: 555-0101")
    first = AssistantMessage(None, (ToolCall("c1", "look_up", '{"phone_number": "555-0101"}'),))
    said = "Suspended: call tool resume with phone_number: 555-0202 to resume it."
    (call,) = answer(asked, first, ToolMessage("c1", said)).tool_calls
    assert (call.name, json.loads(call.arguments)) == ("resume", {"phone_number": "555-0202"})
    again = AssistantMessage(None, (ToolCall("c2", "resume", "{}"),))
    done = answer(asked, first, ToolMessage("c1", said), again, ToolMessage("c2", said))
    assert (done.tool_calls, done.content) == ((), f"The tool said: {said}")
