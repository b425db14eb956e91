"""taketurns._models.openai.OpenAIClient against real loopback servers: the built-in model server
and a scripted, misbehaving endpoint (tests/httpservers.py). Real clock (docs/design.md
"Testing")."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import faultserver
import pytest
import trio
from faultserver import Fault
from httpservers import Answer, start_scripted

from taketurns._errors import ConfigError, ModelEndpointError
from taketurns._http.server import serve
from taketurns._models.builtin import BuiltinModel
from taketurns._models.messages import AssistantMessage, ToolCall, UserMessage
from taketurns._models.model import ModelRequest
from taketurns._models.openai import OpenAIClient

REQUEST = ModelRequest("builtin/bracket", (UserMessage("Pick one: [check] [bet]"),))

MakeClient = Callable[..., OpenAIClient]


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """Clients with tiny backoffs and a short timeout, closed after the test."""
    made: list[OpenAIClient] = []

    def make(base_url: str, **kwargs: Any) -> OpenAIClient:
        kwargs = {"timeout": 5.0, "backoff": 0.01, "max_backoff": 0.05} | kwargs
        client = OpenAIClient(base_url, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


async def test_round_trip_against_the_builtin_server(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    model = BuiltinModel("bracket")
    client = make_client(await nursery.start(serve, model))
    with trio.fail_after(10):
        response = await client.complete(REQUEST)
    assert response == model.respond(REQUEST)
    assert response.message.content in ("[check]", "[bet]")
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens == 1
    assert response.finish_reason == "stop"


async def test_pool_is_sized_from_concurrency(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    client = make_client(await nursery.start(serve, BuiltinModel(latency=0.2)), concurrency=4)
    start = trio.current_time()
    with trio.fail_after(10):
        async with trio.open_nursery() as calls:
            for _ in range(16):
                calls.start_soon(client.complete, REQUEST)
    # 16 calls through 4 connections: four waves of 0.2 s
    assert 0.8 <= trio.current_time() - start < 3.0


async def test_tool_calls_round_trip(nursery: trio.Nursery, make_client: MakeClient) -> None:
    client = make_client(await nursery.start(serve, BuiltinModel("tools")))
    tool = {"type": "function", "function": {"name": "add", "parameters": {}}}
    request = ModelRequest("builtin/tools", (UserMessage("add things"),), tools=(tool,))
    with trio.fail_after(10):
        response = await client.complete(request)
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert [c.name for c in response.message.tool_calls] == ["add"]


async def test_body_carries_sampling_tools_and_keeps_logprobs(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    endpoint = await start_scripted(nursery, Answer())
    client = make_client(endpoint.base_url)
    tool = {"type": "function", "function": {"name": "f"}}
    history = (UserMessage("hi"), AssistantMessage(None, (ToolCall("c1", "f", "{}"),)))
    request = ModelRequest(
        "m", history, tools=(tool,), sampling={"temperature": 0.5, "model": "not me"}
    )
    with trio.fail_after(10):
        response = await client.complete(request)
    body = endpoint.seen[0].body
    assert body["model"] == "m"
    assert body["temperature"] == 0.5
    assert body["tools"] == [tool]
    assert body["messages"][1]["tool_calls"][0]["id"] == "c1"
    assert endpoint.retry_headers() == [None]
    assert response.message == AssistantMessage("hello there")
    assert response.logprobs == [-0.25, -1.5]
    assert response.token_ids == [101, 102]
    assert response.prompt_token_ids == [1, 2, 3]
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (3, 2)


async def test_429_honours_retry_after(nursery: trio.Nursery, make_client: MakeClient) -> None:
    limited = Answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "0.3"})
    endpoint = await start_scripted(nursery, limited, Answer())
    # without Retry-After the wait would be ~5 s: the header must be what is used
    client = make_client(endpoint.base_url, backoff=5.0, max_backoff=10.0)
    start = trio.current_time()
    with trio.fail_after(10):
        response = await client.complete(REQUEST)
    elapsed = trio.current_time() - start
    assert response.message.content == "hello there"
    assert endpoint.retry_headers() == [None, "1"]
    assert 0.3 <= elapsed < 2.5


async def test_5xx_is_retried_with_the_retry_count_header(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    endpoint = await start_scripted(nursery, Answer(500, b"boom"), Answer(503, b"busy"), Answer())
    client = make_client(endpoint.base_url, retries=3)
    with trio.fail_after(10):
        response = await client.complete(REQUEST)
    assert response.message.content == "hello there"
    assert endpoint.retry_headers() == [None, "1", "2"]


async def test_retries_run_out(nursery: trio.Nursery, make_client: MakeClient) -> None:
    endpoint = await start_scripted(nursery, Answer(502, {"error": {"message": "bad gateway"}}))
    client = make_client(endpoint.base_url, retries=2)
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (502, True)
    assert "HTTP 502: bad gateway" in str(info.value)
    assert "gave up after 2 retries" in str(info.value)
    assert endpoint.retry_headers() == [None, "1", "2"]


async def test_401_names_the_key_variable_and_is_not_retried(
    nursery: trio.Nursery, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TT_TEST_KEY", "sk-sekrit")
    endpoint = await start_scripted(nursery, Answer(401, {"error": {"message": "invalid key"}}))
    client = make_client(endpoint.base_url, api_key_var="TT_TEST_KEY")
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (401, False)
    assert "check the API key in $TT_TEST_KEY" in str(info.value)
    assert endpoint.seen[0].headers["authorization"] == "Bearer sk-sekrit"
    assert len(endpoint.seen) == 1
    assert "sk-sekrit" not in str(info.value)
    assert "sk-sekrit" not in repr(client)


async def test_missing_key_variable_sends_no_authorization(
    nursery: trio.Nursery, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TT_TEST_KEY", raising=False)
    endpoint = await start_scripted(nursery, Answer())
    client = make_client(endpoint.base_url, api_key_var="TT_TEST_KEY", headers={"X-Extra": "1"})
    with trio.fail_after(10):
        await client.complete(REQUEST)
    assert "authorization" not in endpoint.seen[0].headers
    assert endpoint.seen[0].headers["x-extra"] == "1"


async def test_404_points_at_base_url_and_model(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    endpoint = await start_scripted(nursery, Answer(404, {"error": {"message": "no such model"}}))
    client = make_client(endpoint.base_url)
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (404, False)
    assert "no such model" in str(info.value)
    assert "check --base-url and --model" in str(info.value)
    assert len(endpoint.seen) == 1


async def test_a_prompt_over_the_context_window_says_how_to_make_it_fit(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    # llama-cpp-python's server's words (vLLM's are the same but for the numbers)
    message = (
        "This model's maximum context length is 2048 tokens. However, you requested 9215 "
        "tokens (9199 in the messages, 16 in the completion). Please reduce the length of "
        "the messages or completion."
    )
    error = {"message": message, "type": "invalid_request_error", "param": "messages"}
    endpoint = await start_scripted(nursery, Answer(400, {"error": error}))
    client = make_client(endpoint.base_url)
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (400, False)
    assert "maximum context length is 2048 tokens" in str(info.value)
    assert "do not fit the model's context window" in str(info.value)
    assert "--n_ctx" in str(info.value)
    assert "--max-model-len" in str(info.value)
    assert len(endpoint.seen) == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"<html>oops</html>", "not JSON"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"message": {"role": "user", "content": "x"}}]}, "not assistant"),
        ({"choices": [{"message": {"role": "robot"}}]}, "choices[0].message.role"),
    ],
)
async def test_malformed_bodies(
    nursery: trio.Nursery, make_client: MakeClient, body: Any, needle: str
) -> None:
    endpoint = await start_scripted(nursery, Answer(200, body))
    client = make_client(endpoint.base_url)
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (200, False)
    assert needle in str(info.value)
    assert "malformed" in str(info.value)
    assert len(endpoint.seen) == 1


async def test_a_stall_times_out_and_is_retried(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    endpoint = await start_scripted(nursery, Answer(delay=3.0))
    client = make_client(endpoint.base_url, timeout=0.3, retries=1)
    start = trio.current_time()
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert trio.current_time() - start < 2.0
    assert (info.value.status, info.value.retryable) == (None, True)
    assert "0.3s timeout" in str(info.value)
    assert "gave up after 1 retry" in str(info.value)
    assert endpoint.retry_headers() == [None, "1"]


async def test_a_trickling_answer_is_timed_out_as_a_whole(
    nursery: trio.Nursery, make_client: MakeClient
) -> None:
    """A byte every 0.2 s: no network step waits long, the request does (issue 23)."""
    endpoint = await faultserver.start(nursery, lambda call: Fault("trickle", delay=0.2))
    client = make_client(endpoint.base_url, timeout=1.0, retries=1)
    start = trio.current_time()
    with trio.fail_after(20), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert 2.0 <= trio.current_time() - start < 6.0  # two attempts of 1 s, then gave up
    assert (info.value.status, info.value.retryable) == (None, True)
    assert "did not answer within the 1s timeout" in str(info.value)
    assert "gave up after 1 retry" in str(info.value)
    assert [call.attempt for call in endpoint.calls] == [0, 1]


async def test_connection_refused(make_client: MakeClient) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{port}/v1", retries=1)
    with trio.fail_after(10), pytest.raises(ModelEndpointError) as info:
        await client.complete(REQUEST)
    assert (info.value.status, info.value.retryable) == (None, True)
    assert "could not reach" in str(info.value)


async def test_cancellation_propagates(nursery: trio.Nursery, make_client: MakeClient) -> None:
    endpoint = await start_scripted(nursery, Answer(delay=3.0))
    client = make_client(endpoint.base_url)
    with trio.fail_after(10):
        with trio.move_on_after(0.2) as scope:
            await client.complete(REQUEST)
        assert scope.cancelled_caught


async def test_aclose_is_idempotent_and_refuses_reuse(make_client: MakeClient) -> None:
    client = make_client("http://127.0.0.1:9/v1")
    await client.aclose()
    await client.aclose()
    with pytest.raises(ModelEndpointError, match="closed"):
        await client.complete(REQUEST)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"base_url": "localhost:8000"}, "base_url"),
        ({"base_url": "http://h/v1", "retries": -1}, "retries"),
        ({"base_url": "http://h/v1", "concurrency": 0}, "concurrency"),
        ({"base_url": "http://h/v1", "timeout": 0}, "timeout"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        OpenAIClient(**kwargs)
