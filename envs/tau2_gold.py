"""The gold policy of ``tau2`` (``--env.policy=gold``): both seats served by a scripted
model that replays the task's gold actions (``evaluation_criteria.actions``) from the
seat that owns each action, and has the assistant say the task's ``communicate_info``.

One ``GoldScript`` per episode, shared by its two seats (``GoldModel``, one per
seat): a cursor over the gold actions. Asked for a reply, a seat's model calls the
next action's tool while that action is its own (one call per model call, so the
seat's harness runs it on the episode's environment and asks again), then answers in
text: the assistant says the communicate info (the first time) and asks the user to
do their next action, if any; the user says ``###STOP###`` (tau2's stop signal) once
no action is left and the assistant has spoken, else asks the assistant to go on.
Every call goes through the engine: the sessions, the harness, the tools, the
episode's environment.

``--env.policy=idle`` is the same script with no actions and nothing to say: the user
stops at once (what a do-nothing agent scores).
"""

from __future__ import annotations

import json
from typing import Any

import trio

from taketurns import AssistantMessage
from taketurns.env import ModelClient, ModelRequest, ModelResponse
from taketurns.harness import ToolCall

__all__ = ["GOLD_MODEL", "STOP", "GoldModel", "GoldScript"]

GOLD_MODEL = "tau2/gold"
STOP = "###STOP###"  # tau2.user.base.STOP


class GoldScript:
    """One episode's cursor over the task's gold actions."""

    def __init__(self, task: Any, *, idle: bool = False) -> None:
        criteria = task.evaluation_criteria
        self.actions = [] if idle or criteria is None else list(criteria.actions or [])
        self.info = [] if idle or criteria is None else list(criteria.communicate_info or [])
        self.next = 0
        self.told = False

    def model(self, seat: str) -> GoldModel:
        return GoldModel(self, seat)

    def answer(self, seat: str, offered: set[str]) -> AssistantMessage:
        """The seat's next message: its next gold action as a tool call, else text."""
        if self.next < len(self.actions) and self.actions[self.next].requestor == seat:
            action = self.actions[self.next]
            name = _offered_as(action.name, offered)
            if name is not None:
                self.next += 1
                arguments = json.dumps(action.arguments)
                return AssistantMessage(tool_calls=[ToolCall(f"gold_{self.next}", name, arguments)])
        return AssistantMessage(self._text(seat))

    def _text(self, seat: str) -> str:
        pending = self.actions[self.next] if self.next < len(self.actions) else None
        if seat == "user":
            done = pending is None and (self.told or not self.info)
            return STOP if done else "Thank you. Please go on."
        parts = []
        if not self.told and self.info:
            parts.append(" ".join(f"{info}." for info in self.info))
        self.told = True
        if pending is not None and pending.requestor == "user":
            parts.append(f"Please {pending.name} with {json.dumps(pending.arguments)}.")
        return " ".join(parts) or "Is there anything else I can help you with?"


def _offered_as(name: str, offered: set[str]) -> str | None:
    """The name the seat's model sees tool ``name`` under: itself in process, an agent
    CLI's MCP name (``mcp__tau2__NAME``) over MCP."""
    if name in offered:
        return name
    return next((o for o in sorted(offered) if o.endswith(f"__{name}")), None)


class GoldModel(ModelClient):
    """One seat of a ``GoldScript``, as a model client."""

    def __init__(self, script: GoldScript, seat: str) -> None:
        self.script = script
        self.seat = seat

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        offered = {t["function"]["name"] for t in request.tools if "function" in t}
        message = self.script.answer(self.seat, offered)
        finish = "tool_calls" if message.tool_calls else "stop"
        return ModelResponse(message, finish_reason=finish, policy_version=GOLD_MODEL)
