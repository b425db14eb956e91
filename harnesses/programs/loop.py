"""The chat loop both reference programs run: call the model; when it asks for tools
and a tool URL was given, run them there and call again; stop at a plain reply.

The model endpoint is an ``Endpoint``: in a one-segment run from ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``OPENAI_MODEL``; in a serving program from each prompt line
(``Endpoint.of(prompt)``), since one program serves many rollouts in turn. The key goes as a
header on each request, so one HTTP client (``client()``) keeps its connections warm
across segments and rollouts.

Standard library only (``http.client``), and importing nothing of ``taketurns``: the
harnesses start these programs by path with ``python -S`` (``programs.command``), so a
program per segment starts in a few tens of milliseconds, not the quarter of a second
the package and an HTTP library's imports take.

Exit codes of a one-segment run (``finish``): 0 done; 3 the rollout was stopped by a
limit (terminal, not a failure); 1 anything else (the error is printed on stderr). A
serving program answers ``answer(...)`` per segment instead.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

STOPPED = 3
STOPPED_NOTE = "the rollout was stopped by the engine"
RETRIES = 3


class Stopped(Exception):
    """The server refused the call: the rollout is over."""


class Endpoint(NamedTuple):
    """Where the model is: base URL, bearer key, model name."""

    base_url: str
    api_key: str
    model: str

    @classmethod
    def of(cls, prompt: dict[str, Any] | None = None) -> Endpoint:
        """From a prompt line's ``base_url``, ``api_key`` and ``model``; what it
        leaves out (all of it, for None) from ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``
        and ``OPENAI_MODEL``."""
        line = prompt or {}
        return cls(
            line.get("base_url") or os.environ["OPENAI_BASE_URL"],
            line.get("api_key") or os.environ.get("OPENAI_API_KEY", ""),
            line.get("model") or os.environ.get("OPENAI_MODEL", "agent"),
        )


class TransportError(Exception):
    """The request got no HTTP answer (refused, reset, timed out, cut short)."""


class HTTPStatusError(Exception):
    """The server answered with an error status no retry can change."""


class Response(NamedTuple):
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """HTTP/1.1 POSTs of JSON over one kept-alive connection per origin, re-made when
    the server closed it while idle (a pooled program waits between lines). Use as a
    context manager; ``close`` closes every connection."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._connections: dict[tuple[str, str, int | None], http.client.HTTPConnection] = {}

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _connection(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        key = (scheme, host, port)
        connection = self._connections.get(key)
        idle = connection.sock if connection is not None else None
        # readable while idle: the server closed it (or sent what nobody asked for)
        if connection is not None and idle is not None and select.select([idle], [], [], 0)[0]:
            connection.close()
        if connection is None:
            kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = self._connections[key] = kind(host, port, timeout=self.timeout)
        return connection

    def post(self, url: str, body: Any, headers: dict[str, str]) -> Response:
        """POST ``body`` as JSON; the answer, whatever its status. Raises
        ``TransportError`` when there is none (the connection is then dropped)."""
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection = self._connection(parts.scheme, parts.hostname or "", parts.port)
        data = json.dumps(body).encode()
        try:
            connection.request("POST", path, data, {**headers, "Content-Type": "application/json"})
            response = connection.getresponse()
            answer = Response(response.status, response.read())
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise TransportError(f"POST {url}: {exc!r}") from exc
        if response.will_close:
            connection.close()
        return answer


def _post(client: Client, url: str, body: dict[str, Any], key: str) -> dict[str, Any]:
    """POST with the bearer ``key`` and the OpenAI SDK's retry convention
    (``x-stainless-retry-count``)."""
    for attempt in range(RETRIES + 1):
        headers = {"Authorization": f"Bearer {key}"}
        if attempt:
            headers["x-stainless-retry-count"] = str(attempt)
        try:
            response = client.post(url, body, headers)
        except TransportError:
            if attempt == RETRIES:
                raise
            time.sleep(0.2 * 2**attempt)
            continue
        if response.status == 400 and _error_type(response) == "rollout_stopped":
            raise Stopped(response.json()["error"].get("code"))
        retryable = response.status in (408, 409, 429) or response.status >= 500
        if retryable and attempt < RETRIES:
            time.sleep(0.2 * 2**attempt)
            continue
        if response.status >= 400:
            text = response.body[:2000].decode("utf-8", "replace")
            raise HTTPStatusError(f"POST {url} answered {response.status}: {text}")
        return response.json()
    raise AssertionError("unreachable")


def _error_type(response: Response) -> str | None:
    try:
        return response.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


def client() -> Client:
    """An HTTP client for the model calls (the key goes on each request)."""
    return Client(timeout=float(os.environ.get("TAKETURNS_TIMEOUT", "600")))


def run(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_url: str | None,
    http: Client | None = None,
    endpoint: Endpoint | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Run the loop on ``messages`` against ``endpoint`` (None: the environment's) with
    ``http`` (None: a client for this call only); returns (new messages, stopped)."""
    if http is None:
        with client() as http:
            return run(messages, tools, tool_url, http, endpoint)
    base, key, model = endpoint if endpoint is not None else Endpoint.of()
    base = base.rstrip("/")
    new: list[dict[str, Any]] = []
    while True:
        body: dict[str, Any] = {"model": model, "messages": messages + new}
        if tools:
            body["tools"] = tools
        try:
            completion = _post(http, f"{base}/chat/completions", body, key)
        except Stopped:
            return new, True
        message = completion["choices"][0]["message"]
        message = {k: v for k, v in message.items() if v is not None or k == "content"}
        new.append(message)
        calls = message.get("tool_calls") or []
        if not calls or not tool_url:
            return new, False
        for call in calls:
            fn = call["function"]
            result = _post(
                http,
                tool_url,
                {"id": call["id"], "name": fn["name"], "arguments": fn.get("arguments", "{}")},
                key,
            )
            new.append(result)


def answer(new: list[dict[str, Any]], stopped: bool) -> dict[str, Any]:
    """What a segment hands back: its new messages (and ``stopped`` when it was)."""
    return {"messages": new, "stopped": True} if stopped else {"messages": new}


def finish(output: Path, new: list[dict[str, Any]], stopped: bool) -> None:
    """End a one-segment run: the output file, then exit 3 if it was stopped."""
    output.write_text(json.dumps({"messages": new}), encoding="utf-8")
    if stopped:
        print(STOPPED_NOTE, file=sys.stderr)
        sys.exit(STOPPED)
