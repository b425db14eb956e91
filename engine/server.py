"""The built-in model as an OpenAI-compatible HTTP server (hypercorn + quart-trio).

``create_app(model)`` is the ASGI app; ``serve(model)`` runs it on hypercorn's trio
worker and reports its base URL through ``task_status``::

    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(serve, model)   # "http://127.0.0.1:54321/v1"
        ...
        nursery.cancel_scope.cancel()                   # stops the server

Each request awaits ``model.complete``, so the model's latency is real time and
concurrent requests overlap.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import hypercorn.trio
import trio
from hypercorn.config import Config
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from engine.builtin import BuiltinModel
from engine.messages import text_of
from engine.model import ModelRequest, ModelResponse
from engine.wire import messages_from_wire, to_wire, tool_calls_to_wire

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)

Json = dict[str, Any]

# Request fields that are not sampling arguments.
_NOT_SAMPLING = frozenset({"model", "messages", "tools", "stream", "stream_options"})


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400; the message names the problem."""


def _error(message: str, status: int, kind: str = "invalid_request_error") -> Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _parse_request(raw: str | bytes, model: BuiltinModel) -> tuple[ModelRequest, Json]:
    """The ``ModelRequest`` in a chat-completions body, plus the body itself."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if "messages" not in body:
        raise BadRequest("'messages' is required: a list of chat message objects")
    messages = messages_from_wire(body["messages"])
    if not messages:
        raise BadRequest("'messages' must hold at least one message")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("'tools' must be a list of tool objects")
    name = body.get("model", f"builtin/{model.policy}")
    if not isinstance(name, str):
        raise BadRequest("'model' must be a string")
    sampling = {k: v for k, v in body.items() if k not in _NOT_SAMPLING}
    if sampling.get("max_tokens") is None and "max_completion_tokens" in sampling:
        sampling["max_tokens"] = sampling["max_completion_tokens"]
    for key in ("max_tokens", "seed"):
        value = sampling.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise BadRequest(f"{key!r} must be an integer (got {value!r})")
    return ModelRequest(name, tuple(messages), tuple(tools), sampling), body


def _usage(response: ModelResponse) -> Json:
    usage = response.usage
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def completion_json(response: ModelResponse, model: str, id_: str, created: int) -> Json:
    return {
        "id": id_,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": to_wire(response.message),
                "logprobs": None,
                "finish_reason": response.finish_reason,
            }
        ],
        "usage": _usage(response),
    }


def _chunks(response: ModelResponse, include_usage: bool) -> list[Json]:
    """The ``choices`` deltas (and usage) of a streamed completion, in order."""
    message = response.message
    deltas: list[Json] = [{"role": "assistant", "content": ""}]
    words = text_of(message.content).split(" ") if message.content else []
    deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
    if message.tool_calls:
        calls = tool_calls_to_wire(message.tool_calls)
        deltas.append({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
    out: list[Json] = [
        {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": response.finish_reason}]})
    if include_usage:
        out.append({"choices": [], "usage": _usage(response)})
    return out


async def _sse(
    response: ModelResponse, model: str, id_: str, created: int, include_usage: bool
) -> AsyncIterator[bytes]:
    head = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model}
    for chunk in _chunks(response, include_usage):
        yield f"data: {json.dumps(head | chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def create_app(model: BuiltinModel) -> QuartTrio:
    """An ASGI app serving ``model``: ``POST /v1/chat/completions`` (and
    ``/chat/completions``), ``GET /v1/models``, ``GET /health``. Malformed requests get
    HTTP 400 with an OpenAI-style error body naming the problem."""
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = None  # the model's latency is the model's business
    served = f"builtin/{model.policy}"

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions() -> Any:
        try:
            req, body = _parse_request(await request.get_data(as_text=False), model)
        except ValueError as exc:  # BadRequest, or a malformed message from engine.wire
            return _error(str(exc), 400)
        response = await model.complete(req)
        id_, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.get("stream"):
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            stream = _sse(response, req.model, id_, created, include_usage)
            headers = {"Cache-Control": "no-cache"}
            return Response(stream, mimetype="text/event-stream", headers=headers)
        return completion_json(response, req.model, id_, created)

    @app.get("/v1/models")
    async def models() -> Any:
        entry = {"id": served, "object": "model", "created": 0, "owned_by": "taketurns"}
        return {"object": "list", "data": [entry]}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "model": served}

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        kind = "invalid_request_error" if code < 500 else "server_error"
        return _error(f"{exc.name}: {request.method} {request.path}", code, kind)

    return app


def _config(host: str, port: int, graceful_timeout: float, access_log: bool) -> Config:
    config = Config()
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bracketed}:{port}"]
    config.graceful_timeout = graceful_timeout
    # Loggers, not "-": hypercorn would otherwise replace handlers on its global loggers.
    config.errorlog = log
    config.accesslog = logging.getLogger(f"{__name__}.access") if access_log else None
    return config


async def serve(
    model: BuiltinModel,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    graceful_timeout: float = 0.5,
    access_log: bool = False,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``model`` over HTTP until cancelled, or until ``shutdown_trigger`` returns
    (then shut down gracefully, waiting at most ``graceful_timeout`` seconds for open
    connections). ``port=0`` binds an ephemeral port. Once listening, reports the base
    URL (``"http://127.0.0.1:54321/v1"``) via ``task_status.started``; use it as
    ``base_url = await nursery.start(serve, model)``. Raises ``OSError`` from
    ``nursery.start`` if the address cannot be bound."""
    config = _config(host, port, graceful_timeout, access_log)
    trigger = shutdown_trigger or trio.sleep_forever
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(hypercorn.trio.serve, create_app(model), config, shutdown_trigger=trigger)
        )
        task_status.started(f"{binds[0]}/v1")
