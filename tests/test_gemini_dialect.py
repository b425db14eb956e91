"""The Gemini dialect over real loopback HTTP, with Google's official ``google-genai``
SDK as the client (blocking: it runs in a worker thread). Every call goes through a
rollout's model boundary (a scripted model) and must be one recorded, wire-neutral
turn; the endpoint's gate (409 between segments) answers in Google's error shape;
the built-in model server answers the same dialect. And the dialect seam itself: a
dialect registered with ``dialect_registry.register`` is served by both servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx2
import pytest
import trio
from google import genai
from google.genai import errors, types
from quart import Response
from scripted import ScriptedModel, tool_call
from segments import HoldingHarness, held_segment

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    ChatSession,
    ConfigError,
    Limits,
    SystemMessage,
    Task,
    ToolMessage,
    UserMessage,
)
from taketurns._http.dialect import Failure, Parsed, load_object
from taketurns._http.dialects import served_dialects
from taketurns._http.server import serve
from taketurns.env import ModelRequest, ModelResponse
from taketurns.harness import Endpoint, ImagePart, TextPart, ToolCall
from taketurns.http import Dialect, InterceptionServer, dialect_registry, open_interception_server
from taketurns.testing import BuiltinModel

T = TypeVar("T")
PIXEL = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="weather",
            description="Weather",
            parameters=types.Schema(
                type=types.Type.OBJECT,
                properties={"city": types.Schema(type=types.Type.STRING)},
                required=["city"],
            ),
        )
    ]
)


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


_CLIENTS: list[genai.Client] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def google(base_url: str, key: str) -> genai.Client:
    """The SDK pointed at ``base_url`` (a rollout's URL without ``/v1``), no retries."""
    options = types.HttpOptions(base_url=base_url, retry_options=types.HttpRetryOptions(attempts=1))
    client = genai.Client(api_key=key, http_options=options)
    _CLIENTS.append(client)
    return client


def sdk(endpoint: Endpoint) -> genai.Client:
    return google(endpoint.base_url.removesuffix("/v1"), endpoint.secret)


async def test_text_system_instruction_sampling_and_usage(server: InterceptionServer) -> None:
    model = ScriptedModel("It is sunny.")
    async with rollout(server, model) as (endpoint, session):
        client = sdk(endpoint)
        config = types.GenerateContentConfig(
            system_instruction="Be brief.",
            temperature=0.5,
            top_p=0.9,
            top_k=3,  # ignored
            max_output_tokens=64,
            seed=7,
            stop_sequences=["END"],
        )
        answer = await in_thread(
            lambda: client.models.generate_content(
                model="gemini-2.5-flash", contents="weather in Oslo?", config=config
            )
        )
        turns = session.trace.turns
    assert answer.text == "It is sunny."
    candidate = answer.candidates[0]
    assert candidate.finish_reason == types.FinishReason.STOP
    assert candidate.content.role == "model"
    usage = turns[0].usage  # what the boundary recorded, as Google words it
    assert answer.usage_metadata.prompt_token_count == usage.prompt_tokens > 0
    assert answer.usage_metadata.candidates_token_count == usage.completion_tokens > 0
    assert answer.usage_metadata.total_token_count == usage.total_tokens
    assert answer.model_version == "gemini-2.5-flash"  # the model the URL named
    assert len(turns) == 1  # one request, one recorded turn
    assert turns[0].request == (SystemMessage("Be brief."), UserMessage("weather in Oslo?"))
    assert dict(model.requests[0].sampling) == {
        "temperature": 0.5,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 7,
        "stop": ["END"],
    }


async def test_function_calling_round_trip(server: InterceptionServer) -> None:
    model = ScriptedModel(tool_call("call_1", "weather", '{"city": "Oslo"}'), "Sunny in Oslo.")
    async with rollout(server, model) as (endpoint, session):
        client = sdk(endpoint)

        def program() -> tuple[Any, Any]:
            config = types.GenerateContentConfig(
                tools=[WEATHER, types.Tool(google_search=types.GoogleSearch())],
                tool_config=types.ToolConfig(
                    function_calling_config=types.FunctionCallingConfig(mode="ANY")
                ),
                automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            )
            question = types.Content(role="user", parts=[types.Part(text="weather in Oslo?")])
            first = client.models.generate_content(model="m", contents=[question], config=config)
            call = first.function_calls[0]
            reply = types.Part.from_function_response(name=call.name, response={"output": "sun"})
            reply.function_response.id = call.id
            history = [
                question,
                first.candidates[0].content,
                types.Content(role="user", parts=[reply]),
            ]
            second = client.models.generate_content(model="m", contents=history, config=config)
            return first, second

        first, second = await in_thread(program)
        turns = session.trace.turns
    call = first.function_calls[0]
    assert (call.id, call.name, call.args) == ("call_1", "weather", {"city": "Oslo"})
    assert first.candidates[0].finish_reason == types.FinishReason.STOP
    assert second.text == "Sunny in Oslo."
    assert len(turns) == 2
    assert turns[0].tools == ("weather",)  # google_search is Google's own: dropped
    assert model.requests[0].sampling["tool_choice"] == "required"
    schema = model.requests[0].tools[0]["function"]["parameters"]
    assert schema["type"] == "object"  # Google's OBJECT, as JSON Schema
    assert schema["properties"]["city"]["type"] == "string"
    assert turns[1].request[1:] == (
        AssistantMessage(None, (ToolCall("call_1", "weather", '{"city": "Oslo"}'),)),
        ToolMessage("call_1", "sun", "weather"),
    )


async def test_streaming_sse_and_the_json_array(server: InterceptionServer) -> None:
    model = ScriptedModel(
        "hello there friend", tool_call("call_9", "weather", '{"city":"Rome"}'), "one two"
    )
    async with rollout(server, model) as (endpoint, session):
        client = sdk(endpoint)

        def program() -> tuple[list[Any], list[Any]]:
            text = list(client.models.generate_content_stream(model="m", contents="hi"))
            config = types.GenerateContentConfig(tools=[WEATHER])
            calls = list(
                client.models.generate_content_stream(model="m", contents="go", config=config)
            )
            return text, calls

        text, calls = await in_thread(program)
        async with httpx2.AsyncClient(timeout=10) as http:  # no ?alt=sse: a JSON array
            array = await http.post(
                f"{endpoint.base_url.removesuffix('/v1')}/v1beta/models/m:streamGenerateContent",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                headers={"x-goog-api-key": endpoint.secret},
            )
        assert len(session.trace.turns) == 3
    assert [c.text for c in text] == ["hello", " there", " friend"]
    assert [c.candidates[0].finish_reason for c in text][-1] == types.FinishReason.STOP
    assert text[0].candidates[0].finish_reason is None
    assert text[-1].usage_metadata.candidates_token_count > 0
    assert all(c.usage_metadata is None for c in text[:-1])  # usage on the last chunk
    assert calls[-1].function_calls[0].args == {"city": "Rome"}
    assert calls[-1].function_calls[0].id == "call_9"
    assert array.status_code == 200
    chunks = array.json()
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "one two"
    assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] > 0


async def test_images_thoughts_and_function_responses_by_name(server: InterceptionServer) -> None:
    """Thought parts are dropped, images become image parts, a call without an id is
    answered by the response of its name, ``{"error": ...}`` reads as an error."""
    model = ScriptedModel("seen")
    body = {
        "systemInstruction": {"parts": [{"text": "sys"}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "look"},
                    {"inlineData": {"mimeType": "image/png", "data": PIXEL}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "planning", "thought": True},
                    {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "weather", "response": {"error": "down"}}},
                    {"text": "and?"},
                ],
            },
        ],
    }
    async with rollout(server, model) as (endpoint, session):
        async with httpx2.AsyncClient(timeout=10) as http:
            answer = await http.post(
                f"{endpoint.base_url.removesuffix('/v1')}/v1beta/models/m:generateContent",
                json=body,
                params={"key": endpoint.secret},  # the key in the query, as Google's curl
            )
        request = session.trace.turns[0].request
    assert answer.status_code == 200
    assert request == (
        SystemMessage("sys"),
        UserMessage((TextPart("look"), ImagePart(f"data:image/png;base64,{PIXEL}"))),
        AssistantMessage(None, (ToolCall("call_1_1", "weather", '{"city": "Oslo"}'),)),
        ToolMessage("call_1_1", "Error: down", "weather"),
        UserMessage("and?"),
    )


async def test_errors_in_googles_shape(server: InterceptionServer) -> None:
    """A stopped turn is 400 FAILED_PRECONDITION with the stop condition; a bad
    body 400 naming the field; no key, or an unknown one, 401."""
    model = ScriptedModel("one")
    async with rollout(server, model, Limits(max_turns=1)) as (endpoint, session):
        client = sdk(endpoint)

        def program() -> list[errors.APIError]:
            client.models.generate_content(model="m", contents="hi")
            found: list[errors.APIError] = []
            for call in (
                lambda: client.models.generate_content(model="m", contents="again"),
                lambda: google(sdk_root(endpoint), "wrong").models.generate_content(
                    model="m", contents="hi"
                ),
            ):
                try:
                    call()
                except errors.APIError as exc:
                    found.append(exc)
            return found

        stopped, unknown = await in_thread(program)
        async with httpx2.AsyncClient(timeout=10) as http:
            url = f"{sdk_root(endpoint)}/v1beta/models/m:generateContent"
            key = {"x-goog-api-key": endpoint.secret}
            bad = await http.post(url, json={"contents": [{"role": "robot"}]}, headers=key)
            missing = await http.post(url, json={"contents": "hi"})
        trace = session.trace
    assert stopped.code == 400
    assert stopped.status == "FAILED_PRECONDITION"
    assert "max_turns" in stopped.message
    detail = stopped.details["error"]["details"][0]
    assert detail["reason"] == "ROLLOUT_STOPPED"
    assert detail["metadata"] == {"stop_condition": "max_turns"}
    assert (unknown.code, unknown.status) == (401, "UNAUTHENTICATED")
    assert bad.status_code == 400
    assert bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "contents[0].role" in bad.json()["error"]["message"]
    assert missing.status_code == 401
    assert "x-goog-api-key" in missing.json()["error"]["message"]
    assert len(trace.turns) == 1
    assert trace.stop_condition == "max_turns"


async def test_the_gate_answers_409_between_segments_and_after_close(
    server: InterceptionServer,
) -> None:
    model = ScriptedModel("one")
    agent = Agent(
        "agent",
        AgentConfig(model="scripted"),
        client=model,
        harness=HoldingHarness(),
        services={"interception": server},
    )

    def refused(endpoint: Endpoint) -> errors.ClientError:
        client = sdk(endpoint)
        try:
            client.models.generate_content(model="m", contents="hi")
        except errors.ClientError as exc:
            return exc
        raise AssertionError("the call must be refused")

    async with agent.chat(Task(0, prompt="go")) as session:
        async with held_segment(session) as endpoint:
            pass
        idle = await in_thread(lambda: refused(endpoint))
    closed = await in_thread(lambda: refused(endpoint))
    for error, reason in ((idle, "ROLLOUT_IDLE"), (closed, "ROLLOUT_CLOSED")):
        assert (error.code, error.status) == (409, "ABORTED")
        assert error.details["error"]["details"][0]["reason"] == reason
    assert session.trace.turns == []
    assert model.requests == []


def sdk_root(endpoint: Endpoint) -> str:
    return endpoint.base_url.removesuffix("/v1")


async def test_the_builtin_server_answers_gemini() -> None:
    async with trio.open_nursery() as nursery:
        bracket = (await nursery.start(serve, BuiltinModel("bracket"))).removesuffix("/v1")
        tools = (await nursery.start(serve, BuiltinModel("tools"))).removesuffix("/v1")

        def program() -> tuple[str, Any, int]:
            text = google(bracket, "x").models.generate_content(
                model="builtin/bracket", contents="choose [check] or [bet]"
            )
            config = types.GenerateContentConfig(tools=[WEATHER])
            call = google(tools, "x").models.generate_content(
                model="builtin/tools", contents="city: Oslo", config=config
            )
            counted = google(bracket, "x").models.count_tokens(model="m", contents="a b c")
            return text.text, call.function_calls[0], counted.total_tokens

        text, call, counted = await in_thread(program)
        contents = [{"role": "user", "parts": [{"text": "a b c"}]}]
        wrapped = {"generateContentRequest": {"model": "models/m", "contents": contents}}
        async with httpx2.AsyncClient(timeout=10) as http:
            url = f"{bracket}/v1beta/models/m:countTokens"
            counted_wrapped = await http.post(url, json=wrapped)
        nursery.cancel_scope.cancel()
    assert text in ("[check]", "[bet]")
    assert (call.name, call.args) == ("weather", {"city": "Oslo"})
    assert counted > 0
    assert counted_wrapped.json() == {"totalTokens": counted}  # the wrapped form, the same


# -- the seam: a dialect registered at run time is served --------------------------------


class Shout(Dialect):
    """A toy dialect: ``POST /shout/<model>`` with ``{"say": ...}``, answered in
    capitals; the key as ``x-shout-key``."""

    name = "shout"
    paths = ("shout/<path:model>",)

    def secret(self, headers: Mapping[str, str], query: Mapping[str, str] = {}) -> str | None:
        return headers.get("x-shout-key")

    def parse(
        self,
        raw: str | bytes,
        default_model: str,
        route: Mapping[str, str] = {},
    ) -> Parsed:
        body = load_object(raw)
        request = ModelRequest(route["model"], (UserMessage(str(body["say"])),))
        return Parsed(request)

    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        text = str(response.message.content).upper()
        return Response(json.dumps({"shouted": text}), mimetype="application/json")

    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        body = json.dumps({"shout_error": failure.kind})
        return Response(body, status=failure.status, mimetype="application/json")


@pytest.fixture
def shout() -> Iterator[None]:
    dialect_registry.register("shout")(Shout)
    yield
    dialect_registry.unregister("shout")


@pytest.mark.usefixtures("shout")
async def test_a_registered_dialect_is_served_by_both_servers() -> None:
    assert "shout" in dialect_registry.ids()
    model = ScriptedModel("quiet please")
    async with (
        open_interception_server(graceful_timeout=0.1) as server,
        rollout(server, model) as (endpoint, session),
    ):
        async with httpx2.AsyncClient(timeout=10) as http:
            root = sdk_root(endpoint)
            refused = await http.post(f"{root}/shout/m", json={"say": "hi"})
            heard = await http.post(
                f"{root}/shout/m", json={"say": "hi"}, headers={"x-shout-key": endpoint.secret}
            )
        request = session.trace.turns[0].request
    async with trio.open_nursery() as nursery:
        url = (await nursery.start(serve, BuiltinModel("echo"))).removesuffix("/v1")
        async with httpx2.AsyncClient(timeout=10) as http:
            echoed = await http.post(f"{url}/shout/builtin/echo", json={"say": "hey you"})
        nursery.cancel_scope.cancel()
    assert refused.status_code == 401
    assert refused.json() == {"shout_error": "authentication_error"}
    assert heard.json() == {"shouted": "QUIET PLEASE"}
    assert request == (UserMessage("hi"),)
    assert echoed.json() == {"shouted": "HEY YOU"}


class NotADialect:
    """Registered by mistake."""


def test_a_registered_id_that_is_no_dialect_is_a_config_error() -> None:
    dialect_registry.register("not-a-dialect")(NotADialect)
    try:
        with pytest.raises(ConfigError, match="'not-a-dialect' is registered as"):
            served_dialects()
    finally:
        dialect_registry.unregister("not-a-dialect")
    assert {"chat-completions", "responses", "anthropic", "gemini"} <= set(dialect_registry.ids())
    assert {type(d).__name__ for d in served_dialects()} >= {"Gemini", "AnthropicMessages"}


async def test_without_the_registration_the_dialect_is_not_served() -> None:
    async with trio.open_nursery() as nursery:
        url = (await nursery.start(serve, BuiltinModel("echo"))).removesuffix("/v1")
        async with httpx2.AsyncClient(timeout=10) as http:
            missing = await http.post(f"{url}/shout/m", json={"say": "hi"})
        nursery.cancel_scope.cancel()
    assert "shout" not in dialect_registry.ids()
    assert missing.status_code == 404
