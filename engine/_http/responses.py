"""The OpenAI Responses dialect (``POST /v1/responses``, what Codex speaks).

In: ``instructions`` (the first system message), ``input`` as a string or a list of
items: messages of every role (``developer`` and ``system`` become system messages;
parts ``input_text``/``output_text``/``text``, ``input_image`` by URL, ``refusal`` as
text), ``function_call`` (joined to the assistant message before it) and
``function_call_output`` (a tool message), ``custom_tool_call``/``_output`` (the same,
the raw input as the arguments). Function tools pass on as chat tool schemas, and so
do the functions of a ``namespace`` tool (Codex's MCP servers), named
``<namespace>__<name>``: their calls go back with ``namespace`` and the own name, and a
namespaced ``function_call`` in the input reads as the flat name. Other
tools (``web_search``, ``custom``, ``local_shell``, ...) are dropped, as
are ``reasoning`` and server-side call items: a chat model can neither see nor call
them. ``tool_choice`` (``auto``/``none``/``required``/a named function),
``parallel_tool_calls``, ``temperature``, ``top_p`` and ``max_output_tokens`` become
sampling; ``store``, ``include``, ``reasoning``, ``text``, ``metadata`` and the like
are ignored. ``previous_response_id`` and ``item_reference`` are refused (400): this
server stores no responses, so clients send the whole conversation (``store: false``).

Out: a ``response`` object (a ``message`` item with ``output_text``, then one
``function_call`` item per tool call) as JSON, or SSE events ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``/``.done``, ``response.function_call_arguments.delta``/
``.done``, ``response.output_item.done`` and ``response.completed`` (with usage;
``response.incomplete`` when the model hit its token budget). An upstream failure
on a streamed request answers ``response.created`` then ``response.failed``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from quart import Response

from taketurns._errors import BadRequest
from taketurns._http.chat_completions import error_response
from taketurns._http.dialect import (
    Dialect,
    Failure,
    Parsed,
    load_object,
    sse_event,
    sse_response,
    words,
)
from taketurns._models.messages import (
    AssistantMessage,
    Content,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    text_of,
)
from taketurns._models.model import ModelRequest, ModelResponse

__all__ = ["Responses"]

Json = dict[str, Any]
_EMPTY: Mapping[str, str] = MappingProxyType({})

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
# items a chat model cannot see: kept out of the conversation on purpose
_DROPPED_ITEMS = frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_list_tools",
    }
)


def _content(raw: Any, where: str) -> Content:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise BadRequest(f"{where}.content must be a string or a list of content parts")
    parts: list[TextPart | ImagePart] = []
    for i, part in enumerate(raw):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(TextPart(part["refusal"]))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(ImagePart(part["image_url"], part.get("detail")))
        elif kind == "input_image":
            raise BadRequest(f"{where}.content[{i}]: send images by image_url (no file_id here)")
        else:
            raise BadRequest(
                f"{where}.content[{i}] must be an input_text, output_text or input_image "
                f"part (got {kind!r})"
            )
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


def _message(item: Json, where: str) -> Message:
    role = item.get("role")
    content = _content(item.get("content", ""), where)
    if role in ("system", "developer"):
        return SystemMessage(content)
    if role == "user":
        return UserMessage(content)
    if role == "assistant":
        return AssistantMessage(text_of(content) or None)
    raise BadRequest(f"{where}.role must be user, assistant, system or developer (got {role!r})")


def _call(item: Json, where: str) -> ToolCall:
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise BadRequest(f"{where} needs a string call_id and name")
    namespace = item.get("namespace")
    if isinstance(namespace, str) and namespace:
        name = f"{namespace}__{name}"  # as the namespaced tool was offered
    if item.get("type") == "custom_tool_call":
        arguments = item.get("input", "")
    else:
        arguments = item.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise BadRequest(f"{where}.arguments must be a JSON string")
    return ToolCall(call_id, name, arguments)


def _output(item: Json, names: dict[str, str], where: str) -> ToolMessage:
    call_id = item.get("call_id")
    if not isinstance(call_id, str):
        raise BadRequest(f"{where}.call_id must be a string")
    raw = item.get("output", "")
    content = raw if isinstance(raw, str) else _content(raw, where)
    return ToolMessage(call_id, content, names.get(call_id))


def messages_from_input(raw: Any) -> list[Message]:
    """The conversation in a Responses ``input`` list (see the module docstring)."""
    if not isinstance(raw, list):
        raise BadRequest("'input' must be a string or a list of input items")
    out: list[Message] = []
    names: dict[str, str] = {}
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, where))
        elif kind in ("function_call", "custom_tool_call"):
            call = _call(item, where)
            names[call.id] = call.name
            last = out[-1] if out else None
            if isinstance(last, AssistantMessage):  # one assistant turn: text and its calls
                out[-1] = AssistantMessage(last.content, (*last.tool_calls, call))
            else:
                out.append(AssistantMessage(None, (call,)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append(_output(item, names, where))
        elif kind in _DROPPED_ITEMS:
            continue
        else:
            raise BadRequest(
                f"{where}.type {kind!r} is not supported here (item_reference needs stored "
                "responses: send the items themselves)"
            )
    return out


def _function(tool: Json, where: str, prefix: str = "") -> Json:
    if not isinstance(tool.get("name"), str):
        raise BadRequest(f"'{where}' needs a string 'name'")
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    fn["name"] = prefix + tool["name"]
    return {"type": "function", "function": fn}


def _tools(raw: Any) -> tuple[list[Json], dict[str, tuple[str, str]]]:
    """The chat tool schemas, and the flat name of each namespaced function (the
    ``namespace`` tools' members, named ``<namespace>__<name>``): its (namespace,
    name), so its calls go back to the client namespaced."""
    if raw is None:
        return [], {}
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise BadRequest("'tools' must be a list of tool objects")
    out, namespaced = [], {}
    for i, tool in enumerate(raw):
        if tool.get("type") == "function":
            out.append(_function(tool, f"tools[{i}]"))
        elif tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            members = tool.get("tools")
            for j, member in enumerate(members if isinstance(members, list) else ()):
                if isinstance(member, dict) and member.get("type") == "function":
                    flat = _function(member, f"tools[{i}].tools[{j}]", f"{tool['name']}__")
                    out.append(flat)
                    namespaced[flat["function"]["name"]] = (tool["name"], member["name"])
        # built-in tools (web_search, custom, ...): a chat model cannot call them
    return out, namespaced


def _tool_choice(raw: Any) -> Any:
    if raw in ("auto", "none", "required"):
        return raw
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    return None  # allowed_tools, a built-in tool: left to the model's default


def _sampling(body: Json, has_tools: bool) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            sampling[key] = body[key]
    budget = body.get("max_output_tokens")
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool):
            raise BadRequest(f"'max_output_tokens' must be an integer (got {budget!r})")
        sampling["max_tokens"] = budget
    if has_tools:
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            sampling["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            sampling["parallel_tool_calls"] = body["parallel_tool_calls"]
    return sampling


def parse_responses_body(raw: str | bytes, default_model: str) -> Parsed:
    body = load_object(raw)
    if body.get("previous_response_id"):
        raise BadRequest(
            "'previous_response_id' is not supported: this server stores no responses; "
            "send the whole conversation in 'input' (store: false)"
        )
    if "input" not in body:
        raise BadRequest("'input' is required: a string or a list of input items")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string")
    raw_input = body["input"]
    messages: list[Message] = [SystemMessage(instructions)] if instructions else []
    if isinstance(raw_input, str):
        messages.append(UserMessage(raw_input))
    else:
        messages += messages_from_input(raw_input)
    if not messages:
        raise BadRequest("'input' must hold at least one item")
    model = body.get("model", default_model)
    if not isinstance(model, str):
        raise BadRequest("'model' must be a string")
    tools, namespaced = _tools(body.get("tools"))
    request = ModelRequest(model, tuple(messages), tuple(tools), _sampling(body, bool(tools)))
    echo = {k: body.get(k) for k in ("tool_choice", "parallel_tool_calls", "instructions")}
    echo["namespaced"] = namespaced
    return Parsed(request, bool(body.get("stream")), echo)


# -- answers ----------------------------------------------------------------------------


def _usage(response: ModelResponse) -> Json:
    usage = response.usage
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def _items(response: ModelResponse, namespaced: Mapping[str, tuple[str, str]]) -> list[Json]:
    """The output items, completed: the text message (if any), then the calls (a call
    of a namespaced tool with its ``namespace`` and own ``name``)."""
    message = response.message
    items: list[Json] = []
    text = text_of(message.content)
    if text or not message.tool_calls:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        items.append(
            {
                "id": f"msg_{uuid.uuid4().hex}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for call in message.tool_calls:
        item = {
            "id": f"fc_{uuid.uuid4().hex}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id or f"call_{uuid.uuid4().hex[:24]}",
            "name": call.name,
            "arguments": call.arguments,
        }
        if call.name in namespaced:
            item["namespace"], item["name"] = namespaced[call.name]
        items.append(item)
    return items


def _envelope(parsed: Parsed, id_: str, created: int, status: str) -> Json:
    """A ``response`` object with no output yet."""
    options = parsed.options
    return {
        "id": id_,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": parsed.request.model,
        "output": [],
        "instructions": options.get("instructions"),
        "tools": [],
        "tool_choice": options.get("tool_choice") or "auto",
        "parallel_tool_calls": options.get("parallel_tool_calls") is not False,
        "temperature": parsed.request.sampling.get("temperature"),
        "top_p": parsed.request.sampling.get("top_p"),
        "error": None,
        "incomplete_details": None,
        "metadata": {},
        "usage": None,
    }


def _finished(response: ModelResponse, parsed: Parsed, id_: str, created: int) -> Json:
    truncated = response.finish_reason == "length"
    out = _envelope(parsed, id_, created, "incomplete" if truncated else "completed")
    out["output"] = _items(response, parsed.options.get("namespaced") or {})
    out["usage"] = _usage(response)
    if truncated:
        out["incomplete_details"] = {"reason": "max_output_tokens"}
    return out


def _item_events(index: int, item: Json) -> Iterator[tuple[str, Json]]:
    """(event, data) pairs streaming one completed output item."""
    base = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        part = item["content"][0]
        yield (
            "response.output_item.added",
            {
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            },
        )
        empty = {**part, "text": ""}
        yield "response.content_part.added", {**base, "content_index": 0, "part": empty}
        for delta in words(part["text"]):
            event = {**base, "content_index": 0, "delta": delta, "logprobs": []}
            yield "response.output_text.delta", event
        done = {**base, "content_index": 0, "text": part["text"], "logprobs": []}
        yield "response.output_text.done", done
        yield "response.content_part.done", {**base, "content_index": 0, "part": part}
    else:
        added = {**item, "status": "in_progress", "arguments": ""}
        yield "response.output_item.added", {"output_index": index, "item": added}
        arguments = item["arguments"]
        yield "response.function_call_arguments.delta", {**base, "delta": arguments}
        yield "response.function_call_arguments.done", {**base, "arguments": arguments}
    yield "response.output_item.done", {"output_index": index, "item": item}


def _numbered(events: Iterator[tuple[str, Json]]) -> Iterator[bytes]:
    for n, (event, data) in enumerate(events):
        yield sse_event(event, {"type": event, "sequence_number": n, **data})


def _stream(response: ModelResponse, parsed: Parsed) -> Iterator[tuple[str, Json]]:
    id_, created = f"resp_{uuid.uuid4().hex}", int(time.time())
    start = _envelope(parsed, id_, created, "in_progress")
    yield "response.created", {"response": start}
    yield "response.in_progress", {"response": start}
    final = _finished(response, parsed, id_, created)
    for index, item in enumerate(final["output"]):
        yield from _item_events(index, item)
    last = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield last, {"response": final}


def _failed(failure: Failure, parsed: Parsed) -> Iterator[tuple[str, Json]]:
    id_, created = f"resp_{uuid.uuid4().hex}", int(time.time())
    yield "response.created", {"response": _envelope(parsed, id_, created, "in_progress")}
    failed = _envelope(parsed, id_, created, "failed")
    failed["error"] = {"code": failure.code or failure.kind, "message": failure.message}
    yield "response.failed", {"response": failed}


async def _chunks(events: Iterator[bytes]) -> Any:
    for chunk in events:
        yield chunk


class Responses(Dialect):
    """``POST /v1/responses``: OpenAI Responses, JSON and SSE (module docstring)."""

    name = "responses"
    paths = ("v1/responses", "responses")

    def parse(
        self, raw: str | bytes, default_model: str, route: Mapping[str, str] = _EMPTY
    ) -> Parsed:
        return parse_responses_body(raw, default_model)

    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        if parsed.stream:
            return sse_response(_chunks(_numbered(_stream(response, parsed))))
        id_, created = f"resp_{uuid.uuid4().hex}", int(time.time())
        body = _finished(response, parsed, id_, created)
        return Response(json.dumps(body), mimetype="application/json")

    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        if parsed is not None and parsed.stream and failure.kind == "upstream_error":
            return sse_response(_chunks(_numbered(_failed(failure, parsed))))
        return error_response(failure.message, failure.status, failure.kind, failure.code)
