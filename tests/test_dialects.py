"""The Responses and Anthropic Messages dialects over real loopback HTTP, with the
official ``openai`` and ``anthropic`` SDKs as the clients (blocking: each runs in a
worker thread). Every call goes through a rollout's model boundary (a scripted model)
and must be one recorded, wire-neutral turn; the built-in model server answers the
same dialects."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
import pytest
import trio
from scripted import ScriptedModel, tool_call
from segments import HoldingHarness, held_segment

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    ChatSession,
    Limits,
    ModelEndpointError,
    SystemMessage,
    Task,
    ToolMessage,
    UserMessage,
)
from taketurns._http.server import serve
from taketurns.harness import Endpoint, ImagePart, TextPart, ToolCall
from taketurns.http import InterceptionServer, open_interception_server
from taketurns.testing import BuiltinModel

T = TypeVar("T")
C = TypeVar("C")
PIXEL = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running


@asynccontextmanager
async def rollout(
    server: InterceptionServer, model: ScriptedModel, limits: Limits | None = None
) -> AsyncIterator[tuple[Endpoint, ChatSession]]:
    agent = Agent(
        "agent",
        AgentConfig(model="scripted", limits=limits or Limits()),
        client=model,
        harness=HoldingHarness(),
        services={"interception": server},
    )
    async with agent.chat(Task(0, prompt="go")) as session, held_segment(session) as endpoint:
        yield endpoint, session


async def in_thread(fn: Callable[[], T]) -> T:
    with trio.fail_after(30):
        return await trio.to_thread.run_sync(fn)


# every SDK client a test makes, closed after it (an unclosed client's pooled socket
# is a ResourceWarning, an error here, whenever the collector meets it)
_CLIENTS: list[Any] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def _kept(client: C) -> C:
    _CLIENTS.append(client)
    return client


def oai(endpoint: Endpoint) -> openai.OpenAI:
    return _kept(openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.secret, max_retries=0))


def claude(endpoint: Endpoint, **kwargs: Any) -> anthropic.Anthropic:
    root = endpoint.base_url.removesuffix("/v1")
    kwargs.setdefault("api_key", endpoint.secret)
    return _kept(anthropic.Anthropic(base_url=root, max_retries=0, **kwargs))


# -- Responses ---------------------------------------------------------------------------

FN_TOOL = {"type": "function", "name": "weather", "description": "Weather", "parameters": WEATHER}


async def test_responses_json_tool_call_both_ways(server: InterceptionServer) -> None:
    model = ScriptedModel(tool_call("call_1", "weather", '{"city": "Oslo"}'), "It is sunny.")
    async with rollout(server, model) as (endpoint, session):
        sdk = oai(endpoint)

        def program() -> tuple[Any, Any]:
            first = sdk.responses.create(
                model="m",
                instructions="Be brief.",
                input=[{"role": "user", "content": "weather in Oslo?"}],
                tools=[FN_TOOL, {"type": "web_search"}],
                tool_choice="auto",
                temperature=0.5,
            )
            call = first.output[0]
            second = sdk.responses.create(
                model="m",
                instructions="Be brief.",
                input=[
                    {"role": "user", "content": "weather in Oslo?"},
                    {"type": "reasoning", "id": "rs_1", "summary": []},
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                    {"type": "function_call_output", "call_id": call.call_id, "output": "sun"},
                ],
                tools=[FN_TOOL],
            )
            return first, second

        first, second = await in_thread(program)
        turns = session.trace.turns
    call = first.output[0]
    assert (call.type, call.name, call.call_id) == ("function_call", "weather", "call_1")
    assert json.loads(call.arguments) == {"city": "Oslo"}
    assert first.usage.input_tokens == 3
    assert second.output_text == "It is sunny."
    assert second.status == "completed"
    assert len(turns) == 2  # one request, one recorded turn
    assert turns[0].request == (SystemMessage("Be brief."), UserMessage("weather in Oslo?"))
    assert turns[0].tools == ("weather",)  # web_search is not a function: dropped
    assert model.requests[0].sampling["temperature"] == 0.5
    assert model.requests[0].sampling["tool_choice"] == "auto"
    assert turns[1].request[2:] == (
        AssistantMessage(None, (ToolCall("call_1", "weather", '{"city": "Oslo"}'),)),
        ToolMessage("call_1", "sun", "weather"),
    )


async def test_responses_stream_events_text_and_tool_call(server: InterceptionServer) -> None:
    model = ScriptedModel("hello there friend", tool_call("call_9", "weather", '{"city":"Rome"}'))
    async with rollout(server, model) as (endpoint, session):
        sdk = oai(endpoint)

        def program() -> tuple[list[Any], list[Any]]:
            text = list(sdk.responses.create(model="m", input="hi", stream=True))
            with sdk.responses.stream(model="m", input="go", tools=[FN_TOOL]) as stream:
                calls = list(stream)
                final = stream.get_final_response()
            return text, [*calls, final]

        text, calls = await in_thread(program)
        assert len(session.trace.turns) == 2
    kinds = [e.type for e in text]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_item.added" in kinds
    assert "response.output_item.done" in kinds
    deltas = [e.delta for e in text if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "hello there friend"
    assert len(deltas) == 3
    assert text[-1].response.usage.output_tokens == 2
    assert [e.sequence_number for e in text] == list(range(len(text)))
    arg_deltas = [e.delta for e in calls[:-1] if e.type == "response.function_call_arguments.delta"]
    assert "".join(arg_deltas) == '{"city":"Rome"}'
    final = calls[-1]
    assert final.output[0].type == "function_call"
    assert final.output[0].call_id == "call_9"


async def test_responses_input_roles_and_images(server: InterceptionServer) -> None:
    model = ScriptedModel("seen")
    image = f"data:image/png;base64,{PIXEL}"
    async with rollout(server, model) as (endpoint, session):
        sdk = oai(endpoint)
        await in_thread(
            lambda: sdk.responses.create(
                model="m",
                input=[
                    {"role": "developer", "content": "dev rules"},
                    {"role": "system", "content": [{"type": "input_text", "text": "sys"}]},
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "look"},
                            {"type": "input_image", "image_url": image, "detail": "low"},
                        ],
                    },
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "an image"}],
                    },
                    {"role": "user", "content": "and?"},
                ],
            )
        )
        request = session.trace.turns[0].request
    assert request == (
        SystemMessage("dev rules"),
        SystemMessage("sys"),
        UserMessage((TextPart("look"), ImagePart(image, "low"))),
        AssistantMessage("an image"),
        UserMessage("and?"),
    )


async def test_responses_refusals(server: InterceptionServer) -> None:
    model = ScriptedModel("one")
    async with rollout(server, model, Limits(max_turns=1)) as (endpoint, session):
        sdk = oai(endpoint)

        def program() -> list[Exception]:
            sdk.responses.create(model="m", input="hi")
            errors: list[Exception] = []
            for kwargs in (
                {"input": "again"},
                {"input": "x", "previous_response_id": "resp_1"},
                {"input": [{"type": "item_reference", "id": "msg_1"}]},
            ):
                try:
                    sdk.responses.create(model="m", **kwargs)
                except openai.BadRequestError as exc:
                    errors.append(exc)
            return errors

        stopped, previous, reference = await in_thread(program)
        trace = session.trace
    assert stopped.code == "max_turns"
    assert stopped.type == "rollout_stopped"
    assert "previous_response_id" in str(previous)
    assert "item_reference" in str(reference)
    assert len(trace.turns) == 1
    assert trace.stop_condition == "max_turns"


async def test_responses_stream_upstream_failure_is_response_failed(
    server: InterceptionServer,
) -> None:
    model = ScriptedModel(ModelEndpointError("upstream broke", status=503, retryable=True))
    async with rollout(server, model) as (endpoint, session):
        sdk = oai(endpoint)
        events = await in_thread(
            lambda: list(sdk.responses.create(model="m", input="hi", stream=True))
        )
        turns = session.trace.turns
    assert [e.type for e in events] == ["response.created", "response.failed"]
    assert "upstream broke" in events[-1].response.error.message
    assert [t.error for t in turns] == ["upstream broke"]


# -- Anthropic Messages ------------------------------------------------------------------

CC_TOOL = {"name": "weather", "description": "Weather", "input_schema": WEATHER}


async def test_messages_json_tool_use_both_ways(server: InterceptionServer) -> None:
    model = ScriptedModel(tool_call("toolu_1", "weather", '{"city": "Oslo"}'), "Sunny.")
    async with rollout(server, model) as (endpoint, session):
        sdk = claude(endpoint)

        def program() -> tuple[Any, Any]:
            system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
            user = {"role": "user", "content": "weather in Oslo?"}
            first = sdk.messages.create(
                model="m",
                max_tokens=100,
                system=system,
                messages=[user],
                tools=[CC_TOOL, {"type": "web_search_20250305", "name": "web_search"}],
                tool_choice={"type": "any"},
            )
            use = first.content[0]
            second = sdk.messages.create(
                model="m",
                max_tokens=100,
                system=system,
                messages=[
                    user,
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": "hmm", "signature": "s"},
                            {"type": "text", "text": "Checking."},
                            {
                                "type": "tool_use",
                                "id": use.id,
                                "name": use.name,
                                "input": use.input,
                            },
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": use.id, "content": "sun"},
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_x",
                                "is_error": True,
                                "content": [{"type": "tool_reference", "tool_name": "Grep"}],
                            },
                            {"type": "text", "text": "thanks"},
                        ],
                    },
                ],
                tools=[CC_TOOL],
            )
            return first, second

        first, second = await in_thread(program)
        turns = session.trace.turns
    use = first.content[0]
    assert (use.type, use.id, use.name, use.input) == (
        "tool_use",
        "toolu_1",
        "weather",
        {"city": "Oslo"},
    )
    assert first.stop_reason == "tool_use"
    assert first.usage.input_tokens == 3
    assert second.content[0].text == "Sunny."
    assert second.stop_reason == "end_turn"
    assert len(turns) == 2
    assert turns[0].request == (SystemMessage("Be brief."), UserMessage("weather in Oslo?"))
    assert turns[0].tools == ("weather",)
    assert model.requests[0].sampling["tool_choice"] == "required"
    assert model.requests[0].sampling["max_tokens"] == 100
    assert turns[1].request[2:] == (
        AssistantMessage("Checking.", (ToolCall("toolu_1", "weather", '{"city": "Oslo"}'),)),
        ToolMessage("toolu_1", "sun", "weather"),
        ToolMessage("toolu_x", 'Error: {"type": "tool_reference", "tool_name": "Grep"}'),
        UserMessage("thanks"),
    )


async def test_messages_stream_text_and_tool_use(server: InterceptionServer) -> None:
    model = ScriptedModel("hello there friend", tool_call("toolu_2", "weather", '{"city":"Rome"}'))
    async with rollout(server, model) as (endpoint, session):
        sdk = claude(endpoint)

        def program() -> tuple[list[Any], Any, Any]:
            user = [{"role": "user", "content": "hi"}]
            with sdk.messages.stream(model="m", max_tokens=50, messages=user) as stream:
                events = list(stream)
                text = stream.get_final_message()
            with sdk.beta.messages.stream(  # ?beta=true, as Claude Code sends
                model="m", max_tokens=50, messages=user, tools=[CC_TOOL]
            ) as stream:
                tool = stream.get_final_message()
            return events, text, tool

        events, text, tool = await in_thread(program)
        assert len(session.trace.turns) == 2
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)
    assert "message_delta" in kinds
    assert text.content[0].text == "hello there friend"
    assert text.usage.output_tokens == 2
    assert tool.stop_reason == "tool_use"
    assert tool.content[0].input == {"city": "Rome"}


async def test_messages_role_system_entries_images_and_bearer(server: InterceptionServer) -> None:
    model = ScriptedModel("ok")
    async with rollout(server, model) as (endpoint, session):
        sdk = claude(endpoint, api_key=None, auth_token=endpoint.secret)  # bearer, no x-api-key
        image = {"type": "base64", "media_type": "image/png", "data": PIXEL}
        await in_thread(
            lambda: sdk.messages.create(
                model="m",
                max_tokens=10,
                system="top",
                messages=[
                    {"role": "user", "content": [{"type": "image", "source": image}]},
                    {"role": "system", "content": [{"type": "text", "text": "env"}]},  # type: ignore[list-item]
                    {"role": "user", "content": "go"},
                ],
            )
        )
        request = session.trace.turns[0].request
    assert request == (
        SystemMessage("top"),
        UserMessage((ImagePart(f"data:image/png;base64,{PIXEL}"),)),
        SystemMessage("env"),
        UserMessage("go"),
    )


async def test_messages_refusal_is_terminal_and_count_tokens_is_not_a_turn(
    server: InterceptionServer,
) -> None:
    model = ScriptedModel("one")
    async with rollout(server, model, Limits(max_turns=1)) as (endpoint, session):
        sdk = claude(endpoint)
        user = [{"role": "user", "content": "hi there you"}]

        def program() -> tuple[Any, Exception]:
            counted = sdk.messages.count_tokens(model="m", messages=user)
            sdk.messages.create(model="m", max_tokens=5, messages=user)
            try:
                sdk.messages.create(model="m", max_tokens=5, messages=user)
            except anthropic.PermissionDeniedError as exc:
                return counted, exc
            raise AssertionError("the second call must be refused")

        counted, refused = await in_thread(program)
        trace = session.trace
    assert counted.input_tokens > 0
    assert len(trace.turns) == 1  # count_tokens is never recorded
    assert refused.status_code == 403
    assert refused.body["error"]["type"] == "rollout_stopped"
    assert "max_turns" in refused.body["error"]["message"]
    assert trace.stop_condition == "max_turns"


async def test_messages_auth_head_and_bad_bodies(server: InterceptionServer) -> None:
    async with rollout(server, ScriptedModel()) as (endpoint, session):
        root = endpoint.base_url.removesuffix("/v1")
        async with httpx2.AsyncClient(timeout=10) as http:
            head = await http.head(f"{server.url}/")
            head_rollout = await http.head(root)
            missing = await http.post(f"{endpoint.base_url}/messages?beta=true", json={})
            bad = await http.post(
                f"{endpoint.base_url}/messages",
                json={"model": "m", "messages": [{"role": "tool", "content": "x"}]},
                headers={"x-api-key": endpoint.secret},
            )
            empty = await http.post(
                f"{endpoint.base_url}/responses",
                json={"model": "m"},
                headers={"authorization": f"Bearer {endpoint.secret}"},
            )
        assert session.trace.turns == []
    assert head.status_code == 200
    assert head_rollout.status_code == 200
    assert missing.status_code == 401
    assert missing.json()["type"] == "error"
    assert "x-api-key" in missing.json()["error"]["message"]
    assert bad.status_code == 400
    assert "messages[0].role" in bad.json()["error"]["message"]
    assert empty.status_code == 400
    assert "'input' is required" in empty.json()["error"]["message"]


# -- the built-in model server -------------------------------------------------------------


async def test_the_builtin_server_answers_every_dialect() -> None:
    async with trio.open_nursery() as nursery:
        bracket = await nursery.start(serve, BuiltinModel("bracket"))
        tools = await nursery.start(serve, BuiltinModel("tools"))

        def program() -> tuple[str, str, Any, Any, int]:
            prompt = [{"role": "user", "content": "choose [check] or [bet]"}]
            city = [{"role": "user", "content": "city: Oslo"}]
            o = _kept(openai.OpenAI(base_url=bracket, api_key="x", max_retries=0))
            r = o.responses.create(model="builtin/bracket", input=prompt)
            a = _kept(anthropic.Anthropic(base_url=bracket.removesuffix("/v1"), api_key="x"))
            m = a.messages.create(model="b", max_tokens=9, messages=prompt)
            ot = _kept(openai.OpenAI(base_url=tools, api_key="x", max_retries=0))
            call = ot.responses.create(model="t", input=city, tools=[FN_TOOL]).output[0]
            at = _kept(anthropic.Anthropic(base_url=tools.removesuffix("/v1"), api_key="x"))
            use = at.messages.create(model="t", max_tokens=9, messages=city, tools=[CC_TOOL])
            counted = a.messages.count_tokens(model="b", messages=prompt)
            return r.output_text, m.content[0].text, call, use.content[0], counted.input_tokens

        text, message, call, use, counted = await in_thread(program)
        nursery.cancel_scope.cancel()
    assert text in ("[check]", "[bet]")
    assert message in ("[check]", "[bet]")
    assert (call.name, json.loads(call.arguments)) == ("weather", {"city": "Oslo"})
    assert (use.name, use.input) == ("weather", {"city": "Oslo"})
    assert counted > 0
