"""``OpenAIClient``: any OpenAI-compatible chat-completions endpoint over httpx2.

One ``complete()`` is one ``POST {base_url}/chat/completions``, retried with jittered
exponential backoff on 429, 408, 5xx, connection errors and timeouts. An endpoint
that refuses the ``seed`` field (a 400 whose error names it) gets the request again at
once without it, and every later one without it; the client notes that once
(``notes()``, the run summary's ``notes``) and the response says the field was
``dropped`` (the turn records no seed). Every failure
that reaches the caller is a ``ModelEndpointError`` whose message says what happened and
what to do next; httpx2's own exceptions never escape.

Token-level data for training is kept on each response when the server returns it.
vLLM's OpenAI server does when asked (put these in ``sampling.extra`` or
``sampling.logprobs``): ``logprobs: true`` gives ``choices[0].logprobs.content[*]``
(a logprob per completion token); ``return_token_ids: true`` (vLLM >= 0.10.2) gives
``choices[0].token_ids`` and the top-level ``prompt_token_ids``; with only logprobs,
``return_tokens_as_token_ids: true`` writes each logprob's token as ``token_id:N``,
which is read back as the completion's ids. The answering ``model`` is kept as the
turn's ``policy_version``. A server that returns no ids (llama-cpp-python's) gets
them from ``tokens``, the model's own tokenizer and chat template
(``taketurns._models.gguf``).
"""

from __future__ import annotations

import email.utils
import enum
import logging
import os
import random
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import httpx2
import orjson
import trio

from taketurns._errors import ConfigError, ModelEndpointError
from taketurns._models.messages import AssistantMessage, UserMessage
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse, Usage
from taketurns._models.wire import from_wire, messages_to_wire

if TYPE_CHECKING:
    from taketurns._models.gguf import GgufTokens

__all__ = ["RETRY_COUNT_HEADER", "OpenAIClient"]

log = logging.getLogger(__name__)

#: Sent on every retry (value >= 1), as the OpenAI SDK does, so that a server in the
#: middle (the interception server) can recognise and coalesce retried requests.
RETRY_COUNT_HEADER = "x-stainless-retry-count"

_RETRYABLE_STATUS = frozenset({408, 429})
# how OpenAI, vLLM, SGLang and llama.cpp's servers say a request exceeds the context
_CONTEXT = re.compile(r"context length|context window|context_length_exceeded", re.IGNORECASE)
# a 400 naming the seed field: the endpoint refuses it (sent again without it)
_SEED_FIELD = re.compile(r"\bseed\b", re.IGNORECASE)
_SEED = frozenset({"seed"})
_CONNECTIONS_PER_POOL = 128
_SNIPPET = 300
_JSON = {"Content-Type": "application/json"}


class ClientState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class _Failure(ModelEndpointError):
    """One attempt's failure, with the wait the server asked for (``Retry-After``)
    and whether it is a 400 naming the ``seed`` field (an endpoint that refuses it)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        wait: float | None,
        names_seed: bool = False,
    ):
        super().__init__(message, status=status, retryable=retryable)
        self.wait = wait
        self.names_seed = names_seed


class OpenAIClient(ModelClient):
    """Calls an OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, OpenRouter, ...).

    ``base_url`` is the API root, e.g. ``http://localhost:8000/v1``. The API key is
    ``api_key``, else the environment variable named by ``api_key_var``; with neither, no
    ``Authorization`` header is sent. ``timeout`` bounds each attempt as a whole, from
    waiting for a pooled connection to the answer's last byte. A failed attempt is
    retried up to ``retries`` times; the wait before retry ``n`` (from 1) is a server's
    ``Retry-After`` when given, else ``backoff * 2**(n-1)`` less up to 25% jitter; every
    wait is capped at ``max_backoff``. The connection pool holds ``concurrency``
    connections; more concurrent calls queue for one (and count toward ``timeout``).
    ``tokens``: the model's tokenizer, for a server that returns no token ids.
    ``text_parts``: ``"join"`` sends a content made only of text parts as one string,
    the parts joined by newlines (as vLLM renders them for a template that takes
    strings), for servers that refuse parts in some roles (llama-cpp-python: system
    and assistant), and a null content (a tool call's) as ``""``; ``"keep"``
    (default) sends them as they are.

    Raises ``ConfigError`` at construction for a bad ``base_url`` or limits.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_var: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        concurrency: int = 64,
        transport: httpx2.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        tokens: GgufTokens | None = None,
        text_parts: str = "keep",
    ) -> None:
        _check_config(base_url, timeout, retries, backoff, max_backoff, concurrency)
        if text_parts not in ("keep", "join"):
            raise ConfigError(f"text_parts: {text_parts!r} must be 'keep' or 'join'")
        self.base_url = base_url.rstrip("/")
        self.api_key_var = api_key_var
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._url = f"{self.base_url}/chat/completions"
        # parsed once: httpx2 parses a string URL and merges per-request headers on
        # every request (together more than half of building one)
        self._target = httpx2.URL(self._url)
        key = api_key if api_key is not None else (os.environ.get(api_key_var or "") or None)
        all_headers = {**_JSON, **(headers or {})}
        if key:
            all_headers["Authorization"] = f"Bearer {key}"
        self._has_key = bool(key)
        # httpx2's pool does work in proportion to its open connections on every
        # request: past ~100 connections, several smaller pools used in turn cost far
        # less CPU than one big one (measured in benchmarks/bench_scale.py).
        shards = max(1, -(-concurrency // _CONNECTIONS_PER_POOL))
        size = -(-concurrency // shards)
        self._pools = [
            httpx2.AsyncClient(
                headers=all_headers,
                timeout=httpx2.Timeout(timeout, pool=timeout),
                limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size),
                transport=transport,
            )
            for _ in range(shards)
        ]
        self._turn = 0
        self._sends_seed = True  # until the endpoint refuses the field
        self._notes: list[str] = []
        self._jitter = random.Random()  # private: the process's global RNG is left alone
        self.tokens = tokens
        self._join_text = text_parts == "join"
        self.state = ClientState.OPEN

    def __repr__(self) -> str:  # never shows the key
        key = "set" if self._has_key else "unset"
        return f"OpenAIClient({self.base_url!r}, api_key={key}, state={self.state.value})"

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent; a checkpoint."""
        if self.state is ClientState.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        self.state = ClientState.CLOSED
        for pool in self._pools:
            await pool.aclose()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request``, retrying as the class docstring says. A checkpoint.

        Raises ``ModelEndpointError`` (``status`` = the last HTTP status or None,
        ``retryable`` = whether the last failure was of a retryable kind) when the
        endpoint fails for good, answers with a malformed body, or the client is closed.
        Cancellation propagates untouched.
        """
        if self.state is ClientState.CLOSED:
            await trio.lowlevel.checkpoint()
            raise ModelEndpointError(
                "this OpenAIClient is closed; make a new one for more calls", retryable=False
            )
        fields = _request_fields(request, join_text=self._join_text)
        if self.tokens is not None and request.tools:
            # llama-cpp-python's function-calling formats render tools only when asked
            # to choose; "auto" is what OpenAI's API means when it is not sent
            fields.setdefault("tool_choice", "auto")
        dropped = self._drop_refused(fields)
        body = orjson.dumps(fields)
        attempt = 0
        while True:
            try:
                response, pieces = await self._attempt(body, attempt)
                if dropped:
                    response = attrs.evolve(response, dropped=dropped)
                if self.tokens is None:
                    return response
                return self.tokens.annotate(response, fields, pieces)
            except _Failure as failure:
                if failure.names_seed and "seed" in fields:
                    self._refuses_seed()
                    dropped = self._drop_refused(fields)
                    body = orjson.dumps(fields)
                    continue  # at once, without it: not a retry
                if not failure.retryable or attempt >= self.retries:
                    _give_up(failure, attempt)
                delay = self._delay(attempt + 1, failure.wait)
                log.debug("%s; retry %d in %.2fs", failure, attempt + 1, delay)
            await trio.sleep(delay)
            attempt += 1

    async def preflight(self, model: str) -> None:
        """One tiny call (``max_tokens=1``) before an eval starts, so that a wrong base
        URL, key or model name becomes one clear ``ConfigError`` instead of a failed
        trace per episode. A checkpoint."""
        request = ModelRequest(model, (UserMessage("Say OK."),), (), {"max_tokens": 1})
        try:
            await self.complete(request)
        except ModelEndpointError as exc:
            raise ConfigError(
                f"preflight: model {model!r} at {self.base_url} did not answer: {exc}"
            ) from None

    async def models(self) -> list[str]:
        """The ids the server lists at ``GET {base_url}/models`` (one attempt, no
        retries: a caller bounds it in time). Raises ``ModelEndpointError`` saying
        why when the server cannot be reached or answers otherwise than a model list."""
        url = f"{self.base_url}/models"
        try:
            response = await self._pools[0].get(url)
        except httpx2.HTTPError as exc:
            raise ModelEndpointError(
                f"could not reach {url} ({type(exc).__name__}: {exc})", retryable=True
            ) from exc
        if response.status_code != 200:
            raise ModelEndpointError(
                f"{url} answered HTTP {response.status_code}: {_error_detail(response)}",
                status=response.status_code,
                retryable=False,
            )
        try:
            data = orjson.loads(response.content)
            return [str(entry["id"]) for entry in data["data"]]
        except (ValueError, TypeError, KeyError):
            raise ModelEndpointError(
                f"{url} answered HTTP 200 without a model list ({_snip(response.text)!r})",
                status=200,
                retryable=False,
            ) from None

    def notes(self) -> list[str]:
        return list(self._notes)

    def _drop_refused(self, fields: dict[str, Any]) -> frozenset[str]:
        """Take the fields this endpoint refuses out of ``fields``; which were there."""
        if self._sends_seed or "seed" not in fields:
            return frozenset()
        del fields["seed"]
        return _SEED

    def _refuses_seed(self) -> None:
        """The endpoint answered a request with a 400 naming ``seed``: from now on its
        requests go without it, noted once (the summary's ``notes``, the log)."""
        if not self._sends_seed:
            return
        self._sends_seed = False
        note = (
            f"{self.base_url} refuses the 'seed' request field (HTTP 400 naming it): its "
            "model calls are sent without a seed (their turns record seed null), so its "
            "sampling does not follow --seed"
        )
        self._notes.append(note)
        log.warning(note)

    def _delay(self, retry: int, wait: float | None) -> float:
        if wait is None:  # jitter: when to retry, never what is asked or answered
            wait = self.backoff * 2 ** (retry - 1) * (1 - 0.25 * self._jitter.random())
        return max(0.0, min(wait, self.max_backoff))

    async def _attempt(self, body: bytes, attempt: int) -> tuple[ModelResponse, list[str] | None]:
        """One attempt, bounded as a whole by ``timeout``: waiting for a connection,
        connecting, sending and reading the answer to its last byte (httpx2's own
        timeouts bound each step only, so a server trickling bytes never trips them).
        Also the completion tokens' texts when ``tokens`` wants them."""
        headers = {RETRY_COUNT_HEADER: str(attempt)} if attempt else None
        try:
            self._turn = (self._turn + 1) % len(self._pools)
            pool = self._pools[self._turn]
            with trio.move_on_after(self.timeout) as scope:
                response = await pool.post(self._target, content=body, headers=headers)
        except httpx2.HTTPError as exc:
            raise self._transport_failure(exc) from exc
        if scope.cancelled_caught:
            raise self._transport_failure(httpx2.TimeoutException("the whole request"))
        if response.status_code != 200:
            raise self._status_failure(response)
        return _parse_response(response, self._url, pieces=self.tokens is not None)

    def _transport_failure(self, exc: httpx2.HTTPError) -> _Failure:
        """No HTTP answer: a timeout, a cut-off answer, an unreachable server (all
        retryable) or anything else httpx2 refused (not)."""
        url, kind = self._url, type(exc).__name__
        if isinstance(exc, httpx2.TimeoutException):
            message = (
                f"{url} did not answer within the {self.timeout:g}s timeout ({kind}); "
                "raise it (--request-timeout S, request_timeout_s in a config) or check the "
                "server's load"
            )
        elif isinstance(exc, httpx2.RemoteProtocolError):  # reached, but cut off
            message = (
                f"the connection to {url} broke before a complete answer arrived "
                f"({kind}: {exc}); check the server's logs and its load"
            )
        elif isinstance(exc, httpx2.NetworkError):
            message = (
                f"could not reach {url} ({kind}: {exc}); "
                "check --base-url and that the server is running"
            )
        else:
            message = f"request to {url} failed ({kind}: {exc}); check --base-url"
            return _Failure(message, status=None, retryable=False, wait=None)
        return _Failure(message, status=None, retryable=True, wait=None)

    def _status_failure(self, response: httpx2.Response) -> _Failure:
        status = response.status_code
        detail = _error_detail(response)
        retryable = status in _RETRYABLE_STATUS or status >= 500
        if status in (401, 403):
            where = f"${self.api_key_var}" if self.api_key_var else "api_key"
            hint = f"check the API key in {where}"
            if not self._has_key:
                hint = f"no API key was sent; set {where}"
        elif status == 404:
            hint = "check --base-url and --model"
        elif status == 429:
            hint = "the endpoint is rate-limiting; lower the concurrency or raise --request-retries"
        elif retryable:
            hint = "the server failed; check its logs, or raise --request-retries"
        elif _CONTEXT.search(detail):
            hint = (
                "the prompt and max_tokens do not fit the model's context window: give the "
                "server a longer context (llamacpp/ models: --model-server-args='--n_ctx "
                "8192'; vLLM: --max-model-len), lower --sampling.max_tokens, cap the "
                "conversation (limits.max_input_tokens), or give the harness shorter "
                "instructions"
            )
        else:
            hint = "the endpoint refused the request; check the sampling args and --model"
        return _Failure(
            f"{self._url} answered HTTP {status}: {detail}; {hint}",
            status=status,
            retryable=retryable,
            wait=_retry_after(response) if retryable else None,
            names_seed=status == 400 and _SEED_FIELD.search(detail) is not None,
        )


def _check_config(
    base_url: str,
    timeout: float,
    retries: int,
    backoff: float,
    max_backoff: float,
    concurrency: int,
) -> None:
    problems = []
    try:
        url = httpx2.URL(base_url)
        ok_url = url.scheme in ("http", "https") and bool(url.host)
    except httpx2.InvalidURL:
        ok_url = False
    if not ok_url:
        problems.append(f"base_url: {base_url!r} is not an http(s) URL such as http://host:8000/v1")
    if not timeout > 0:
        problems.append(f"timeout: {timeout!r} must be a positive number of seconds")
    if retries < 0:
        problems.append(f"retries: {retries!r} must be 0 or more")
    if backoff < 0 or max_backoff < 0:
        problems.append(f"backoff: {backoff!r} and max_backoff: {max_backoff!r} must be >= 0")
    if concurrency < 1:
        problems.append(f"concurrency: {concurrency!r} must be at least 1")
    if problems:
        raise ConfigError(problems)


def _give_up(failure: _Failure, attempt: int) -> NoReturn:
    message = str(failure)
    if attempt:
        message += f" (gave up after {attempt} {'retry' if attempt == 1 else 'retries'})"
    raise ModelEndpointError(
        message, status=failure.status, retryable=failure.retryable
    ) from failure.__cause__


def _request_fields(request: ModelRequest, *, join_text: bool = False) -> dict[str, Any]:
    """The JSON body's fields, encoded once (orjson: several times faster than the
    standard library's encoder httpx would use) for every attempt."""
    body: dict[str, Any] = dict(request.sampling)
    body["model"] = request.model
    body["messages"] = messages_to_wire(request.messages)
    if join_text:
        for message in body["messages"]:
            content = message.get("content")
            if isinstance(content, list) and all(p.get("type") == "text" for p in content):
                message["content"] = "\n".join(p["text"] for p in content)
            elif content is None and "content" in message:
                message["content"] = ""  # a tool call's: llama-cpp-python refuses null
    if request.tools:
        body["tools"] = [dict(t) for t in request.tools]
    return body


def _retry_after(response: httpx2.Response) -> float | None:
    """``Retry-After`` in seconds (a number, or an HTTP date), else None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(response: httpx2.Response) -> str:
    """The server's own error message (OpenAI ``{"error": {"message": ...}}``), or a
    snippet of the body."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return _snip(message)
        if isinstance(data.get("message"), str):
            return _snip(data["message"])
    text = response.text.strip()
    return _snip(text) if text else response.reason_phrase or "(empty body)"


def _snip(text: str) -> str:
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _malformed(url: str, problem: str) -> ModelEndpointError:
    return ModelEndpointError(
        f"{url} answered HTTP 200 with a malformed body: {problem}; "
        "check that --base-url points at an OpenAI-compatible chat-completions API",
        status=200,
        retryable=False,
    )


def _parse_response(
    response: httpx2.Response, url: str, *, pieces: bool = False
) -> tuple[ModelResponse, list[str] | None]:
    """The response, and (asked for ``pieces``) its completion tokens' texts
    (``logprobs.content[*].token``) when given."""
    try:
        data = orjson.loads(response.content)
    except ValueError:
        raise _malformed(url, f"not JSON ({_snip(response.text.strip())!r})") from None
    if not isinstance(data, dict):
        raise _malformed(url, "the JSON is not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed(url, "no choices")
    choice = choices[0]
    try:
        message = from_wire(choice.get("message"), "choices[0].message")
    except ValueError as exc:
        raise _malformed(url, str(exc)) from None
    if not isinstance(message, AssistantMessage):
        raise _malformed(url, f"choices[0].message has role {message.role!r}, not assistant")
    finish = choice.get("finish_reason")
    model = data.get("model")
    parsed = ModelResponse(
        message,
        _usage(data.get("usage")),
        finish if isinstance(finish, str) else None,
        token_ids=_ints(choice.get("token_ids")) or _logprob_token_ids(choice.get("logprobs")),
        prompt_token_ids=_ints(data.get("prompt_token_ids", choice.get("prompt_token_ids"))),
        logprobs=_logprobs(choice.get("logprobs")),
        policy_version=model if isinstance(model, str) and model else None,
    )
    return parsed, _pieces(choice.get("logprobs")) if pieces else None


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


def _ints(raw: Any) -> list[int] | None:
    if isinstance(raw, list) and all(isinstance(t, int) for t in raw):
        return raw
    return None


def _logprobs(raw: Any) -> list[float] | None:
    """``choices[0].logprobs.content[*].logprob`` (OpenAI / vLLM shape)."""
    content = raw.get("content") if isinstance(raw, dict) else None
    if not isinstance(content, list):
        return None
    out: list[float] = []
    for entry in content:
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(value, int | float):
            return None
        out.append(float(value))
    return out


def _pieces(raw: Any) -> list[str] | None:
    """``logprobs.content[*].token``: each completion token's text."""
    content = raw.get("content") if isinstance(raw, dict) else None
    if not isinstance(content, list):
        return None
    out = [entry.get("token") if isinstance(entry, dict) else None for entry in content]
    return out if all(isinstance(t, str) for t in out) else None  # type: ignore[return-value]


def _logprob_token_ids(raw: Any) -> list[int] | None:
    """Completion ids from ``logprobs.content[*].token`` when the server wrote them as
    ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``), else None."""
    content = raw.get("content") if isinstance(raw, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out: list[int] = []
    for entry in content:
        token = entry.get("token") if isinstance(entry, dict) else None
        if not isinstance(token, str) or not token.startswith("token_id:"):
            return None
        try:
            out.append(int(token.removeprefix("token_id:")))
        except ValueError:
            return None
    return out
