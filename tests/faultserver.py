"""A chat-completions endpoint that misbehaves on command (a helper module, not a
conftest), on hypercorn + quart-trio at 127.0.0.1:0, real sockets, real clock.

``FaultyEndpoint(decide)`` answers every ``POST /v1/chat/completions`` with the
``Fault`` that ``decide(call)`` picks for it (default: a good echo reply):

- ``ok``: 200 with an OpenAI body echoing the last user text;
- ``status``: that HTTP status (500, 429, ...) with the given headers (``Retry-After``);
- ``malformed``: 200 whose body is not JSON;
- ``truncated``: 200 announcing a ``Content-Length`` larger than what is sent, then the
  connection is closed mid-body;
- ``stall``: sleeps ``delay`` seconds before answering (past the client's timeout);
- ``trickle``: a good answer sent one byte every ``delay`` seconds (no single read
  waits long, the whole answer does).

``stop()`` shuts the server down mid-run: from then on connections are refused.
``in_thread`` runs one in its own thread with its own ``trio.run``, for code that
calls ``trio.run`` itself (``taketurns._cli.main.main``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import attrs
import trio
from httpservers import serve_app
from quart import Response, request
from quart_trio import QuartTrio

log = logging.getLogger("tests.faultserver")

_TASK = re.compile(r"\btask (\d+)\b")


@attrs.frozen
class Fault:
    kind: str = "ok"  # ok | status | malformed | truncated | stall | trickle
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)
    delay: float = 0.0


OK = Fault()


@attrs.frozen
class Call:
    """One request as the endpoint saw it. ``task`` is the ``N`` of the first
    ``task N`` in the conversation (the test envs open with it), else None."""

    n: int
    task: int | None
    attempt: int
    at: float
    body: Any

    @property
    def preflight(self) -> bool:
        return self.body.get("max_tokens") == 1 and self.task is None


def _last_user_text(body: Any) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _task_of(body: Any) -> int | None:
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        found = _TASK.search(content) if isinstance(content, str) else None
        if found:
            return int(found.group(1))
    return None


def completion(text: str) -> dict[str, Any]:
    words = len(text.split())
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": "faulty",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": words, "total_tokens": 3 + words},
    }


class _Cut(Exception):
    """Raised inside a response body: hypercorn closes the connection mid-body."""


async def _truncated(text: str) -> Any:
    yield json.dumps(completion(text)).encode()[:20]
    raise _Cut("cut the body short")


async def _trickled(text: str, every: float) -> Any:
    for byte in json.dumps(completion(text)).encode():
        yield bytes([byte])
        await trio.sleep(every)


class FaultyEndpoint:
    def __init__(self, decide: Callable[[Call], Fault] | None = None) -> None:
        self.decide = decide or (lambda call: OK)
        self.calls: list[Call] = []
        self.injected: dict[str, int] = {}  # fault kind -> how many were served
        self.base_url = ""
        self._scope: trio.CancelScope | None = None

    @property
    def faults(self) -> int:
        return sum(n for kind, n in self.injected.items() if kind != "ok")

    def app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        app.logger.setLevel(logging.CRITICAL)  # the cut bodies are on purpose

        @app.post("/v1/chat/completions")
        async def chat() -> Any:
            body = json.loads(await request.get_data(as_text=False))
            attempt = int(request.headers.get("x-stainless-retry-count", "0"))
            call = Call(len(self.calls), _task_of(body), attempt, trio.current_time(), body)
            self.calls.append(call)
            fault = self.decide(call)
            self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
            text = _last_user_text(body) or "hello"
            if fault.kind == "stall":
                await trio.sleep(fault.delay)
            elif fault.kind == "status":
                error = {"error": {"message": f"injected {fault.status}", "type": "injected"}}
                return Response(
                    json.dumps(error),
                    status=fault.status,
                    headers=dict(fault.headers),
                    mimetype="application/json",
                )
            elif fault.kind == "malformed":
                return Response("{this is not json", status=200, mimetype="application/json")
            elif fault.kind == "trickle":
                return Response(
                    _trickled(text, fault.delay), status=200, mimetype="application/json"
                )
            elif fault.kind == "truncated":
                return Response(
                    _truncated(text),
                    status=200,
                    headers={"Content-Length": "4096"},
                    mimetype="application/json",
                )
            return completion(text)

        return app

    async def run(self, *, task_status: trio.TaskStatus[FaultyEndpoint]) -> None:
        """Serve until cancelled or ``stop()``; reports itself once listening."""
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                root = await nursery.start(serve_app, self.app())
                self.base_url = f"{root}/v1"
                task_status.started(self)

    def stop(self) -> None:
        """Stop serving: the listening socket closes and connections are refused."""
        assert self._scope is not None
        self._scope.cancel()


async def start(nursery: trio.Nursery, decide: Callable[[Call], Fault] | None = None) -> Any:
    endpoint: FaultyEndpoint = await nursery.start(FaultyEndpoint(decide).run)
    return endpoint


@contextlib.contextmanager
def in_thread(endpoint: FaultyEndpoint) -> Iterator[FaultyEndpoint]:
    """Serve ``endpoint`` from a thread of its own for the ``with`` block."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            box["scope"] = nursery.cancel_scope
            await nursery.start(endpoint.run)
            ready.set()

    thread = threading.Thread(target=partial(trio.run, main), daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the faulty endpoint did not start")
    try:
        yield endpoint
    finally:
        trio.from_thread.run_sync(box["scope"].cancel, trio_token=box["token"])
        thread.join(30)
