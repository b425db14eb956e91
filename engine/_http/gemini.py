"""Google's Gemini API dialect (``POST /v1beta/models/<model>:generateContent`` and
``:streamGenerateContent``, what the google-genai SDKs and gemini-cli speak).

In: the key as ``x-goog-api-key``, ``?key=`` or a bearer token; the model from the
URL (``models/<model>``, slashes allowed); ``systemInstruction`` (a content or a
string: the first system message); ``contents``, each ``{role, parts}`` with role
``user`` (or none) or ``model`` (``function``/``tool`` read as ``user``). Parts:
``text`` (the texts of one content joined by newlines), ``inlineData``/``fileData``
images (a data URL, or the file's URI), ``functionCall`` (a tool call; ``args``
become the arguments' JSON; a call without ``id`` gets ``call_<content>_<part>``)
and ``functionResponse`` (a tool message, placed before the rest of its content,
answering the earlier call of that ``id``, or else the oldest unanswered call of
that ``name``; ``response`` ``{"output": X}`` reads as X, ``{"error": X}`` as
``Error: X``, any other object as its JSON). Thought parts (``thought: true``) and
server-side code execution parts are dropped (a chat model's conversation has no
reasoning); other parts are refused. ``tools[].functionDeclarations`` pass on as
chat tool schemas (``parametersJsonSchema`` as is; ``parameters``, Google's
OpenAPI subset, with its upper-case type names lowered); Google's own tools
(``googleSearch``, ``codeExecution``, ...) are dropped. ``toolConfig.
functionCallingConfig.mode`` (``AUTO``/``ANY``/``NONE``; ``ANY`` with one allowed
name is that function), and ``generationConfig``'s ``temperature``, ``topP``,
``maxOutputTokens``, ``seed`` and ``stopSequences`` become sampling (the chat
names); ``candidateCount`` above 1 and ``cachedContent`` are refused (this server
answers one candidate and stores nothing); ``topK``, ``thinkingConfig``,
``responseMimeType``, ``safetySettings`` and the like are ignored.

Out: a ``GenerateContentResponse``: one candidate whose content (role ``model``)
holds a text part, then one ``functionCall`` part (with ``id``) per tool call;
``finishReason`` ``STOP`` (also for tool calls, as Gemini answers) or
``MAX_TOKENS``; ``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount``,
``totalTokenCount``); ``modelVersion``; ``responseId``. ``:streamGenerateContent``
answers SSE with ``?alt=sse`` (``data:`` events, one response chunk each: the text
word by word, then the calls, the last chunk with ``finishReason`` and usage), else
a JSON array of the same chunks. ``:countTokens`` answers ``{"totalTokens": n}``
(an estimate, never a model call or a turn). Errors take Google's shape
``{"error": {"code", "message", "status", "details"}}``, the failure's kind (and a
stop's condition) in a ``google.rpc.ErrorInfo`` detail (``reason``,
``metadata``); a refused (stopped) turn answers 400 ``FAILED_PRECONDITION``, which
gemini-cli and the SDKs do not retry.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from quart import Response

from taketurns._errors import BadRequest
from taketurns._http.dialect import (
    Dialect,
    Failure,
    Parsed,
    bearer,
    estimate_tokens,
    load_object,
    sse_event,
    sse_response,
    words,
)
from taketurns._models.messages import (
    AssistantMessage,
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

__all__ = ["Gemini", "parse_gemini_body"]

Json = dict[str, Any]
Part = TextPart | ImagePart
_EMPTY: Mapping[str, str] = MappingProxyType({})
_DROPPED_PARTS = frozenset({"executableCode", "codeExecutionResult", "thoughtSignature"})
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}
# the canonical status of each HTTP status this server answers (google.rpc.Code)
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    424: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_MODEL_RULE = "models/<path:model>:"
_VERBS = "<any(generateContent,streamGenerateContent):verb>"


# -- requests ----------------------------------------------------------------------------


class _Calls:
    """The tool calls of the conversation so far, for the responses answering them:
    by ``id``, else the oldest unanswered call of the response's ``name``."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # call id -> function name
        self.open: list[ToolCall] = []

    def add(self, call: ToolCall) -> None:
        self.names[call.id] = call.name
        self.open.append(call)

    def answer(self, call_id: Any, name: str) -> str:
        if isinstance(call_id, str) and call_id:
            self.open = [c for c in self.open if c.id != call_id]
            return call_id
        for i, call in enumerate(self.open):
            if call.name == name:
                del self.open[i]
                return call.id
        return f"call_{name}"


def _text_parts(raw: Any, where: str) -> list[Json]:
    """The ``parts`` of a content (a string stands for one text part)."""
    if isinstance(raw, str):
        return [{"text": raw}]
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise BadRequest(f"{where} must be a list of part objects")
    return raw


def _image(part: Json, where: str) -> ImagePart | None:
    """An image part; None for one that is no image (refused by the caller)."""
    inline, file = part.get("inlineData"), part.get("fileData")
    if isinstance(inline, dict) and isinstance(inline.get("data"), str):
        mime = inline.get("mimeType") or "image/png"
        if isinstance(mime, str) and mime.startswith("image/"):
            return ImagePart(f"data:{mime};base64,{inline['data']}")
    if isinstance(file, dict) and isinstance(file.get("fileUri"), str):
        mime = file.get("mimeType") or ""
        if isinstance(mime, str) and mime.startswith("image/"):
            return ImagePart(file["fileUri"])
    if inline is not None or file is not None:
        raise BadRequest(f"{where} must be an image (inlineData or fileData of an image/* type)")
    return None


def _response_text(response: Any) -> str:
    if isinstance(response, dict) and set(response) == {"output"}:
        output = response["output"]
        return output if isinstance(output, str) else json.dumps(output)
    if isinstance(response, dict) and set(response) == {"error"}:
        error = response["error"]
        return f"Error: {error if isinstance(error, str) else json.dumps(error)}"
    return json.dumps(response)


def _content_value(parts: list[Part]) -> str | tuple[Part, ...]:
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return tuple(parts)


def _user(raw: Any, calls: _Calls, where: str) -> list[Message]:
    """A user content: its function responses first (they answer the calls before
    them), then the rest as one user message."""
    results: list[Message] = []
    parts: list[Part] = []
    for i, part in enumerate(_text_parts(raw, f"{where}.parts")):
        here = f"{where}.parts[{i}]"
        response = part.get("functionResponse")
        if response is not None:
            if not isinstance(response, dict) or not isinstance(response.get("name"), str):
                raise BadRequest(f"{here}.functionResponse needs a string 'name'")
            call_id = calls.answer(response.get("id"), response["name"])
            text = _response_text(response.get("response", {}))
            results.append(ToolMessage(call_id, text, response["name"]))
        elif isinstance(part.get("text"), str):
            if not part.get("thought"):
                parts.append(TextPart(part["text"]))
        else:
            image = _image(part, here)
            if image is not None:
                parts.append(image)
            elif not _DROPPED_PARTS & set(part):
                raise BadRequest(f"{here} must be a text, image or functionResponse part")
    return results + ([UserMessage(_content_value(parts))] if parts else [])


def _model(raw: Any, calls: _Calls, where: str, index: int) -> AssistantMessage:
    texts: list[str] = []
    found: list[ToolCall] = []
    for i, part in enumerate(_text_parts(raw, f"{where}.parts")):
        here = f"{where}.parts[{i}]"
        call = part.get("functionCall")
        if call is not None:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise BadRequest(f"{here}.functionCall needs a string 'name'")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = f"call_{index}_{i}"
            args = call.get("args", {})
            found.append(ToolCall(call_id, call["name"], json.dumps(args)))
        elif isinstance(part.get("text"), str):
            if not part.get("thought"):
                texts.append(part["text"])
        elif not _DROPPED_PARTS & set(part):
            raise BadRequest(f"{here} must be a text or functionCall part")
    for call in found:
        calls.add(call)
    return AssistantMessage("\n".join(texts) or None, tuple(found))


def messages_from_body(body: Json) -> list[Message]:
    """The conversation in a ``generateContent`` body: ``systemInstruction``, then
    ``contents``."""
    out: list[Message] = []
    system = body.get("systemInstruction")
    if system is not None:
        raw = system.get("parts") if isinstance(system, dict) else system
        texts = [p.get("text") for p in _text_parts(raw, "systemInstruction.parts")]
        text = "\n".join(t for t in texts if isinstance(t, str))
        if text:
            out.append(SystemMessage(text))
    contents = body.get("contents")
    if isinstance(contents, str):
        contents = [{"role": "user", "parts": [{"text": contents}]}]
    if not isinstance(contents, list) or not contents:
        raise BadRequest("'contents' is required: a non-empty list of content objects")
    calls = _Calls()
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        if not isinstance(content, dict):
            raise BadRequest(f"{where} must be an object")
        role = content.get("role") or "user"
        if role in ("user", "function", "tool"):
            out += _user(content.get("parts", []), calls, where)
        elif role == "model":
            out.append(_model(content.get("parts", []), calls, where, i))
        else:
            raise BadRequest(f"{where}.role must be user or model (got {role!r})")
    return out


def _json_schema(schema: Any) -> Any:
    """Google's OpenAPI-subset schema as JSON Schema: type names lower-cased."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _tools(raw: Any) -> list[Json]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise BadRequest("'tools' must be a list of tool objects")
    out = []
    for i, tool in enumerate(raw):
        declarations = tool.get("functionDeclarations") or []  # else Google's own tools
        if not isinstance(declarations, list):
            raise BadRequest(f"'tools[{i}].functionDeclarations' must be a list")
        for j, fn in enumerate(declarations):
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise BadRequest(f"'tools[{i}].functionDeclarations[{j}]' needs a string 'name'")
            parameters = fn.get("parametersJsonSchema")
            if parameters is None:
                parameters = _json_schema(fn.get("parameters") or {"type": "object"})
            spec = {"name": fn["name"], "parameters": parameters}
            if isinstance(fn.get("description"), str):
                spec["description"] = fn["description"]
            out.append({"type": "function", "function": spec})
    return out


def _integer(config: Json, key: str) -> int | None:
    value = config.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise BadRequest(f"'generationConfig.{key}' must be an integer (got {value!r})")
    return value


def _sampling(body: Json, has_tools: bool) -> dict[str, Any]:
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        raise BadRequest("'generationConfig' must be an object")
    sampling: dict[str, Any] = {}
    for key, name in (("temperature", "temperature"), ("topP", "top_p")):
        if config.get(key) is not None:
            sampling[name] = config[key]
    for key, name in (("maxOutputTokens", "max_tokens"), ("seed", "seed")):
        value = _integer(config, key)
        if value is not None:
            sampling[name] = value
    if (_integer(config, "candidateCount") or 1) > 1:
        raise BadRequest("'generationConfig.candidateCount' must be 1: one candidate is answered")
    stop = config.get("stopSequences")
    if isinstance(stop, list) and stop:
        sampling["stop"] = stop
    calling = (body.get("toolConfig") or {}).get("functionCallingConfig")
    if has_tools and isinstance(calling, dict):
        mode = _MODES.get(str(calling.get("mode", "")).upper())
        allowed = calling.get("allowedFunctionNames")
        if mode == "required" and isinstance(allowed, list) and len(allowed) == 1:
            sampling["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
        elif mode is not None:
            sampling["tool_choice"] = mode
    return sampling


def parse_gemini_body(raw: str | bytes, model: str, *, stream: bool = False) -> Parsed:
    """The request in a ``generateContent`` body for ``model`` (from the URL);
    ``stream``: the client asked for ``:streamGenerateContent``."""
    body = load_object(raw)
    if "cachedContent" in body:
        raise BadRequest(
            "'cachedContent' is not supported: this server stores no content; "
            "send the whole conversation in 'contents'"
        )
    messages = messages_from_body(body)
    tools = _tools(body.get("tools"))
    request = ModelRequest(model, tuple(messages), tuple(tools), _sampling(body, bool(tools)))
    return Parsed(request, stream)


# -- answers ----------------------------------------------------------------------------


def _call_part(call: ToolCall) -> Json:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):  # the model wrote no JSON object: say so
        args = {"arguments": call.arguments}
    call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
    return {"functionCall": {"id": call_id, "name": call.name, "args": args}}


def _usage(response: ModelResponse) -> Json:
    usage = response.usage
    return {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total_tokens,
    }


def _chunk(parts: list[Json], model: str, id_: str) -> Json:
    candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
    return {"candidates": [candidate], "modelVersion": model, "responseId": id_}


def _finish(response: ModelResponse) -> str:
    return _FINISH.get(response.finish_reason or "stop", "STOP")


def response_json(response: ModelResponse, model: str, id_: str) -> Json:
    """The ``GenerateContentResponse`` for ``response``."""
    message = response.message
    text = text_of(message.content)
    parts: list[Json] = [{"text": text}] if text or not message.tool_calls else []
    parts += [_call_part(call) for call in message.tool_calls]
    body = _chunk(parts, model, id_)
    body["candidates"][0]["finishReason"] = _finish(response)
    body["usageMetadata"] = _usage(response)
    return body


def stream_chunks(response: ModelResponse, model: str, id_: str) -> Iterator[Json]:
    """The chunks of a streamed answer: the text word by word, then the calls; the
    last chunk carries ``finishReason`` and ``usageMetadata``."""
    message = response.message
    parts: list[list[Json]] = [[{"text": w}] for w in words(text_of(message.content))]
    if message.tool_calls:
        parts.append([_call_part(call) for call in message.tool_calls])
    if not parts:
        parts.append([{"text": ""}])
    for i, chunk_parts in enumerate(parts):
        chunk = _chunk(chunk_parts, model, id_)
        if i == len(parts) - 1:
            chunk["candidates"][0]["finishReason"] = _finish(response)
            chunk["usageMetadata"] = _usage(response)
        yield chunk


async def _sse(chunks: list[Json]) -> Any:
    for chunk in chunks:
        yield sse_event(None, chunk)


def gemini_error(failure: Failure) -> Response:
    metadata = {"stop_condition": failure.code} if failure.code is not None else {}
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": failure.kind.upper(),
        "domain": "taketurns",
        "metadata": metadata,
    }
    status = _STATUS.get(failure.status, "UNKNOWN")
    if failure.kind == "rollout_stopped":
        status = "FAILED_PRECONDITION"
    error = {"code": failure.status, "message": failure.message, "status": status}
    body = {"error": {**error, "details": [info]}}
    return Response(json.dumps(body), status=failure.status, mimetype="application/json")


class Gemini(Dialect):
    """``POST /v1beta/models/<model>:generateContent`` / ``:streamGenerateContent``:
    Google's Gemini API, JSON and SSE (module docstring)."""

    name = "gemini"
    auth_hint = "'x-goog-api-key: <key>' (or ?key=<key>, or 'Authorization: Bearer <key>')"
    paths = (f"v1beta/{_MODEL_RULE}{_VERBS}", f"v1/{_MODEL_RULE}{_VERBS}")
    count_paths = (f"v1beta/{_MODEL_RULE}countTokens", f"v1/{_MODEL_RULE}countTokens")

    def secret(self, headers: Mapping[str, str], query: Mapping[str, str] = _EMPTY) -> str | None:
        key = (headers.get("x-goog-api-key") or query.get("key") or "").strip()
        return key or bearer(headers)

    def parse(
        self, raw: str | bytes, default_model: str, route: Mapping[str, str] = _EMPTY
    ) -> Parsed:
        model, verb = route.get("model") or default_model, route.get("verb")
        if verb is None:  # :countTokens, whose body may wrap a generateContent request
            body = load_object(raw)
            inner = body.get("generateContentRequest")
            if "contents" not in body and isinstance(inner, dict):
                raw = json.dumps(inner)
        parsed = parse_gemini_body(raw, model, stream=verb == "streamGenerateContent")
        sse = route.get("alt") == "sse"
        return Parsed(parsed.request, parsed.stream, {"sse": sse})

    def answer(self, response: ModelResponse, parsed: Parsed) -> Response:
        id_, model = uuid.uuid4().hex, parsed.request.model
        if not parsed.stream:
            body = json.dumps(response_json(response, model, id_))
            return Response(body, mimetype="application/json")
        chunks = list(stream_chunks(response, model, id_))
        if parsed.options.get("sse"):
            return sse_response(_sse(chunks))
        return Response(json.dumps(chunks), mimetype="application/json")

    def error(self, failure: Failure, parsed: Parsed | None = None) -> Response:
        return gemini_error(failure)

    def count_tokens(self, parsed: Parsed) -> Json:
        return {"totalTokens": estimate_tokens(parsed.request)}
