"""A wire dialect: how one HTTP API (chat completions, Responses, Anthropic Messages)
is translated at the edge into the wire-neutral ``ModelRequest`` and back.

The interception server and the built-in model server hold no dialect knowledge:
they authenticate with ``secret``, parse with ``parse`` (``BadRequest`` -> 400),
run the one model call, and answer with ``answer`` or ``error``. Everything a
dialect cannot express in a ``ModelRequest`` is dropped deliberately (each dialect's
module lists what) or refused with a 400 naming it.
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
from taketurns._models.model import ModelRequest, ModelResponse

__all__ = [
    "Dialect",
    "Failure",
    "Parsed",
    "bearer",
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
    """One HTTP API. Stateless: one instance serves every request."""

    name: ClassVar[str]
    # how a client should send its key, for the 401 message
    auth_hint: ClassVar[str] = "'Authorization: Bearer <key>'"
    # the status a refused (stopped) turn answers with: one the dialect's clients
    # neither retry nor fall back from, so the agent ends its turn at once
    stopped_status: ClassVar[int] = 400

    def secret(self, headers: Mapping[str, str]) -> str | None:
        """The API key the request carries, or None."""
        return bearer(headers)

    @abc.abstractmethod
    def parse(self, raw: str | bytes, default_model: str) -> Parsed:
        """The request in ``raw``; raises ``BadRequest`` (or ``ValueError`` from the
        message converters) naming the problem."""

    @abc.abstractmethod
    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        """The HTTP answer (JSON, or SSE when ``parsed.stream``) for ``response``."""

    @abc.abstractmethod
    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        """The HTTP answer for ``failure``; ``parsed`` is None when the body was not
        (or could not be) read."""


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
