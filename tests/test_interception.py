"""The interception server over real loopback HTTP (real clock: docs/design.md "Testing", autojump +
sockets gives false timeouts). Each rollout is a real ``Agent(...).chat(task)`` session
whose harness registers it with the server and holds its segment open; the test body
then plays the agent program, calling the rollout's endpoint as a subprocess would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
import trio
from httpservers import Answer, start_scripted
from scripted import ScriptedModel, Sleep, tool_call
from segments import HoldingHarness, held_segment

from taketurns import (
    Agent,
    AgentConfig,
    ChatSession,
    Limits,
    ModelEndpointError,
    Rubric,
    Sampling,
    Task,
    Trace,
    stop,
)
from taketurns.env import ModelClient, ModelRequest, ModelResponse
from taketurns.harness import Endpoint, text_of
from taketurns.http import InterceptionServer, OpenAIClient, open_interception_server

HELLO = {"messages": [{"role": "user", "content": "hello"}]}
RETRY = {"x-stainless-retry-count": "1"}


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running


@pytest.fixture
async def http(server: InterceptionServer) -> AsyncIterator[httpx2.AsyncClient]:
    # depends on `server` so that it closes first (keep-alive delays a graceful stop)
    async with httpx2.AsyncClient(timeout=20) as client:
        yield client


@asynccontextmanager
async def rollout(
    server: InterceptionServer,
    client: ModelClient | None = None,
    *,
    limits: Limits | None = None,
    rubric: Rubric | None = None,
) -> AsyncIterator[tuple[Endpoint, ChatSession]]:
    """An open session registered with ``server``, its first segment running for the
    body of the ``async with``: (its endpoint, the session)."""
    agent = Agent(
        "agent",
        AgentConfig(model="scripted", limits=limits or Limits()),
        client=client if client is not None else ScriptedModel(),
        harness=HoldingHarness(),
        rubric=rubric,
        services={"interception": server},
    )
    async with agent.chat(Task(0, prompt="go")) as session, held_segment(session) as endpoint:
        yield endpoint, session


async def post(
    http: httpx2.AsyncClient,
    endpoint: Endpoint,
    body: Any = None,
    *,
    secret: str | None = None,
    headers: dict[str, str] | None = None,
    url: str | None = None,
) -> httpx2.Response:
    """POST a chat completion to the rollout's URL (or ``url``) with its secret (or
    ``secret``; "" sends no Authorization header)."""
    secret = endpoint.secret if secret is None else secret
    all_headers = {"content-type": "application/json", **(headers or {})}
    if secret:
        all_headers["authorization"] = f"Bearer {secret}"
    content = body if isinstance(body, bytes) else json.dumps(HELLO if body is None else body)
    return await http.post(
        url or f"{endpoint.base_url}/chat/completions", content=content, headers=all_headers
    )


def assert_error(response: httpx2.Response, status: int, kind: str, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind
    for word in words:
        assert word in error["message"]


def content(response: httpx2.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


class Watched(ScriptedModel):
    """A ``ScriptedModel`` the test can wait on: ``await model.received(n)`` returns
    once ``n`` requests have reached it (each is in flight until it answers)."""

    def __init__(self, *script: Any) -> None:
        super().__init__(*script)
        self.count = 0
        self._arrival = trio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.count += 1
        self._arrival.set()
        self._arrival = trio.Event()
        return await super().complete(request)

    async def received(self, n: int) -> None:
        while self.count < n:
            await self._arrival.wait()


# -- health and auth -----------------------------------------------------------------


async def test_health(server: InterceptionServer, http: httpx2.AsyncClient) -> None:
    with trio.fail_after(20):
        response = await http.get(f"{server.url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert server.url.startswith("http://127.0.0.1:")


async def test_refused_requests_never_reach_a_trace(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    with trio.fail_after(20):
        async with rollout(server) as (a, sa), rollout(server) as (b, sb):
            assert a.secret != b.secret
            assert a.base_url != b.base_url
            assert_error(await post(http, a, secret=""), 401, "authentication_error", "no API key")
            wrong = await post(http, a, secret="not-a-secret")
            assert_error(wrong, 401, "authentication_error", "unknown API key")
            basic = await post(http, a, headers={"authorization": f"Basic {a.secret}"}, secret="")
            assert_error(basic, 401, "authentication_error")
            other = await post(http, a, secret=b.secret)
            assert_error(other, 401, "authentication_error", "another rollout")
            assert sa.trace.turns == []
            assert sb.trace.turns == []
            # the shared path is fine with a valid secret: it picks the rollout
            shared = f"{server.url}/v1/chat/completions"
            assert content(await post(http, b, url=shared)) == "ok"
            assert content(await post(http, b, url=f"{server.url}/chat/completions")) == "ok"
            assert_error(await post(http, b, url=shared, secret=""), 401, "authentication_error")
            assert len(sb.trace.turns) == 2
            assert sa.trace.turns == []
        closed_a = await post(http, a)
        closed_b = await post(http, b, url=shared)
    assert_error(closed_a, 409, "rollout_closed", "closed")
    assert_error(closed_b, 409, "rollout_closed")
    assert sa.trace.turns == []
    assert len(sb.trace.turns) == 2
    # the endpoint's repr never shows the secret
    assert a.secret not in repr(a)


async def test_the_secret_is_per_rollout_url(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    with trio.fail_after(20):
        async with rollout(server) as (a, sa), rollout(server) as (b, _):
            # b's own secret on a's URL is refused; a's URL with a's secret works
            assert_error(
                await post(http, b, url=f"{a.base_url}/chat/completions"),
                401,
                "authentication_error",
            )
            assert content(await post(http, a, url=f"{a.base_url}/chat/completions")) == "ok"
            missing = f"{server.url}/rollouts/nope/v1/chat/completions"
            assert_error(await post(http, a, url=missing), 401, "authentication_error")
            assert len(sa.trace.turns) == 1


# -- malformed requests ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", ["not valid JSON"]),
        (b"[1, 2]", ["JSON object"]),
        (b"[" * 100_000, ["not valid JSON"]),
        (b'{"messages": [{"role": "user", "content": "\xff"}]}', ["not valid JSON", "utf-8"]),
        ({"model": "m"}, ["'messages' is required"]),
        ({"messages": []}, ["at least one message"]),
        ({"messages": "hello"}, ["messages must be a list"]),
        ({"messages": [{"role": "wizard", "content": "x"}]}, ["messages[0].role", "wizard"]),
        ({"messages": [{"role": "user"}]}, ["messages[0].content is missing"]),
        ({"messages": [{"role": "tool", "content": "x"}]}, ["tool_call_id"]),
        ({**HELLO, "tools": "lookup"}, ["'tools' must be a list"]),
        ({**HELLO, "model": 3}, ["'model' must be a string"]),
        ({**HELLO, "max_tokens": "ten"}, ["'max_tokens' must be an integer"]),
    ],
)
async def test_malformed_bodies_are_400s_naming_the_problem(
    server: InterceptionServer, http: httpx2.AsyncClient, body: Any, words: list[str]
) -> None:
    with trio.fail_after(20):
        async with rollout(server) as (endpoint, session):
            response = await post(http, endpoint, body)
            assert_error(response, 400, "invalid_request_error", *words)
            assert session.trace.turns == []
            assert session.trace.errors == []


async def test_oversized_body_is_413(http: httpx2.AsyncClient) -> None:
    with trio.fail_after(20):
        async with (
            open_interception_server(graceful_timeout=0.1, max_body_bytes=2048) as small,
            rollout(small) as (endpoint, session),
        ):
            big = {"messages": [{"role": "user", "content": "x" * 4096}]}
            assert_error(await post(http, endpoint, big), 413, "invalid_request_error")
            assert content(await post(http, endpoint)) == "ok"  # under the limit
            assert len(session.trace.turns) == 1
            await http.aclose()  # before the server stops (keep-alive)


async def test_an_oversized_chunked_body_is_413(http: httpx2.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(8):
            yield b"x" * 1024
        yield b'"}]}'

    with trio.fail_after(20):
        async with (
            open_interception_server(graceful_timeout=0.1, max_body_bytes=2048) as small,
            rollout(small) as (endpoint, session),
        ):
            response = await http.post(
                f"{endpoint.base_url}/chat/completions",
                content=chunks(),
                headers={"authorization": f"Bearer {endpoint.secret}"},
            )
            assert_error(response, 413, "invalid_request_error")
            assert session.trace.turns == []
            await http.aclose()


async def test_unknown_paths_and_methods_get_openai_error_bodies(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    with trio.fail_after(20):
        missing = await http.post(f"{server.url}/v1/completions", json=HELLO)
        wrong_method = await http.get(f"{server.url}/v1/chat/completions")
    assert_error(missing, 404, "invalid_request_error")
    assert_error(wrong_method, 405, "invalid_request_error")


async def test_secrets_never_reach_the_logs(
    server: InterceptionServer, http: httpx2.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    model = ScriptedModel(ModelEndpointError("down", status=503, retryable=True))
    with trio.fail_after(20):
        async with rollout(server, model) as (a, _), rollout(server) as (b, _):
            await post(http, a)
            await post(http, a, secret=b.secret)
            await post(http, a, b"{bad")
            await post(http, b)
        await post(http, a)
    assert caplog.records  # something was logged at all (the access path, hypercorn)...
    for secret in (a.secret, b.secret):
        assert secret not in caplog.text  # ...but never a secret


async def test_many_rollouts_at_once_keep_their_own_turns(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    sessions: list[ChatSession] = []

    async def one(i: int) -> None:
        async with rollout(server, ScriptedModel(default=f"answer {i}")) as (endpoint, session):
            sessions.append(session)
            for turn in range(6):
                body = {"messages": [{"role": "user", "content": f"{i}/{turn}"}]}
                assert content(await post(http, endpoint, body)) == f"answer {i}"

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(16):
                nursery.start_soon(one, i)
    assert len(sessions) == 16
    for session in sessions:
        prefix = text_of(session.trace.turns[0].request[0].content).split("/")[0]
        assert [text_of(t.request[0].content) for t in session.trace.turns] == [
            f"{prefix}/{turn}" for turn in range(6)
        ]


# -- streaming -------------------------------------------------------------------------


async def read_sse(
    response: httpx2.Response, on_done: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body; asserts the framing; calls ``on_done`` the
    moment the final ``data: [DONE]`` is read."""
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks: list[dict[str, Any]] = []
    blank_expected = False
    done = False
    async for line in response.aiter_lines():
        if blank_expected:
            assert line == "", f"an event is one data line and a blank line, got {line!r}"
            blank_expected = False
            continue
        assert not done, "nothing may follow data: [DONE]"
        assert line.startswith("data: "), line
        payload = line.removeprefix("data: ")
        blank_expected = True
        if payload == "[DONE]":
            done = True
            if on_done is not None:
                on_done()
        else:
            chunks.append(json.loads(payload))
    assert done, "the stream must end with data: [DONE]"
    return chunks


def reassemble(chunks: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], str | None]:
    """(text, tool calls, finish reason) from the deltas, as an OpenAI SDK would."""
    text, calls, finish = "", [], None
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"] == chunks[0]["id"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            calls += delta.get("tool_calls") or []
            finish = choice["finish_reason"] or finish
    return text, calls, finish


async def test_stream_is_sse_and_the_turn_is_recorded_before_done(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    answer = "the  answer is  forty two "
    model = ScriptedModel(answer)
    seen_at_done: list[int] = []
    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            body = {**HELLO, "stream": True, "stream_options": {"include_usage": True}}
            async with http.stream(
                "POST",
                f"{endpoint.base_url}/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {endpoint.secret}"},
            ) as response:
                assert response.status_code == 200
                chunks = await read_sse(
                    response, lambda: seen_at_done.append(len(session.trace.turns))
                )
            trace = session.trace
    assert seen_at_done == [1]
    text, calls, finish = reassemble(chunks)
    assert text == answer == text_of(trace.turns[0].response.content)
    assert calls == []
    assert finish == "stop"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


async def test_streamed_tool_calls(server: InterceptionServer, http: httpx2.AsyncClient) -> None:
    tool_message = tool_call("c1", "lookup", '{"q": 1}')
    model = ScriptedModel(tool_message)
    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            async with http.stream(
                "POST",
                f"{endpoint.base_url}/chat/completions",
                json={**HELLO, "stream": True},
                headers={"authorization": f"Bearer {endpoint.secret}"},
            ) as response:
                chunks = await read_sse(response)
            recorded = session.trace.turns[0].response
    text, calls, finish = reassemble(chunks)
    assert text == ""
    assert finish == "tool_calls"
    assert "usage" not in chunks[-1]  # not asked for
    assert calls == [
        {
            "index": 0,
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": 1}'},
        }
    ]
    assert recorded == tool_message


# -- retries ---------------------------------------------------------------------------


async def stream_text(
    http: httpx2.AsyncClient, endpoint: Endpoint, headers: dict[str, str] | None = None
) -> str:
    async with http.stream(
        "POST",
        f"{endpoint.base_url}/chat/completions",
        json={**HELLO, "stream": True},
        headers={"authorization": f"Bearer {endpoint.secret}", **(headers or {})},
    ) as response:
        assert response.status_code == 200
        return reassemble(await read_sse(response))[0]


async def ask(
    http: httpx2.AsyncClient, endpoint: Endpoint, streamed: bool, headers: dict[str, str]
) -> str:
    if streamed:
        return await stream_text(http, endpoint, headers)
    return content(await post(http, endpoint, headers=headers))


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_a_retry_in_flight_waits_for_the_original(
    server: InterceptionServer, http: httpx2.AsyncClient, streamed: bool
) -> None:
    model = Watched(Sleep(0.5), "slow answer", "second answer")
    answers: dict[str, str] = {}

    async def send(name: str, headers: dict[str, str]) -> None:
        answers[name] = await ask(http, endpoint, streamed, headers)

    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, "original", {})
                await model.received(1)
                nursery.start_soon(send, "retry", RETRY)
            assert answers == {"original": "slow answer", "retry": "slow answer"}
            assert len(model.requests) == 1
            assert len(session.trace.turns) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_a_late_retry_gets_the_recorded_answer(
    server: InterceptionServer, http: httpx2.AsyncClient, streamed: bool
) -> None:
    model = ScriptedModel("first", "second")
    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            assert await ask(http, endpoint, streamed, {}) == "first"
            assert await ask(http, endpoint, streamed, RETRY) == "first"
            assert await ask(http, endpoint, streamed, {"x-stainless-retry-count": "2"}) == "first"
            assert len(session.trace.turns) == 1
            # an unmarked identical body is a new turn (programs repeat bodies)
            assert await ask(http, endpoint, streamed, {}) == "second"
            assert await ask(http, endpoint, streamed, {"x-stainless-retry-count": "0"}) == "ok"
            assert len(session.trace.turns) == 3
            assert len(model.requests) == 3


async def test_a_retry_with_another_body_is_a_new_turn(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    model = ScriptedModel("first", "second")
    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            assert content(await post(http, endpoint)) == "first"
            other = {"messages": [{"role": "user", "content": "something else"}]}
            assert content(await post(http, endpoint, other, headers=RETRY)) == "second"
            # a retry from another rollout with the same body does not see this one's
            async with rollout(server, ScriptedModel("theirs")) as (them, theirs):
                assert content(await post(http, them, headers=RETRY)) == "theirs"
                assert len(theirs.trace.turns) == 1
            assert len(session.trace.turns) == 2


async def test_an_original_whose_client_gave_up_still_answers_its_retry(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    model = ScriptedModel(Sleep(0.4), "patient answer")
    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            with trio.move_on_after(0.1) as gave_up:
                await post(http, endpoint)
            assert gave_up.cancelled_caught
            assert model.in_flight == 1
            assert content(await post(http, endpoint, headers=RETRY)) == "patient answer"
            assert len(session.trace.turns) == 1


async def test_a_retry_of_a_failed_original_is_a_fresh_attempt(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    model = Watched(
        ModelEndpointError("upstream 503", status=503, retryable=True),
        Sleep(0.4),
        ModelEndpointError("upstream 503 again", status=503, retryable=True),
        "third time lucky",
    )
    failures: list[httpx2.Response] = []

    async def send(headers: dict[str, str]) -> None:
        failures.append(await post(http, endpoint, headers=headers))

    with trio.fail_after(20):
        async with rollout(server, model) as (endpoint, session):
            assert_error(await post(http, endpoint), 502, "upstream_error", "upstream 503")
            # a retry of a failed original tries again; one arriving while that attempt is
            # in flight shares its (failed) answer
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, RETRY)
                await model.received(2)
                nursery.start_soon(send, {"x-stainless-retry-count": "2"})
            for failure in failures:
                assert_error(failure, 502, "upstream_error", "again")
            third = await post(http, endpoint, headers={"x-stainless-retry-count": "3"})
            assert content(third) == "third time lucky"
            trace = session.trace
    assert [t.error for t in trace.turns] == ["upstream 503", "upstream 503 again", None]
    assert [e.kind for e in trace.errors] == ["model", "model"]
    assert len(model.requests) == 3


# -- limits and hooks --------------------------------------------------------------------


async def test_a_limit_refusal_is_terminal_and_never_a_turn(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    with trio.fail_after(20):
        async with rollout(server, limits=Limits(max_turns=1)) as (endpoint, session):
            assert content(await post(http, endpoint)) == "ok"
            # a retry of the call that succeeded still gets its answer, limit or not
            assert content(await post(http, endpoint, headers=RETRY)) == "ok"
            second = await post(http, endpoint)
            assert_error(second, 400, "rollout_stopped", "max_turns")
            assert second.json()["error"]["code"] == "max_turns"
            # a retry of the refused call is refused too
            again = await post(http, endpoint, headers=RETRY)
            assert again.json()["error"]["code"] == "max_turns"
            assert len(session.trace.turns) == 1
            assert session.trace.stop_condition == "max_turns"


async def test_a_stop_hook_refuses_over_http(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    @stop
    def enough(trace: Trace) -> bool:
        return len(trace.turns) >= 2

    with trio.fail_after(20):
        async with rollout(server, rubric=Rubric.from_functions([enough])) as (endpoint, session):
            assert content(await post(http, endpoint)) == "ok"
            assert content(await post(http, endpoint)) == "ok"
            refused = await post(http, endpoint)
            assert_error(refused, 400, "rollout_stopped")
            assert refused.json()["error"]["code"] == "enough"
            assert session.trace.stop_condition == "enough"
            assert len(session.trace.turns) == 2


# -- upstream failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ModelEndpointError("the endpoint is overloaded", status=503, retryable=True), 502),
        (ModelEndpointError("the endpoint refused the body", status=400, retryable=False), 424),
    ],
)
async def test_upstream_failures_are_relayed_and_recorded(
    server: InterceptionServer, http: httpx2.AsyncClient, error: ModelEndpointError, status: int
) -> None:
    with trio.fail_after(20):
        async with rollout(server, ScriptedModel(error)) as (endpoint, session):
            response = await post(http, endpoint)
            assert_error(response, status, "upstream_error", str(error))
            trace = session.trace
            assert len(trace.turns) == 1
            assert trace.turns[0].response is None
            assert trace.turns[0].error == str(error)
            assert [(e.kind, e.type) for e in trace.errors] == [("model", "ModelEndpointError")]
            # the rollout goes on: the next call is answered
            assert content(await post(http, endpoint)) == "ok"


@pytest.mark.parametrize(
    ("answer", "status", "words"),
    [
        (Answer(500, {"error": {"message": "vLLM fell over"}}), 502, "vLLM fell over"),
        (Answer(200, b"<html>not json</html>"), 424, "malformed"),
    ],
)
async def test_a_real_upstream_endpoint_failing(
    server: InterceptionServer,
    http: httpx2.AsyncClient,
    nursery: trio.Nursery,
    answer: Answer,
    status: int,
    words: str,
) -> None:
    with trio.fail_after(20):
        upstream = await start_scripted(nursery, answer)
        async with (
            OpenAIClient(upstream.base_url, retries=0, timeout=10) as client,
            rollout(server, client) as (endpoint, session),
        ):
            assert_error(await post(http, endpoint), status, "upstream_error", words)
            assert session.trace.turns[0].error is not None
            assert session.trace.errors[0].kind == "model"
            # the secret was not sent upstream, and the program's body was relayed
            assert upstream.seen[0].headers.get("authorization") is None
            assert upstream.seen[0].body["messages"] == HELLO["messages"]
        await http.aclose()


# -- request details ---------------------------------------------------------------------


async def test_program_sampling_applies_unless_the_agent_sets_it(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    model = ScriptedModel()
    agent = Agent(
        "agent",
        AgentConfig(model="served-model", sampling=Sampling(temperature=0.2)),
        client=model,
        harness=HoldingHarness(),
        services={"interception": server},
    )
    with trio.fail_after(20):
        chat = agent.chat(Task(0, prompt="go"))
        async with chat as session, held_segment(session) as endpoint:
            body = {**HELLO, "model": "whatever", "temperature": 1.5, "top_p": 0.5, "seed": 7}
            response = await post(http, endpoint, body)
    assert content(response) == "ok"
    assert response.json()["model"] == "whatever"
    request = model.requests[0]
    assert request.model == "served-model"
    assert request.sampling == {"temperature": 0.2, "top_p": 0.5, "seed": 7}


async def test_the_tool_endpoint_runs_the_rollouts_tools(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = Agent(
        "agent",
        AgentConfig(model="scripted"),
        client=ScriptedModel(),
        harness=HoldingHarness(),
        services={"interception": server},
        tools=[add],
    )
    url_of: Callable[[Endpoint], str] = lambda e: f"{e.base_url}/tools/call"  # noqa: E731
    with trio.fail_after(20):
        chat = agent.chat(Task(0, prompt="go"))
        async with chat as session, held_segment(session) as endpoint:
            auth = {"authorization": f"Bearer {endpoint.secret}"}
            call = {"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}
            ok = await http.post(url_of(endpoint), json=call, headers=auth)
            bad_args = await http.post(
                url_of(endpoint), json={**call, "arguments": "{"}, headers=auth
            )
            unknown = await http.post(url_of(endpoint), json={**call, "name": "mul"}, headers=auth)
            malformed = await http.post(url_of(endpoint), json=[1], headers=auth)
            nested = await http.post(url_of(endpoint), content=b"[" * 100_000, headers=auth)
            no_auth = await http.post(url_of(endpoint), json=call)
            turns = len(session.trace.turns)
        closed = await http.post(url_of(endpoint), json=call, headers=auth)
    assert ok.status_code == 200
    assert ok.json() == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}
    assert bad_args.status_code == 200
    assert bad_args.json()["content"].startswith("Error: ")
    assert "not valid JSON" in bad_args.json()["content"]
    assert unknown.status_code == 200
    assert unknown.json()["content"] == "Error: no tool named 'mul'; tools: add"
    assert_error(malformed, 400, "invalid_request_error", "name")
    assert_error(nested, 400, "invalid_request_error", "name")
    assert_error(no_auth, 401, "authentication_error")
    assert_error(closed, 409, "rollout_closed")
    assert turns == 0  # tool calls are not model turns


async def test_a_request_whose_rollout_closes_mid_upload_is_refused(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    """The secret is checked on the headers; a rollout closed before its body has
    arrived must not get a turn on its (already closed and scored) trace."""
    half = trio.Event()
    go_on = trio.Event()
    raw = json.dumps(HELLO).encode()

    async def body() -> AsyncIterator[bytes]:
        yield raw[:5]
        half.set()
        await go_on.wait()
        yield raw[5:]

    model = ScriptedModel()
    result: list[httpx2.Response] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            async with rollout(server, model) as (endpoint, session):

                async def send() -> None:
                    result.append(
                        await http.post(
                            f"{endpoint.base_url}/chat/completions",
                            content=body(),
                            headers={"authorization": f"Bearer {endpoint.secret}"},
                        )
                    )

                nursery.start_soon(send)
                await half.wait()
                await trio.sleep(0.2)  # the server has the headers and is reading the body
            go_on.set()
    assert_error(result[0], 409, "rollout_closed")
    assert model.requests == []
    assert session.trace.turns == []


# -- the OpenAI SDK as the program -------------------------------------------------------


async def test_the_openai_sdk_against_a_rollout(
    server: InterceptionServer,
) -> None:
    """What an agent program would do: the official SDK (in a worker thread: it is
    blocking), with its own retries, streaming, and a terminal refusal."""
    import openai  # in the test extra

    model = ScriptedModel(
        "plain answer",
        ModelEndpointError("flaky", status=503, retryable=True),
        "after a retry",
        "streamed answer here",
    )
    messages = [{"role": "user", "content": "hi"}]
    with trio.fail_after(30):
        async with rollout(server, model, limits=Limits(max_turns=4)) as (endpoint, session):
            sdk = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.secret, max_retries=2)

            def program() -> tuple[str, str, str, Any]:
                first = sdk.chat.completions.create(model="m", messages=messages)
                second = sdk.chat.completions.create(model="m", messages=messages)
                stream = sdk.chat.completions.create(model="m", messages=messages, stream=True)
                streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                try:
                    sdk.chat.completions.create(model="m", messages=messages)
                except openai.BadRequestError as exc:
                    refused = exc
                else:
                    raise AssertionError("the fifth call must be refused")
                sdk.close()
                return (
                    first.choices[0].message.content,
                    second.choices[0].message.content,
                    streamed,
                    refused,
                )

            first, second, streamed, refused = await trio.to_thread.run_sync(program)
            trace = session.trace
    assert (first, second, streamed) == ("plain answer", "after a retry", "streamed answer here")
    assert refused.code == "max_turns"
    assert refused.type == "rollout_stopped"
    # the SDK's retry (x-stainless-retry-count: 1) after the 502 was a fresh attempt
    assert [t.error for t in trace.turns] == [None, "flaky", None, None]
    assert trace.stop_condition == "max_turns"
