"""The chat loop both reference programs run: call the model; when it asks for tools
and a tool URL was given, run them there and call again; stop at a plain reply.

Exit codes of a one-segment run (``finish``): 0 done; 3 the rollout was stopped by a
limit (terminal, not a failure); 1 anything else (the error is printed on stderr). A
serving program answers ``answer(...)`` per segment instead, and keeps one HTTP
client (``client()``) across them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

STOPPED = 3
STOPPED_NOTE = "the rollout was stopped by the engine"
RETRIES = 3


class Stopped(Exception):
    """The server refused the call: the rollout is over."""


def _post(client: httpx2.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST with the OpenAI SDK's retry convention (``x-stainless-retry-count``)."""
    for attempt in range(RETRIES + 1):
        headers = {"x-stainless-retry-count": str(attempt)} if attempt else {}
        try:
            response = client.post(url, json=body, headers=headers)
        except httpx2.TransportError:
            if attempt == RETRIES:
                raise
            time.sleep(0.2 * 2**attempt)
            continue
        if response.status_code == 400 and _error_type(response) == "rollout_stopped":
            raise Stopped(response.json()["error"].get("code"))
        retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
        if retryable and attempt < RETRIES:
            time.sleep(0.2 * 2**attempt)
            continue
        response.raise_for_status()
        return response.json()
    raise AssertionError("unreachable")


def _error_type(response: httpx2.Response) -> str | None:
    try:
        return response.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


def client() -> httpx2.Client:
    """An HTTP client for the model at ``OPENAI_BASE_URL`` (with ``OPENAI_API_KEY``)."""
    key = os.environ.get("OPENAI_API_KEY", "")
    return httpx2.Client(
        headers={"Authorization": f"Bearer {key}"},
        timeout=float(os.environ.get("TAKETURNS_TIMEOUT", "600")),
    )


def run(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_url: str | None,
    http: httpx2.Client | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Run the loop on ``messages`` with ``http`` (None: a client for this call
    only); returns (new messages, stopped)."""
    if http is None:
        with client() as http:
            return run(messages, tools, tool_url, http)
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    model = os.environ.get("OPENAI_MODEL", "agent")
    new: list[dict[str, Any]] = []
    while True:
        body: dict[str, Any] = {"model": model, "messages": messages + new}
        if tools:
            body["tools"] = tools
        try:
            completion = _post(http, f"{base}/chat/completions", body)
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
