"""The chat loop both reference programs run: call the model; when it asks for tools
and a tool URL was given, run them there and call again; stop at a plain reply.

Exit codes: 0 done; 3 the rollout was stopped by a limit (terminal, not a failure);
1 anything else (the error is printed on stderr).
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


def run(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], tool_url: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """Run the loop on ``messages``; returns (new messages, stopped)."""
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    key = os.environ.get("OPENAI_API_KEY", "")
    model = os.environ.get("OPENAI_MODEL", "agent")
    new: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx2.Client(
        headers=headers, timeout=float(os.environ.get("TAKETURNS_TIMEOUT", "600"))
    ) as client:
        while True:
            body: dict[str, Any] = {"model": model, "messages": messages + new}
            if tools:
                body["tools"] = tools
            try:
                answer = _post(client, f"{base}/chat/completions", body)
            except Stopped:
                return new, True
            message = answer["choices"][0]["message"]
            message = {k: v for k, v in message.items() if v is not None or k == "content"}
            new.append(message)
            calls = message.get("tool_calls") or []
            if not calls or not tool_url:
                return new, False
            for call in calls:
                fn = call["function"]
                result = _post(
                    client,
                    tool_url,
                    {"id": call["id"], "name": fn["name"], "arguments": fn.get("arguments", "{}")},
                )
                new.append(result)


def finish(output: Path, new: list[dict[str, Any]], stopped: bool) -> None:
    output.write_text(json.dumps({"messages": new}), encoding="utf-8")
    if stopped:
        print("the rollout was stopped by the engine", file=sys.stderr)
        sys.exit(STOPPED)
