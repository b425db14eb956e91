"""One tau2 episode's world: its own tau2 ``Environment`` (fresh per episode, never
shared), the tools of both seats acting on it, and the one ordered, attributed
trajectory tau2's evaluator scores.

Every tool call of either seat runs through ``Environment.get_response`` with the
seat as the call's ``requestor`` (``assistant``: the domain's agent tools; ``user``:
telecom's device tools), exactly as tau2's orchestrator runs it, and lands in
``messages`` as tau2 writes it: the seat's message holding the call, then the tool
message holding the environment's answer (tau2's evaluator replays these on a fresh
environment and checks each answer). What the seats say to each other lands there
too (``say``). ``log`` is the same, flattened for the record and the report: one row
per action (seat, tool, arguments, result, error) or utterance.

Steps and errors are counted as tau2's orchestrator counts them: one step per message
passed (a text message, a tool call, the environment's answer), one error per tool
answer tau2 marks as an error.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Mapping
from typing import Any

import trio

from taketurns import Tool, ToolMessage
from taketurns.envs.tau2_package import environment, tau2
from taketurns.harness import ToolCall

__all__ = ["GREETING", "SEATS", "Tau2Tool", "World"]

SEATS = ("assistant", "user")


GREETING = "Hi! How can I help you today?"  # the orchestrator's first message (tau2's own)


class World:
    """The episode's environment (set to the task's initial state), its trajectory,
    and tau2's step and error counts."""

    def __init__(self, domain: str, task: Any) -> None:
        self.domain = domain
        self.task = task
        self.env = environment(domain)
        state = task.initial_state
        self.env.set_state(
            initialization_data=state.initialization_data if state else None,
            initialization_actions=state.initialization_actions if state else None,
            message_history=[],
        )
        m = tau2().message
        self.messages: list[Any] = [m.AssistantMessage(role="assistant", content=GREETING)]
        self.log: list[dict[str, Any]] = [{"seat": "assistant", "said": GREETING}]
        self.steps = 0
        self.errors = 0
        self.ended: str | None = None  # tau2's termination reason, once it ended
        self.started = time.time()
        self._ids = itertools.count(1)

    def tools(self, seat: str) -> list[Tau2Tool]:
        """The seat's tools (the user has tools only where the domain gives them)."""
        if seat == "user":
            found = self.env.get_user_tools() if self.env.user_tools is not None else []
        else:
            found = self.env.get_tools()
        return [Tau2Tool(self, seat, tool) for tool in found]

    def schemas(self, seat: str) -> list[Mapping[str, Any]]:
        return [tool.schema for tool in self.tools(seat)]

    def call(self, seat: str, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run one of ``seat``'s calls on the environment: its answer and whether tau2
        marks it an error."""
        m = tau2().message
        call = m.ToolCall(
            id=f"call_{next(self._ids)}", name=name, arguments=arguments, requestor=seat
        )
        answer = self.env.get_response(call)
        cls = m.UserMessage if seat == "user" else m.AssistantMessage
        self.messages += [cls(role=seat, tool_calls=[call]), answer]
        self.steps += 2
        self.errors += bool(answer.error)
        text = str(answer.content)
        self.log.append(
            {"seat": seat, "tool": name, "arguments": arguments, "result": text}
            | ({"error": True} if answer.error else {})
        )
        return text, bool(answer.error)

    def say(self, seat: str, text: str) -> None:
        """``seat`` said ``text`` to the other seat."""
        m = tau2().message
        cls = m.UserMessage if seat == "user" else m.AssistantMessage
        self.messages.append(cls(role=seat, content=text))
        self.log.append({"seat": seat, "said": text})
        self.steps += 1

    def db_diff(self, limit: int = 40) -> dict[str, Any]:
        """What this episode's final databases hold that the gold actions' do not (and
        the other way round): tau2's gold environment built as its evaluator builds it,
        compared field by field (deepdiff, a tau2 dependency); at most ``limit``
        changes per database, as JSON-safe data."""
        from deepdiff import DeepDiff

        gold = environment(self.domain)
        state = self.task.initial_state
        gold.set_state(
            initialization_data=state.initialization_data if state else None,
            initialization_actions=state.initialization_actions if state else None,
            message_history=[],
        )
        for action in self.task.evaluation_criteria.actions or []:
            # as tau2's evaluator: a failing gold action is skipped
            with contextlib.suppress(Exception):
                gold.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        out = {}
        for side, mine, theirs in (
            ("agent_db", self.env.tools, gold.tools),
            ("user_db", self.env.user_tools, gold.user_tools),
        ):
            if mine is None or theirs is None:
                continue
            diff = DeepDiff(theirs.db.model_dump(mode="json"), mine.db.model_dump(mode="json"))
            flat = json.loads(diff.to_json())
            changes = [(kind, path, v) for kind, found in flat.items() for path, v in _items(found)]
            if changes:
                out[side] = [
                    {"change": kind, "path": path, "value": value}
                    for kind, path, value in changes[:limit]
                ] + (
                    [{"change": "more", "count": len(changes) - limit}]
                    if len(changes) > limit
                    else []
                )
        return out

    def simulation(self, termination: str) -> Any:
        """The episode as tau2's ``SimulationRun``, ended by ``termination`` (one of
        tau2's ``TerminationReason`` values)."""
        s = tau2().simulation
        now = time.time()
        return s.SimulationRun(
            id=f"taketurns-{id(self)}",
            task_id=self.task.id,
            start_time=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.started)),
            end_time=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)),
            duration=now - self.started,
            termination_reason=s.TerminationReason(termination),
            messages=list(self.messages),
        )


def _items(found: Any) -> list[tuple[str, Any]]:
    """A deepdiff report's entries as (path, detail) pairs."""
    if isinstance(found, dict):
        return [(str(k), v) for k, v in found.items()]
    return [(str(p), None) for p in found]


class Tau2Tool(Tool):
    """One of tau2's tools offered to a seat: tau2's own OpenAI schema, its call run on
    the episode's environment with the seat as requestor."""

    def __init__(self, world: World, seat: str, tool: Any) -> None:
        self.world = world
        self.seat = seat
        self.schema = tool.openai_schema
        self.name = tool.name

    async def call(self, call: ToolCall) -> ToolMessage:
        await trio.lowlevel.checkpoint()
        return ToolMessage(call.id, self.run(call.arguments), self.name)

    def run(self, raw: str | Mapping[str, Any]) -> str:
        """Run the call with JSON ``raw`` arguments; the text the seat reads."""
        try:
            args = json.loads(raw or "{}") if isinstance(raw, str) else dict(raw)
        except json.JSONDecodeError as exc:
            args = exc
        if not isinstance(args, dict):
            self.world.errors += 1
            return "Error: the arguments must be a JSON object"
        return self.world.call(self.seat, self.name, args)[0]
