"""The OpenAI chat-completions HTTP face shared by the built-in model server and the
interception server: request parsing (400s that name the problem), response and SSE
bodies, OpenAI-style error bodies, and the hypercorn config both servers use."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any

from hypercorn.config import Config
from quart import Response

from taketurns._errors import BadRequest
from taketurns._http.dialect import (
    Dialect,
    Failure,
    Parsed,
    load_object,
    sse_response,
    words,
)
from taketurns._models.messages import text_of
from taketurns._models.model import ModelRequest, ModelResponse
from taketurns._models.wire import messages_from_wire, to_wire, tool_calls_to_wire

__all__ = [
    "BadRequest",
    "ChatCompletions",
    "closing",
    "completion_json",
    "error_response",
    "hypercorn_config",
    "parse_chat_body",
    "sse_stream",
]

Json = dict[str, Any]
_EMPTY: Mapping[str, str] = MappingProxyType({})

# Request fields that are not sampling arguments.
_NOT_SAMPLING = frozenset({"model", "messages", "tools", "stream", "stream_options"})


def error_response(
    message: str, status: int, kind: str = "invalid_request_error", code: str | None = None
) -> Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Response(json.dumps(body), status=status, mimetype="application/json")


def closing(response: Response) -> Response:
    """``response`` with the connection closed after it: for a refusal sent without
    reading the request body (an unknown path, an unauthenticated request). On a
    kept-alive connection whose last body went unread, hypercorn's trio worker can
    leave the client's next request unanswered."""
    response.headers["Connection"] = "close"
    return response


def answer_http_errors(app: Any, describe: Callable[[Any], str]) -> None:
    """Answer every HTTP-level error of ``app`` (404, 405, 413, ...) with an
    OpenAI-style body, closing the connection; ``describe(exc)`` words the message."""
    from werkzeug.exceptions import HTTPException

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        kind = "invalid_request_error" if code < 500 else "server_error"
        return closing(error_response(describe(exc), code, kind))


def parse_chat_body(raw: str | bytes, default_model: str) -> tuple[ModelRequest, Json]:
    """The ``ModelRequest`` in a chat-completions body, plus the body itself."""
    body = load_object(raw)
    if "messages" not in body:
        raise BadRequest("'messages' is required: a list of chat message objects")
    messages = messages_from_wire(body["messages"])
    if not messages:
        raise BadRequest("'messages' must hold at least one message")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise BadRequest("'tools' must be a list of tool objects")
    for i, tool in enumerate(tools):
        fn = tool.get("function", {})
        if not isinstance(fn, dict) or not isinstance(fn.get("name", ""), str):
            raise BadRequest(f"'tools[{i}].function' must be an object with a string 'name'")
    name = body.get("model", default_model)
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
    """The JSON body; a response carrying token data gets vLLM's fields for it
    (``choices[0].token_ids``, ``choices[0].logprobs.content``, ``prompt_token_ids``)."""
    choice: Json = {
        "index": 0,
        "message": to_wire(response.message),
        "logprobs": None,
        "finish_reason": response.finish_reason,
    }
    body: Json = {
        "id": id_,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": _usage(response),
    }
    if response.token_ids is not None:
        choice["token_ids"] = response.token_ids
        if response.logprobs is not None:
            pairs = zip(response.token_ids, response.logprobs, strict=False)
            choice["logprobs"] = {
                "content": [{"token": f"token_id:{t}", "logprob": lp} for t, lp in pairs]
            }
    if response.prompt_token_ids is not None:
        body["prompt_token_ids"] = response.prompt_token_ids
    return body


def _chunks(response: ModelResponse, include_usage: bool) -> list[Json]:
    """The ``choices`` deltas (and usage) of a streamed completion, in order."""
    message = response.message
    deltas: list[Json] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": w} for w in words(text_of(message.content))]
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


async def sse_stream(
    response: ModelResponse, model: str, id_: str, created: int, include_usage: bool
) -> AsyncIterator[bytes]:
    head = {"id": id_, "object": "chat.completion.chunk", "created": created, "model": model}
    for chunk in _chunks(response, include_usage):
        yield f"data: {json.dumps(head | chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def hypercorn_config(
    host: str, port: int, graceful_timeout: float, access_log: bool, log: logging.Logger
) -> Config:
    config = Config()
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    config.bind = [f"{bracketed}:{port}"]
    config.graceful_timeout = graceful_timeout
    # a thousand clients may connect at once: hypercorn's default backlog (100) makes
    # the kernel drop and reset connections
    config.backlog = 2048
    # Loggers, not "-": hypercorn would otherwise replace handlers on its global loggers.
    config.errorlog = log
    config.accesslog = logging.getLogger(f"{__name__}.access") if access_log else None
    return config


class ChatCompletions(Dialect):
    """``POST /v1/chat/completions``: OpenAI chat completions, JSON and SSE."""

    name = "chat_completions"
    paths = ("v1/chat/completions", "chat/completions")

    def parse(
        self, raw: str | bytes, default_model: str, route: Mapping[str, str] = _EMPTY
    ) -> Parsed:
        request, body = parse_chat_body(raw, default_model)
        options = body.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return Parsed(request, bool(body.get("stream")), {"include_usage": usage})

    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        id_, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        model = parsed.request.model
        if parsed.stream:
            usage = bool(parsed.options.get("include_usage"))
            return sse_response(sse_stream(response, model, id_, created, usage))
        body = completion_json(response, model, id_, created)
        return Response(json.dumps(body), mimetype="application/json")

    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        return error_response(failure.message, failure.status, failure.kind, failure.code)
