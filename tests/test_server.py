"""taketurns._http.server over real loopback HTTP (real clock: docs/design.md "Testing",
autojump + sockets)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx2
import pytest
import trio

from taketurns._http.server import serve
from taketurns._models.builtin import BuiltinModel
from taketurns._models.messages import UserMessage
from taketurns._models.model import ModelRequest
from taketurns._models.wire import to_wire

PICK = [{"role": "user", "content": "Pick one: [check] [bet]"}]


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as client:
        yield client


@pytest.fixture
async def base_url(nursery: trio.Nursery) -> str:
    return await nursery.start(serve, BuiltinModel("bracket"))


async def post(http: httpx2.AsyncClient, url: str, body: Any) -> httpx2.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return await http.post(f"{url}/chat/completions", content=content, headers=headers)


async def test_serve_reports_bound_base_url(base_url: str) -> None:
    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/v1", base_url)
    assert match is not None
    assert int(match.group(1)) > 0


async def test_health_and_models(http: httpx2.AsyncClient, base_url: str) -> None:
    root = base_url.removesuffix("/v1")
    health = await http.get(f"{root}/health")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "model": "builtin/bracket"}
    models = await http.get(f"{base_url}/models")
    assert models.json()["data"][0]["id"] == "builtin/bracket"


@pytest.mark.parametrize("prefix", ["/v1", ""])
async def test_completion_matches_the_model(
    http: httpx2.AsyncClient, base_url: str, prefix: str
) -> None:
    url = base_url.removesuffix("/v1") + prefix
    response = await post(http, url, {"model": "builtin/bracket", "messages": PICK})
    assert response.status_code == 200
    data = response.json()
    expected = BuiltinModel("bracket").respond(
        ModelRequest("builtin/bracket", (UserMessage(PICK[0]["content"]),))
    )
    assert data["id"].startswith("chatcmpl-")
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int)
    assert data["model"] == "builtin/bracket"
    assert data["choices"][0]["message"] == to_wire(expected.message)
    assert data["choices"][0]["message"]["content"] in ("[check]", "[bet]")
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {
        "prompt_tokens": expected.usage.prompt_tokens,
        "completion_tokens": 1,
        "total_tokens": expected.usage.prompt_tokens + 1,
    }


async def test_tools_and_max_tokens(http: httpx2.AsyncClient, nursery: trio.Nursery) -> None:
    url = await nursery.start(serve, BuiltinModel("tools"))
    tool = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"properties": {"q": {"type": "string"}}}},
    }
    messages = [{"role": "user", "content": "look up q=trio"}]
    data = (await post(http, url, {"messages": messages, "tools": [tool]})).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "lookup", "arguments": '{"q": "trio"}'}
    assert data["model"] == "builtin/tools"  # no model given: the served one

    long = [{"role": "user", "content": "no options here"}]
    data = (await post(http, url, {"messages": long, "max_tokens": 2})).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["choices"][0]["message"]["content"] == "I have"


async def test_stream_is_openai_sse(http: httpx2.AsyncClient, base_url: str) -> None:
    plain = (await post(http, base_url, {"messages": PICK})).json()
    body = {"messages": PICK, "stream": True, "stream_options": {"include_usage": True}}
    response = await post(http, base_url, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("\n\n")
    events = response.text.removesuffix("\n\n").split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    text = "".join(d.get("content", "") for d in deltas)
    assert text == plain["choices"][0]["message"]["content"]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    assert set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == plain["usage"]


async def test_stream_parses_with_an_sse_client(http: httpx2.AsyncClient, base_url: str) -> None:
    async with http.sse(
        f"{base_url}/chat/completions", method="POST", json={"messages": PICK, "stream": True}
    ) as source:
        data = [event.data async for event in source]
    assert data[-1] == "[DONE]"
    assert "usage" not in json.loads(data[-2])


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        ([1, 2], "JSON object"),
        ({"model": "m"}, "'messages' is required"),
        ({"messages": []}, "at least one message"),
        ({"messages": "hi"}, "messages must be a list"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": PICK, "max_tokens": "ten"}, "'max_tokens' must be an integer"),
        ({"messages": PICK, "tools": {"a": 1}}, "'tools' must be a list"),
    ],
)
async def test_bad_requests_get_openai_400s(
    http: httpx2.AsyncClient, base_url: str, body: Any, needle: str
) -> None:
    response = await post(http, base_url, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert needle in error["message"]


async def test_unknown_route_and_method_are_json_errors(
    http: httpx2.AsyncClient, base_url: str
) -> None:
    missing = await http.get(f"{base_url}/nothing")
    assert missing.status_code == 404
    assert "/v1/nothing" in missing.json()["error"]["message"]
    wrong = await http.get(f"{base_url}/chat/completions")
    assert wrong.status_code == 405


async def test_latency_overlaps_across_requests(
    http: httpx2.AsyncClient, nursery: trio.Nursery
) -> None:
    url = await nursery.start(serve, BuiltinModel("echo", latency=0.5))
    statuses: list[int] = []

    async def one(i: int) -> None:
        messages = [{"role": "user", "content": f"hi {i}"}]
        response = await post(http, url, {"messages": messages})
        assert response.json()["choices"][0]["message"]["content"] == f"hi {i}"
        statuses.append(response.status_code)

    start = trio.current_time()
    with trio.fail_after(10):
        async with trio.open_nursery() as inner:
            for i in range(8):
                inner.start_soon(one, i)
    elapsed = trio.current_time() - start
    assert statuses == [200] * 8
    assert 0.5 <= elapsed < 2.0  # eight 0.5 s calls, overlapped


async def test_cancelling_the_nursery_stops_the_server(http: httpx2.AsyncClient) -> None:
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve, BuiltinModel())
            assert (await http.get(f"{url}/models")).status_code == 200
            nursery.cancel_scope.cancel()
    async with httpx2.AsyncClient(timeout=5) as fresh:
        with pytest.raises(httpx2.ConnectError):
            await fresh.get(f"{url}/models")


async def test_shutdown_trigger_stops_the_server_gracefully(
    http: httpx2.AsyncClient,
) -> None:
    stop = trio.Event()
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, BuiltinModel(), shutdown_trigger=stop.wait))
            assert (await http.get(f"{url}/models")).status_code == 200
            await http.aclose()  # a kept-alive connection would hold graceful shutdown
            stop.set()
    # the nursery exited on its own: serve() returned after the trigger
