"""The interception server: the model boundary's HTTP face for out-of-process programs.

A program run by a harness talks to "the model" at ``OPENAI_BASE_URL`` with
``OPENAI_API_KEY`` (or ``ANTHROPIC_BASE_URL`` / ``GOOGLE_GEMINI_BASE_URL`` = the
rollout URL without ``/v1``); all point here. Every registered dialect is served
(``taketurns._http.dialects``; this module names none), each at its own ``paths``
and translated at the edge into the same wire-neutral request
(``taketurns._http.dialect``): ``POST .../v1/chat/completions``, ``.../v1/responses``
(OpenAI Responses), ``.../v1/messages`` (Anthropic Messages; ``?beta=true`` accepted,
the key as ``x-api-key`` or bearer), ``.../v1beta/models/<model>:generateContent``
and ``:streamGenerateContent`` (Gemini), and whatever a third-party dialect
registers. A dialect's ``count_paths`` (``.../v1/messages/count_tokens``) answer
an estimate, never a turn. ``HEAD /`` and ``HEAD /rollouts/<id>`` answer 200.
Every rollout gets its own base URL (``.../rollouts/<id>/v1``) and bearer secret,
and every request goes through that rollout's ``ModelBoundary`` (limits, ``@stop``,
recording), so one request = one recorded turn exactly as for in-process harnesses.

The gate: a rollout's endpoint is open only while one of its segments runs
(``open_segment``, which ``ServedHarness`` enters around every segment). Its state
is one ``EndpointState``: ``IDLE`` (registered, no segment running), ``OPEN`` (a
segment runs) or ``CLOSED`` (the rollout closed). Between segments and after close
every request of the rollout (model call, token count, tool call) answers 409 with
a one-line reason in the dialect's error shape (``type`` ``rollout_idle`` or
``rollout_closed``) and nothing is recorded: a process a segment left behind cannot
add turns or spend the rollout's limits. The model calls of a segment run in a
nursery the segment owns: when the segment ends (however it ends) its calls still
in flight are cancelled and answered 409, and the segment's end waits for them, so
no turn is recorded after it.

Refusals, none of which reaches a trace: no or unknown secret 401; another
rollout's secret on a rollout's URL 401; a rollout between segments or closed 409;
malformed body 400 naming the problem; body over ``max_body_bytes`` 413. A refusal
made before the body was read (401, 409, unknown paths) closes the connection. A 409
is final: it carries ``x-should-retry: false``, which OpenAI's and Anthropic's SDKs
honour (they retry a bare 409). A closed rollout's secret is remembered (answered
409, not 401) for the last ``remember_closed`` rollouts closed: a long trainer's
memory of them is bounded.

Retries: a request marked as a retry (``x-stainless-retry-count`` > 0) with the same
body as an earlier request of the same rollout waits for that request if it is in
flight, or gets its recorded answer: never a duplicate turn. The model call runs in
the segment's nursery, not the request handler, so an original whose client gave up
still finishes (within its segment) and answers its retry. An unmarked identical
request is a new turn.

A program's tool loop runs the rollout's Python tools at
``POST .../rollouts/<id>/v1/tools/call`` (``{"id", "name", "arguments"}`` in, an
OpenAI tool message out); bad arguments, an unknown tool or a failing tool answer 200
with an ``Error: ...`` tool message for the model, as the in-process ``tools`` harness
does.

A call refused by a limit or hook answers 400 with ``type: rollout_stopped`` and the
stop condition as ``code`` (terminal for OpenAI SDKs; Anthropic Messages answers 403,
which Claude Code neither retries nor re-sends with fewer beta features). Upstream
failures answer 502 when retrying makes sense, else 424 (a streamed Responses request:
``response.failed``); either is already recorded on the trace. Error bodies take the
dialect's shape.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import hypercorn.trio
import trio
from quart import Response, request
from quart_trio import QuartTrio

from taketurns._errors import ModelEndpointError, RolloutStopped
from taketurns._exchange.harness import Rollout
from taketurns._exchange.holding import HOLDING
from taketurns._exchange.tools import as_tools
from taketurns._http.chat_completions import (
    ChatCompletions,
    answer_http_errors,
    closing,
    error_response,
    hypercorn_config,
)
from taketurns._http.dialect import Dialect, Failure
from taketurns._http.dialects import served_dialects
from taketurns._models.messages import ToolCall, ToolMessage
from taketurns._models.model import ModelRequest, ModelResponse
from taketurns._procs import journal

__all__ = ["Endpoint", "EndpointState", "InterceptionServer", "open_interception_server"]

log = logging.getLogger(__name__)

RETRY_HEADER = "x-stainless-retry-count"
# the tool-call route (a program's tool loop) speaks chat completions' shapes
_TOOLS_DIALECT = ChatCompletions()
_SOCKET_DIR_MAX = 90


@attrs.frozen(repr=False)
class Endpoint:
    """What a program needs to reach the model for one rollout. ``secret`` is the
    bearer token; it is deliberately left out of ``repr``."""

    rollout_id: str
    base_url: str
    secret: str

    def __repr__(self) -> str:
        return f"Endpoint(rollout_id={self.rollout_id!r}, base_url={self.base_url!r})"


@attrs.define(eq=False)
class _Call:
    done: trio.Event = attrs.field(factory=trio.Event)
    response: ModelResponse | None = None
    failure: Failure | None = None


@attrs.define(eq=False)
class _Calls:
    """A running segment's model calls: tasks of the segment's own nursery
    (``open_segment``), each in a cancel scope of its own, so ending the segment
    cancels its calls and not the segment's body. A call that starts once its
    segment is no longer the registration's cancels itself (``_compute``)."""

    nursery: trio.Nursery
    scopes: set[trio.CancelScope] = attrs.field(factory=set)

    def cancel(self) -> None:
        for scope in self.scopes:
            scope.cancel()


class EndpointState(enum.Enum):
    """Where a rollout's endpoint is in its life (the module docstring's gate)."""

    IDLE = "idle"  # registered, no segment running: requests answer 409
    OPEN = "open"  # one of its segments runs: model calls are taken
    CLOSED = "closed"  # the rollout closed: its secret answers 409 for good


@attrs.define(eq=False)
class _Registration:
    endpoint: Endpoint
    rollout: Rollout
    final_failures: bool = False  # answer every upstream failure as not worth retrying
    calls: dict[bytes, _Call] = attrs.field(factory=dict)
    state: EndpointState = EndpointState.IDLE
    # the running segment's model calls: set exactly while ``OPEN``
    segment: _Calls | None = None
    # the sessions the running segment's turn holds (``holding``): a served tool runs
    # with them held, so its call back into its own session is refused, as in process
    holding: tuple[object, ...] = ()

    def refusal(self) -> Failure | None:
        """Why a request of this rollout is refused now, or None while a segment runs."""
        if self.state is EndpointState.OPEN:
            return None
        return _CLOSED if self.state is EndpointState.CLOSED else _IDLE

    def open(self, segment: _Calls) -> None:
        if self.state is not EndpointState.IDLE:
            raise RuntimeError(f"a segment of a rollout whose endpoint is {self.state.value}")
        self.state, self.segment = EndpointState.OPEN, segment

    def end(self, state: EndpointState) -> None:
        """Leave ``OPEN`` (for ``IDLE`` or ``CLOSED``); calls in flight are cancelled."""
        if self.segment is not None:
            self.segment.cancel()
        if self.state is not EndpointState.CLOSED:
            self.state = state
        self.segment = None


_CLOSED = Failure(409, "rollout_closed", "this rollout is closed; its key no longer works")
_IDLE = Failure(
    409,
    "rollout_idle",
    "no segment of this rollout is running; its endpoint is open only during the agent's turn",
)
_SEGMENT_ENDED = Failure(409, "rollout_idle", "the rollout's segment ended during this call")


def _stopped(condition: str, status: int) -> Failure:
    message = (
        f"the rollout was stopped ({condition}); do not call the model again, "
        "finish with what you have"
    )
    return Failure(status, "rollout_stopped", message, condition)


def _unauthorized(message: str) -> Failure:
    return Failure(401, "authentication_error", message)


class InterceptionServer:
    """Start with ``open_interception_server()`` (or ``nursery.start(server.run)``).
    ``journal_dir``: the run directory whose temp journal names the socket directory
    (``taketurns._procs.journal``: swept if the eval is SIGKILLed).
    ``register`` / ``unregister`` are synchronous and may be called from any task of
    the same trio run."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        public_url: str | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        graceful_timeout: float = 0.5,
        remember_closed: int = 65_536,
        journal_dir: str | None = None,
    ) -> None:
        self.host = host
        self.journal_dir = journal_dir  # a run directory: its socket dir is journaled
        self.port = port
        self.public_url = public_url
        self.max_body_bytes = max_body_bytes
        self.graceful_timeout = graceful_timeout
        self.url = ""  # "http://127.0.0.1:PORT" once running
        # the same server on a Unix socket (in a private directory), once running:
        # sandboxed programs reach it through this, bind-mounted into their sandbox
        self.unix_path: str | None = None
        self._by_secret: dict[str, _Registration] = {}
        self._by_id: dict[str, _Registration] = {}
        # digests of the last ``remember_closed`` closed rollouts' secrets, oldest first
        self.remember_closed = remember_closed
        self._closed: dict[str, None] = {}
        self._nursery: trio.Nursery | None = None

    # -- rollouts -------------------------------------------------------------------

    def register(self, rollout: Rollout, *, final_failures: bool = False) -> Endpoint:
        """A fresh endpoint (URL + secret) for ``rollout``. ``final_failures``: the
        rollout's client re-sends failed requests unmarked and cannot be told not to
        (opencode), so an upstream failure (already retried by the model client) is
        answered 424 with no status in its message, which such clients do not retry."""
        if self._nursery is None:
            raise RuntimeError("the interception server is not running")
        rollout_id = uuid.uuid4().hex[:16]
        root = self.public_url or self.url
        endpoint = Endpoint(
            rollout_id, f"{root}/rollouts/{rollout_id}/v1", secrets.token_urlsafe(24)
        )
        registration = _Registration(endpoint, rollout, final_failures=final_failures)
        self._by_secret[endpoint.secret] = registration
        self._by_id[rollout_id] = registration
        return endpoint

    def state(self, endpoint: Endpoint) -> EndpointState:
        """Where ``endpoint``'s rollout is: ``IDLE``, ``OPEN`` or ``CLOSED``."""
        registration = self._by_id.get(endpoint.rollout_id)
        return EndpointState.CLOSED if registration is None else registration.state

    @asynccontextmanager
    async def open_segment(self, endpoint: Endpoint) -> AsyncGenerator[None]:
        """Open ``endpoint`` for the body of the ``async with`` (one segment of its
        rollout): its model calls run in a nursery owned here, and when the body ends,
        however it ends, the endpoint is idle again (409) and the calls still in
        flight are cancelled and waited for. Refuses a closed rollout, or a second
        segment of a rollout whose segment runs, with ``RuntimeError``."""
        registration = self._by_id.get(endpoint.rollout_id)
        if registration is None:
            raise RuntimeError("this rollout's endpoint is closed: it has no more segments")
        try:
            async with trio.open_nursery() as nursery:
                registration.open(_Calls(nursery))
                registration.holding = HOLDING.get()
                try:
                    yield
                finally:
                    registration.end(EndpointState.IDLE)
        except BaseExceptionGroup as group:
            # the calls never raise (their errors are answers), so a lone exception is
            # the segment's own: it leaves as itself, as if no nursery were here
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def cancel_inflight(self, endpoint: Endpoint) -> None:
        """Close ``endpoint`` before its segment ends (its program is gone): requests
        answer 409 from now on and model calls still in flight are cancelled."""
        registration = self._by_id.get(endpoint.rollout_id)
        if registration is not None:
            registration.end(EndpointState.IDLE)

    def unregister(self, endpoint: Endpoint) -> None:
        """Close the rollout's endpoint for good: its secret is refused (409) from now on."""
        registration = self._by_id.pop(endpoint.rollout_id, None)
        if registration is not None:
            registration.end(EndpointState.CLOSED)
        if self._by_secret.pop(endpoint.secret, None) is not None:
            self._closed[_digest(endpoint.secret)] = None
            while len(self._closed) > self.remember_closed:
                del self._closed[next(iter(self._closed))]  # the oldest is forgotten

    def _authenticate(self, rollout_id: str | None, dialect: Dialect) -> _Registration | Response:
        secret = dialect.secret(request.headers, request.args)  # type: ignore[arg-type]  # a Headers mapping
        if secret is None:
            hint = f"no API key: send the rollout's secret as {dialect.auth_hint}"
            return dialect.error(_unauthorized(hint))
        registration = self._by_secret.get(secret)
        if registration is None:
            if _digest(secret) in self._closed:
                return dialect.error(_CLOSED)
            return dialect.error(_unauthorized("unknown API key"))
        if rollout_id is not None and rollout_id != registration.endpoint.rollout_id:
            return dialect.error(_unauthorized("this key belongs to another rollout"))
        refusal = registration.refusal()
        if refusal is not None:
            return dialect.error(refusal)
        return registration

    # -- requests -------------------------------------------------------------------

    async def _compute(
        self,
        registration: _Registration,
        calls: _Calls,
        req: ModelRequest,
        dialect: Dialect,
        call: _Call,
    ) -> None:
        """One model call, in the segment's nursery (``open_segment``), cancelled when
        the segment ends (``_Calls``)."""
        overrides = {
            k: v for k, v in req.sampling.items() if k not in registration.rollout.boundary.sampling
        }
        try:
            with trio.CancelScope() as scope:
                calls.scopes.add(scope)
                if registration.segment is not calls:  # it ended before this started
                    scope.cancel()
                try:
                    call.response = await registration.rollout.complete(
                        req.messages, tools=req.tools, sampling=overrides
                    )
                except RolloutStopped as exc:
                    call.failure = _stopped(exc.stop_condition, dialect.stopped_status)
                except ModelEndpointError as exc:
                    status = 502 if exc.retryable and not registration.final_failures else 424
                    message = f"the model endpoint failed: {exc}"
                    if registration.final_failures:
                        message = "the model endpoint failed (recorded on the trace); do not retry"
                    call.failure = Failure(status, "upstream_error", message)
                except trio.Cancelled:  # the segment ended: its calls end with it
                    closed = registration.state is EndpointState.CLOSED
                    call.failure = _CLOSED if closed else _SEGMENT_ENDED
                    raise
                finally:
                    calls.scopes.discard(scope)
        except Exception as exc:  # a bug: answer 500, keep the server up
            log.exception("interception server: model call failed")
            call.failure = Failure(500, "server_error", f"internal error: {type(exc).__name__}")
        finally:
            call.done.set()

    async def _turn(self, rollout_id: str | None, dialect: Dialect) -> Any:
        """One model call in ``dialect``: authenticate, parse, compute (or join the
        call a marked retry repeats), answer."""
        registration = self._authenticate(rollout_id, dialect)
        if isinstance(registration, Response):
            return closing(registration)
        raw = await request.get_data(as_text=False)
        try:
            parsed = dialect.parse(raw, registration.rollout.boundary.model, _route_args())
        except ValueError as exc:
            return dialect.error(Failure(400, "invalid_request_error", str(exc)))
        # one key per (dialect, body): a marked retry joins the call it repeats
        digest = hashlib.blake2b(_bytes(raw), digest_size=16, person=dialect.name.encode()[:16])
        key = digest.digest()
        retry = _is_retry(request.headers.get(RETRY_HEADER))
        call = registration.calls.get(key) if retry else None
        if call is None or (call.done.is_set() and call.response is None):
            if registration.segment is None:  # the segment ended while the body arrived
                return dialect.error(registration.refusal() or _IDLE, parsed)
            call = _Call()
            registration.calls[key] = call
            calls = registration.segment
            calls.nursery.start_soon(
                self._compute, registration, calls, parsed.request, dialect, call
            )
        await call.done.wait()
        if call.response is None:
            assert call.failure is not None
            return dialect.error(call.failure, parsed)
        return dialect.answer(call.response, parsed)

    async def _count_tokens(self, rollout_id: str | None, dialect: Dialect) -> Any:
        """A dialect's token count: an estimate, never a model call or a turn."""
        registration = self._authenticate(rollout_id, dialect)
        if isinstance(registration, Response):
            return closing(registration)
        try:
            parsed = dialect.parse(await request.get_data(as_text=False), "", _route_args())
        except ValueError as exc:
            return dialect.error(Failure(400, "invalid_request_error", str(exc)))
        return dialect.count_tokens(parsed)

    async def _tool(self, rollout_id: str) -> Any:
        """Run one of the rollout's Python tools for a program's tool loop."""
        registration = self._authenticate(rollout_id, _TOOLS_DIALECT)
        if isinstance(registration, Response):
            return closing(registration)
        try:
            body = json.loads(await request.get_data(as_text=False))
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return error_response('expected {"name": ..., "arguments": "{...}"}', 400)
        refusal = registration.refusal()
        if refusal is not None:  # the segment ended while the body arrived
            return _TOOLS_DIALECT.error(refusal)
        tools = as_tools(registration.rollout.tools)
        tool = tools.get(body["name"])
        arguments = body.get("arguments", "{}")
        if not isinstance(arguments, str):  # an object instead of its JSON text
            arguments = json.dumps(arguments)
        call = ToolCall(str(body.get("id", "")), body["name"], arguments)
        if tool is None:  # the model's mistake: it goes back to the model, as in `tools`
            known = ", ".join(tools) or "none"
            text = f"Error: no tool named {call.name!r}; tools: {known}"
            message = ToolMessage(call.id, text, call.name)
        else:
            held = HOLDING.set(registration.holding)  # as if called from the segment
            try:
                message = await tool.call(call)
            finally:
                HOLDING.reset(held)
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "name": message.name,
            "content": message.content,
        }

    def _app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        app.config["RESPONSE_TIMEOUT"] = None
        app.config["MAX_CONTENT_LENGTH"] = self.max_body_bytes

        for dialect in served_dialects():
            for path in dialect.paths:
                _route(app, dialect, path, self._turn)
            for path in dialect.count_paths:
                _route(app, dialect, path, self._count_tokens)

        @app.route("/", methods=["GET", "HEAD"])
        @app.route("/rollouts/<rollout_id>", methods=["GET", "HEAD"])
        @app.route("/rollouts/<rollout_id>/", methods=["GET", "HEAD"])
        async def root(rollout_id: str | None = None) -> Any:
            # Claude Code probes its base URL with HEAD before the first request
            return {"status": "ok"}

        @app.post("/rollouts/<rollout_id>/v1/tools/call")
        async def tool(rollout_id: str) -> Any:
            return await self._tool(rollout_id)

        @app.get("/health")
        async def health() -> Any:
            return {"status": "ok"}

        @app.after_request
        async def final(response: Response) -> Response:
            if response.status_code == 409:  # a refusal no retry can change
                response.headers["x-should-retry"] = "false"
            return response

        answer_http_errors(app, lambda exc: f"{exc.name}: {exc.description}")
        return app

    async def run(
        self, *, task_status: trio.TaskStatus[InterceptionServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; reports itself once listening."""
        config = hypercorn_config(self.host, self.port, self.graceful_timeout, False, log)
        socket_dir = tempfile.mkdtemp(prefix="interception-")  # 0700: this user only
        if len(socket_dir) > _SOCKET_DIR_MAX:  # a Unix socket's path has 108 bytes
            os.rmdir(socket_dir)
            socket_dir = tempfile.mkdtemp(prefix="interception-", dir="/tmp")
        journal.record(self.journal_dir, socket_dir)  # swept after a SIGKILL
        config.bind.append(f"unix:{socket_dir}/model.sock")
        try:
            async with trio.open_nursery() as nursery:
                binds: list[str] = await nursery.start(
                    partial(
                        hypercorn.trio.serve,
                        self._app(),
                        config,
                        shutdown_trigger=trio.sleep_forever,
                    )
                )
                self.url = binds[0]
                self.unix_path = f"{socket_dir}/model.sock"
                # connectable by a sandbox's own uid (the eval runs as root, the
                # sandbox as nobody: taketurns._procs.sandbox); the directory keeps
                # every other host user out
                os.chmod(self.unix_path, 0o666)
                self._nursery = nursery
                task_status.started(self)
        finally:
            self.unix_path = None
            shutil.rmtree(socket_dir, ignore_errors=True)


def _route(app: QuartTrio, dialect: Dialect, path: str, handle: Any) -> None:
    """``POST /<path>`` (the shared key-routed URL) and ``/rollouts/<id>/<path>``."""

    async def shared(**_: str) -> Any:
        return await handle(None, dialect)

    async def per_rollout(rollout_id: str, **_: str) -> Any:
        return await handle(rollout_id, dialect)

    url = f"/{path}"
    app.add_url_rule(url, f"{dialect.name}-shared-{url}", shared, methods=["POST"])
    url = f"/rollouts/<rollout_id>/{path}"
    app.add_url_rule(url, f"{dialect.name}-rollout-{url}", per_rollout, methods=["POST"])


def _route_args() -> dict[str, str]:
    """The request's query arguments and its URL rule's variables, for ``parse``."""
    args = {**request.args, **(request.view_args or {})}
    args.pop("rollout_id", None)
    return args


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _is_retry(header: str | None) -> bool:
    try:
        return int(header or "0") > 0
    except ValueError:
        return False


def _bytes(raw: str | bytes) -> bytes:
    return raw.encode() if isinstance(raw, str) else raw


@asynccontextmanager
async def open_interception_server(**options: Any) -> AsyncIterator[InterceptionServer]:
    """Run an ``InterceptionServer`` for the body of the ``async with``; stopped on exit."""
    async with trio.open_nursery() as nursery:
        server: InterceptionServer = await nursery.start(partial(InterceptionServer(**options).run))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
