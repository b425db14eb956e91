"""Real loopback HTTP servers for tests (a helper module, not a conftest).

``serve_app`` runs any quart-trio app on hypercorn's trio worker on 127.0.0.1, port 0.
``start_scripted`` runs a misbehaving chat-completions endpoint that answers each
request with the next scripted ``Answer`` and records what it ``seen``.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from functools import partial
from typing import Any

import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config
from quart import Response, request
from quart_trio import QuartTrio

OK_BODY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello there"},
            "finish_reason": "stop",
            "logprobs": {
                "content": [
                    {"token": "hello", "logprob": -0.25, "top_logprobs": []},
                    {"token": " there", "logprob": -1.5, "top_logprobs": []},
                ]
            },
            "token_ids": [101, 102],
        }
    ],
    "prompt_token_ids": [1, 2, 3],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


@attrs.frozen
class Answer:
    """One scripted reply: ``body`` is JSON-encoded unless it is ``bytes``; the reply
    is sent after sleeping ``delay`` seconds."""

    status: int = 200
    body: Any = attrs.field(factory=lambda: OK_BODY)
    headers: dict[str, str] = attrs.field(factory=dict)
    delay: float = 0.0


@attrs.frozen
class Seen:
    headers: dict[str, str]
    body: Any


@attrs.define
class ScriptedEndpoint:
    base_url: str
    answers: deque[Answer]
    seen: list[Seen] = attrs.field(factory=list)

    def retry_headers(self) -> list[str | None]:
        return [s.headers.get("x-stainless-retry-count") for s in self.seen]


def _config() -> Config:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.1
    config.errorlog = logging.getLogger("tests.httpservers")
    config.accesslog = None
    return config


async def serve_app(app: QuartTrio, *, task_status: trio.TaskStatus[str]) -> None:
    """Serve ``app`` until cancelled; reports ``"http://127.0.0.1:<port>"``."""
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn.trio.serve, app, _config()))
        task_status.started(binds[0])


def scripted_app(endpoint: ScriptedEndpoint) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        raw = await request.get_data(as_text=False)
        headers = {k.lower(): v for k, v in request.headers.items()}
        endpoint.seen.append(Seen(headers, json.loads(raw)))
        answer = endpoint.answers.popleft() if len(endpoint.answers) > 1 else endpoint.answers[0]
        await trio.sleep(answer.delay)
        body = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body)
        return Response(
            body, status=answer.status, headers=answer.headers, mimetype="application/json"
        )

    return app


async def start_scripted(nursery: trio.Nursery, *answers: Answer) -> ScriptedEndpoint:
    """Start an endpoint answering with ``answers`` in order (the last one repeats)."""
    endpoint = ScriptedEndpoint("", deque(answers or [Answer()]))
    root = await nursery.start(serve_app, scripted_app(endpoint))
    endpoint.base_url = f"{root}/v1"
    return endpoint
