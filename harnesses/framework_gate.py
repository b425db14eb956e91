"""The model endpoint of an in-process agent framework: an httpx2 transport that hands
each chat-completions request straight to the rollout's model boundary.

A framework (openai-agents, pydantic-ai, langgraph) talks to "the model" through its
own OpenAI client. The harness gives that client an ``httpx2.AsyncClient`` whose
transport is ``GateTransport``: a request never touches a socket. The transport runs
on the asyncio side (trio-asyncio); it crosses to trio (``trio_asyncio.trio_as_aio``)
and gives the body to the rollout's ``Gate``, which parses it as chat completions,
makes ONE model call through ``Rollout.complete`` (limits, ``@stop`` hooks, seeds,
recording: one request = one recorded turn, as for every harness) and answers the
OpenAI JSON body, token data included.

The gate is the interception server's endpoint gate, in process: it is open only while
one of the rollout's segments runs (``open_segment``). The segment's model calls run in
a nursery the segment owns; when the segment ends, however it ends, calls still in
flight are cancelled and answered 409, and a request made after it (a task the
framework left behind, a client kept past the turn) is answered 409 ``rollout_idle``
with nothing recorded. A refused call (a limit or hook: ``RolloutStopped``) or a failed
endpoint (``ModelEndpointError``) is answered as an error the OpenAI SDK does not retry
(400 / 424) and kept as ``failure``: the harness raises it in place of whatever the
framework made of the error answer, so the session ends the run with the boundary's
own stop condition or endpoint failure, never a harness error.

Why not the interception server over loopback (what out-of-process agents use)? Both
work (the benchmark measures both: ``benchmarks/bench_frameworks.py``); in process a
call costs no HTTP server hop (hypercorn + quart ~1.6-2.4 ms of CPU a request,
docs/design.md "Dependencies") and no socket, secret or second HTTP client per rollout,
and the gate, the recording and the refusals are the same.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2
import trio

from taketurns import AssistantMessage, Message, ModelEndpointError, ToolMessage
from taketurns.env import ModelResponse
from taketurns.errors import RolloutStopped
from taketurns.harness import Rollout, ToolCall, messages_from_wire, to_wire

__all__ = ["BASE_URL", "Gate", "GateState", "GateTransport", "on_trio"]

# the base URL the framework's client is given: never resolved, never connected to
BASE_URL = "http://taketurns.in-process/v1"
# request fields that are not sampling arguments (as the interception server reads them)
_NOT_SAMPLING = frozenset({"model", "messages", "tools", "stream", "stream_options"})

Json = dict[str, Any]
T = TypeVar("T")


class GateState(enum.Enum):
    IDLE = "idle"  # no segment runs: requests answer 409, nothing recorded
    OPEN = "open"  # a segment runs: model calls are taken
    CLOSED = "closed"  # the rollout closed


def _error(status: int, kind: str, message: str, code: str | None = None) -> tuple[int, Json]:
    return status, {"error": {"message": message, "type": kind, "param": None, "code": code}}


_IDLE = _error(
    409,
    "rollout_idle",
    "no segment of this rollout is running; its endpoint is open only during the agent's turn",
)
_CLOSED = _error(409, "rollout_closed", "this rollout is closed; its endpoint no longer works")
_ENDED = _error(409, "rollout_idle", "the rollout's segment ended during this call")


class Gate:
    """One rollout's in-process endpoint (module docstring). Trio side. A gate of no
    rollout (None) is never opened (the harness's probe of a factory)."""

    def __init__(self, rollout: Rollout | None) -> None:
        self.rollout = rollout
        self.state = GateState.IDLE
        self.failure: RolloutStopped | ModelEndpointError | None = None  # this segment's
        self.refused = 0  # requests answered 409 (between segments, after close)
        self._calls: trio.Nursery | None = None
        self._answered = 0  # model calls answered in this segment
        self._unsent: list[ToolMessage] = []  # rollout tool results no request carried yet

    @asynccontextmanager
    async def open_segment(self) -> AsyncIterator[None]:
        """Open the gate for the body (one segment); on leaving, its calls still in
        flight are cancelled and the gate is idle again."""
        if self.state is not GateState.IDLE or self.rollout is None:
            raise RuntimeError(f"a segment of a rollout whose endpoint is {self.state.value}")
        self.failure, self._answered, self._unsent = None, 0, []
        async with trio.open_nursery() as calls:
            self.state, self._calls = GateState.OPEN, calls
            try:
                yield
            finally:
                calls.cancel_scope.cancel()
                self._calls = None
                if self.state is GateState.OPEN:
                    self.state = GateState.IDLE
                for message in _named_after_calls(self._unsent, self.rollout.conversation):
                    self.rollout.emit(message)  # results the segment ended on
                self._unsent = []

    async def run_tool(self, tool: Any, call: ToolCall) -> ToolMessage:
        """One of the rollout's tools, called by the framework (trio side). Its result
        is recorded from the next model request, which carries it as the framework
        sends it back (with the framework's own tools' results), or, when the segment
        ends without one (a run that ends on a tool, a timeout), as the tool returned
        it, as the ``tools`` harness records it."""
        message: ToolMessage = await tool.call(call)
        self._unsent.append(message)
        return message

    def close(self) -> None:
        """The rollout closed: every later request answers 409 ``rollout_closed``."""
        if self._calls is not None:
            self._calls.cancel_scope.cancel()
        self.state = GateState.CLOSED

    async def call(self, raw: bytes) -> tuple[int, Json]:
        """One chat-completions request: (HTTP status, JSON body)."""
        if self._calls is None or self.rollout is None:
            self.refused += 1
            await trio.lowlevel.checkpoint()
            return _CLOSED if self.state is GateState.CLOSED else _IDLE
        rollout = self.rollout
        self._unsent = []  # the request carries them: recorded from it
        try:
            messages, tools, sampling = _parse(raw, rollout)
        except (ValueError, TypeError, KeyError) as exc:
            await trio.lowlevel.checkpoint()
            return _error(400, "invalid_request_error", f"malformed request: {exc}")
        done = trio.Event()
        answer: list[tuple[int, Json]] = []
        self._calls.start_soon(self._compute, rollout, messages, tools, sampling, answer, done)
        await done.wait()
        return answer[0]

    async def _compute(
        self,
        rollout: Rollout,
        messages: list[Message],
        tools: list[Json],
        sampling: Json,
        answer: list[tuple[int, Json]],
        done: trio.Event,
    ) -> None:
        """The model call, in the segment's nursery; its outcome goes to ``answer``."""
        try:
            if self._answered:  # the framework ran its tools since the last answer
                for message in _trailing_tool_messages(messages):
                    rollout.emit(message)
            try:
                response = await rollout.complete(messages, tools=tools, sampling=sampling)
            except RolloutStopped as exc:
                self.failure = exc
                reason = f"the rollout was stopped ({exc.stop_condition}); do not call again"
                answer.append(_error(400, "rollout_stopped", reason, exc.stop_condition))
                return
            except ModelEndpointError as exc:
                self.failure = exc
                answer.append(_error(424, "upstream_error", f"the model endpoint failed: {exc}"))
                return
            except trio.Cancelled:
                answer.append(_CLOSED if self.state is GateState.CLOSED else _ENDED)
                raise
            self._answered += 1
            rollout.emit(response.message)
            answer.append((200, completion_json(response, rollout.boundary.model)))
        finally:
            done.set()


def _parse(raw: bytes, rollout: Rollout) -> tuple[list[Message], list[Json], Json]:
    """The messages, tools and sampling overrides of a chat-completions body (the
    request's own options the agent's sampling does not already set)."""
    body = json.loads(raw)
    messages = messages_from_wire(body["messages"])
    if not messages:
        raise ValueError("'messages' must hold at least one message")
    tools = list(body.get("tools") or [])
    sampling = {k: v for k, v in body.items() if k not in _NOT_SAMPLING}
    if sampling.get("max_tokens") is None and "max_completion_tokens" in sampling:
        sampling["max_tokens"] = sampling["max_completion_tokens"]
    own = rollout.boundary.sampling
    return messages, tools, {k: v for k, v in sampling.items() if k not in own}


def _trailing_tool_messages(messages: list[Message]) -> list[ToolMessage]:
    """The tool results after the request's last assistant message, each named after
    the call it answers (a framework need not send the name)."""
    tail: list[ToolMessage] = []
    names: dict[str, str] = {}
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            names = {call.id: call.name for call in message.tool_calls or ()}
            break
        if not isinstance(message, ToolMessage):
            return []
        tail.append(message)
    return [
        m if m.name else ToolMessage(m.tool_call_id, m.content, names.get(m.tool_call_id))
        for m in reversed(tail)
    ]


def _named_after_calls(
    results: list[ToolMessage], conversation: list[Message]
) -> list[ToolMessage]:
    """``results``, each without a call id (a framework that does not hand it to its
    tool) given the id of the last answer's call to a tool of its name, in order."""
    last = next((m for m in reversed(conversation) if isinstance(m, AssistantMessage)), None)
    ids: dict[str, list[str]] = {}
    for call in (last.tool_calls if last is not None else None) or ():
        ids.setdefault(call.name, []).append(call.id)
    named = []
    for m in results:
        pending = ids.get(m.name or "", [])
        if m.tool_call_id:
            if m.tool_call_id in pending:
                pending.remove(m.tool_call_id)
            named.append(m)
        else:
            named.append(ToolMessage(pending.pop(0) if pending else "", m.content, m.name))
    return named


def completion_json(response: ModelResponse, model: str) -> Json:
    """The chat-completions body for ``response`` (vLLM's token fields when it has them)."""
    usage = response.usage
    choice: Json = {
        "index": 0,
        "message": to_wire(response.message),
        "logprobs": None,
        "finish_reason": response.finish_reason or "stop",
    }
    body: Json = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }
    if response.token_ids is not None:
        choice["token_ids"] = response.token_ids
    if response.prompt_token_ids is not None:
        body["prompt_token_ids"] = response.prompt_token_ids
    return body


async def on_trio(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` on trio, from the asyncio side of the running trio-asyncio
    loop (named explicitly: the framework's tasks need not carry trio-asyncio's
    ``current_loop`` in their context)."""
    import trio_asyncio

    loop = asyncio.get_running_loop()
    result: T = await trio_asyncio.trio_as_aio(fn, loop=loop)(*args)
    return result


class GateTransport(httpx2.AsyncBaseTransport):
    """The framework client's transport (asyncio side): every request goes to ``gate``
    on trio; nothing is sent over a network."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raw = await request.aread()
        if not request.url.path.endswith("/chat/completions"):
            status, body = _error(404, "invalid_request_error", f"no route {request.url.path}")
        else:
            status, body = await on_trio(self.gate.call, raw)
        return httpx2.Response(status, json=body, request=request)
