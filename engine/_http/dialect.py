"""A wire dialect: how one HTTP API (chat completions, Responses, Anthropic Messages,
Gemini) is translated at the edge into the wire-neutral ``ModelRequest`` and back.

Dialects register like harnesses: by id, in the entry-point group
``taketurns.dialects`` (or with ``dialect_registry.register(id)``); the servers serve
every registered dialect (``taketurns._http.dialects.served_dialects``) at the URL
rules its ``paths`` name. The interception server and the built-in model server hold
no dialect knowledge: they authenticate with ``secret``, parse with ``parse``
(``BadRequest`` -> 400), run the one model call, and answer with ``answer`` or
``error``. Everything a dialect cannot express in a ``ModelRequest`` is dropped
deliberately (each dialect's module lists what) or refused with a 400 naming it.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import attrs
from quart import Response

from taketurns._errors import BadRequest
from taketurns._models.messages import text_of
from taketurns._models.model import ModelRequest, ModelResponse

__all__ = [
    "Dialect",
    "Failure",
    "Parsed",
    "bearer",
    "estimate_tokens",
    "load_object",
    "sse_event",
    "sse_response",
    "words",
]

Json = dict[str, Any]
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@attrs.frozen
class Parsed:
    """A parsed request: the wire-neutral ``request``, whether the client asked for
    SSE, and what the dialect needs to shape its answer (``options``)."""

    request: ModelRequest
    stream: bool = False
    options: Mapping[str, Any] = _EMPTY


@attrs.frozen
class Failure:
    """A refusal or failure, before a dialect words it: HTTP ``status``, ``kind``
    (``invalid_request_error``, ``authentication_error``, ``rollout_idle``,
    ``rollout_closed``, ``rollout_stopped``, ``upstream_error``, ``server_error``),
    ``message`` and, for a stop, the stop condition as ``code``."""

    status: int
    kind: str
    message: str
    code: str | None = None


def load_object(raw: str | bytes) -> Json:
    """The JSON object in a request body; ``BadRequest`` if it is not one."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise BadRequest(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def bearer(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class Dialect(abc.ABC):
    """One HTTP API. Stateless: one instance serves every request.

    ``paths``: the URL rules (werkzeug syntax, relative to the server's root and to a
    rollout's ``/rollouts/<id>/``) a model call in this dialect is posted to; the
    rule's variables reach ``parse`` as ``route``. ``count_paths``: rules answered by
    ``count_tokens`` (an estimate, never a model call or a turn)."""

    name: ClassVar[str]
    paths: ClassVar[tuple[str, ...]]
    count_paths: ClassVar[tuple[str, ...]] = ()
    # how a client should send its key, for the 401 message
    auth_hint: ClassVar[str] = "'Authorization: Bearer <key>'"
    # the status a refused (stopped) turn answers with: one the dialect's clients
    # neither retry nor fall back from, so the agent ends its turn at once
    stopped_status: ClassVar[int] = 400

    def secret(self, headers: Mapping[str, str], query: Mapping[str, str] = _EMPTY) -> str | None:
        """The API key the request carries (in ``headers``, or its URL's ``query``), or None."""
        return bearer(headers)

    @abc.abstractmethod
    def parse(
        self, raw: str | bytes, default_model: str, route: Mapping[str, str] = _EMPTY
    ) -> Parsed:
        """The request in ``raw`` (``route``: the URL rule's variables and the query's
        arguments); raises ``BadRequest`` (or ``ValueError`` from the message
        converters) naming the problem."""

    @abc.abstractmethod
    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        """The HTTP answer (JSON, or SSE when ``parsed.stream``) for ``response``."""

    @abc.abstractmethod
    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        """The HTTP answer for ``failure``; ``parsed`` is None when the body was not
        (or could not be) read."""

    def count_tokens(self, parsed: Parsed) -> Json:
        """The answer to a ``count_paths`` request: an estimate (this server does not
        know the model's tokenizer). Only dialects with ``count_paths`` override it."""
        raise NotImplementedError(f"dialect {self.name!r} counts no tokens")


def estimate_tokens(request: ModelRequest) -> int:
    """Words per message (as the built-in model counts) plus a share per tool."""
    n = sum(len(text_of(m.content).split()) + 2 for m in request.messages)
    return n + 20 * len(request.tools)


def sse_event(event: str | None, data: Json) -> bytes:
    """One server-sent event (``event:`` line only when ``event`` is given)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def words(text: str) -> list[str]:
    """``text`` cut into streaming deltas: words, each after the first with its space."""
    parts = text.split(" ") if text else []
    return [w if i == 0 else " " + w for i, w in enumerate(parts)]


def sse_response(chunks: Any) -> Response:
    return Response(chunks, mimetype="text/event-stream", headers={"Cache-Control": "no-cache"})
