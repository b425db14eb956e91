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

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import hypercorn.trio
import trio
from quart import request
from quart_trio import QuartTrio

from taketurns._http.chat_completions import answer_http_errors, hypercorn_config
from taketurns._http.dialect import Dialect, Failure, Parsed
from taketurns._http.dialects import served_dialects
from taketurns._models.builtin import BuiltinModel

__all__ = ["create_app", "serve"]

log = logging.getLogger(__name__)


def create_app(model: BuiltinModel, names: Sequence[str] | None = None) -> QuartTrio:
    """An ASGI app serving ``model`` in every registered dialect, at each dialect's
    ``paths`` (``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/messages``,
    ``/v1beta/models/<model>:generateContent``, ...) and ``count_paths``, plus ``GET
    /v1/models`` and ``GET /health``. Malformed requests get HTTP 400 with the
    dialect's error body naming the problem. ``names``: the model names answered
    (``builtin/<policy>`` and the policy's own name always; ``/v1/models`` lists
    ``builtin/<policy>`` then ``names``); a request naming another is refused with 404
    ``model_not_found``, as a real endpoint does, so a wrong ``--model`` fails the
    eval's preflight. None: any name is answered."""
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = None  # the model's latency is the model's business
    served = f"builtin/{model.policy}"
    listed = [served, *(names or ())]
    accepted = None if names is None else {served, model.policy, *names}

    for dialect in served_dialects():
        _route(app, model, served, dialect, accepted)

    @app.get("/v1/models")
    async def models() -> Any:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "taketurns"}
            for name in listed
        ]
        return {"object": "list", "data": data}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok", "model": served}

    answer_http_errors(app, lambda exc: f"{exc.name}: {request.method} {request.path}")
    return app


def _route(
    app: QuartTrio,
    model: BuiltinModel,
    served: str,
    dialect: Dialect,
    accepted: set[str] | None,
) -> None:
    async def read() -> Any:
        route = {**request.args, **(request.view_args or {})}
        try:
            parsed = dialect.parse(await request.get_data(as_text=False), served, route)
        except ValueError as exc:  # BadRequest, or a malformed message from the converters
            return dialect.error(Failure(400, "invalid_request_error", str(exc)))
        name = parsed.request.model
        if accepted is not None and name not in accepted:
            known = ", ".join(sorted(accepted))
            message = f"the model {name!r} does not exist here; this server serves {known}"
            return dialect.error(
                Failure(404, "invalid_request_error", message, "model_not_found"), parsed
            )
        return parsed

    async def turn(**_: str) -> Any:
        parsed = await read()
        if not isinstance(parsed, Parsed):
            return parsed
        return dialect.answer(await model.complete(parsed.request), parsed)

    async def count(**_: str) -> Any:
        parsed = await read()
        return dialect.count_tokens(parsed) if isinstance(parsed, Parsed) else parsed

    for path in dialect.paths:
        app.add_url_rule(f"/{path}", f"{dialect.name}-{path}", turn, methods=["POST"])
    for path in dialect.count_paths:
        app.add_url_rule(f"/{path}", f"{dialect.name}-count-{path}", count, methods=["POST"])


async def serve(
    model: BuiltinModel,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    graceful_timeout: float = 0.5,
    access_log: bool = False,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    names: Sequence[str] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``model`` over HTTP until cancelled, or until ``shutdown_trigger`` returns
    (then shut down gracefully, waiting at most ``graceful_timeout`` seconds for open
    connections). ``port=0`` binds an ephemeral port. Once listening, reports the base
    URL (``"http://127.0.0.1:54321/v1"``) via ``task_status.started``; use it as
    ``base_url = await nursery.start(serve, model)``. Raises ``OSError`` from
    ``nursery.start`` if the address cannot be bound. ``names``: as ``create_app``."""
    config = hypercorn_config(host, port, graceful_timeout, access_log, log)
    trigger = shutdown_trigger or trio.sleep_forever
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(
                hypercorn.trio.serve, create_app(model, names), config, shutdown_trigger=trigger
            )
        )
        task_status.started(f"{binds[0]}/v1")
