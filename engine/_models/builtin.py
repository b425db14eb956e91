"""The built-in model: deterministic scripted policies served in process.

``builtin/<policy>`` names it; options ride in a query string, e.g.
``builtin/bracket?latency_ms=50&seed=3``. Policies:

- ``echo``: repeats the last user text.
- ``bracket``: when the latest user text (or, before any user message, the latest
  system text) offers bracketed options such as ``[check] [bet]``, answers with
  exactly one of them, chosen by a hash of the conversation and the seed (the
  request's ``seed``, which the engine sends with every call, else the model's
  ``seed`` option); otherwise a short
  sentence. Markdown links (``[text](url)``) are not options, and system messages an
  agent CLI appends after the user's (Claude Code's environment notes) are not the
  prompt.
- ``tools``: when tools are offered and none has been called since the last user
  message, calls the first one with arguments derived from the user's text; then
  answers with the latest result. An instruction that names an offered tool
  (``call tool NAME``) is followed: in the user's text it picks the tool called
  instead of the first; in the latest tool result it chains one more call to that
  tool (arguments derived from the result's text) unless the tool was already called
  since the last user message. Without tools it behaves like ``bracket``.
- ``judge``: a deterministic LLM judge (``_exchange.judge``): when the latest user
  text holds ``<reference>R</reference>`` and ``<response>T</response>`` it answers
  ``VERDICT: CORRECT`` if R (stripped, case-folded) appears in T, else ``VERDICT:
  INCORRECT``; without both tags its answer holds no verdict.
- a plugin's own, registered with ``register_policy`` (public as
  ``taketurns.env.register_builtin_policy``).

Token counts are whitespace word counts: cheap, deterministic, good enough for limits.
Asked for tokens as a vLLM server is (``logprobs`` or ``return_token_ids`` in the
sampling), the response also carries prompt and completion token ids and logprobs
from a toy tokenizer (``taketurns._models.tokens``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import attrs
import trio

from taketurns._errors import ConfigError
from taketurns._models.delay import FixedDelay
from taketurns._models.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    text_of,
)
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse, Usage
from taketurns._models.tokens import completion_ids, logprobs_of, prompt_ids

__all__ = ["POLICIES", "BuiltinModel", "is_builtin", "register_policy"]

PREFIX = "builtin/"
_OPTION = re.compile(r"\[([^\[\]\n]{1,40})\](?!\()")  # a markdown link is no option
_NAMED_TOOL = re.compile(r"\bcall tool `?([A-Za-z_]\w*(?:[.-]\w+)*)")  # no final "."
_SENTENCE = "I have nothing to choose here, so I will simply say hello."


def is_builtin(model: str | None) -> bool:
    return model is None or model.startswith(PREFIX)


def _digest(messages: Sequence[Message], seed: int) -> int:
    h = hashlib.blake2b(str(seed).encode(), digest_size=8)
    for m in messages:
        h.update(m.role.encode())
        h.update(text_of(m.content).encode())
    return int.from_bytes(h.digest(), "big")


def _latest_prompt_text(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if isinstance(m, UserMessage):
            return text_of(m.content)
    for m in reversed(messages):
        if isinstance(m, SystemMessage):
            return text_of(m.content)
    return ""


def echo(request: ModelRequest, seed: int) -> AssistantMessage:
    for m in reversed(request.messages):
        if isinstance(m, UserMessage):
            return AssistantMessage(text_of(m.content))
    return AssistantMessage("")


def bracket(request: ModelRequest, seed: int) -> AssistantMessage:
    options = list(dict.fromkeys(_OPTION.findall(_latest_prompt_text(request.messages))))
    if not options:
        return AssistantMessage(_SENTENCE)
    choice = options[_digest(request.messages, seed) % len(options)]
    return AssistantMessage(f"[{choice}]")


def _derive_arguments(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    params = schema.get("parameters") or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    args: dict[str, Any] = {}
    words = re.findall(r"[\w@.\-#]+", text)
    for name in params.get("required") or list(props):
        kind = (props.get(name) or {}).get("type", "string")
        named = re.search(rf"{re.escape(name)}\s*[=:]\s*\"?([^\s\",]+)", text)
        if kind == "integer" or kind == "number":
            number = re.search(r"-?\d+", named.group(1) if named else text)
            args[name] = int(number.group()) if number else 0
        elif kind == "boolean":
            args[name] = True
        else:
            args[name] = named.group(1) if named else (words[-1] if words else "")
    return args


def _named(text: str, offered: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The first offered tool ``text`` tells to call (``call tool NAME``), if any."""
    return next((n for n in _NAMED_TOOL.findall(text) if n in offered), None)


def _call(fn: Mapping[str, Any], text: str, call_id: str) -> AssistantMessage:
    args = _derive_arguments(fn, text)
    return AssistantMessage(None, (ToolCall(call_id, fn.get("name", "tool"), json.dumps(args)),))


def tools(request: ModelRequest, seed: int) -> AssistantMessage:
    if not request.tools:
        return bracket(request, seed)
    offered = {f.get("name", "tool"): f for f in (t.get("function", {}) for t in request.tools)}
    since_user: list[Message] = []
    for m in reversed(request.messages):
        if isinstance(m, UserMessage):
            break
        since_user.append(m)
    call_id = f"call_{_digest(request.messages, seed) % 10**8:08d}"
    results = [m for m in since_user if isinstance(m, ToolMessage)]
    if results:
        latest = text_of(results[0].content)
        called = {
            c.name for m in since_user if isinstance(m, AssistantMessage) for c in m.tool_calls
        }
        chained = _named(latest, offered)
        if chained is not None and chained not in called:
            return _call(offered[chained], latest, call_id)
        return AssistantMessage(f"The tool said: {latest}")
    text = _latest_prompt_text(request.messages)
    name = _named(text, offered)
    fn = offered[name] if name is not None else request.tools[0].get("function", {})
    return _call(fn, text, call_id)


_TAGGED = {
    name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL) for name in ("reference", "response")
}


def judge(request: ModelRequest, seed: int) -> AssistantMessage:
    text = _latest_prompt_text(request.messages)
    found = {name: pattern.findall(text) for name, pattern in _TAGGED.items()}
    if not (found["reference"] and found["response"]):
        return AssistantMessage("I cannot judge this: I see no <reference> and <response>.")
    reference = found["reference"][-1].strip().casefold()
    response = found["response"][-1].strip().casefold()
    correct = bool(reference) and reference in response
    return AssistantMessage(f"VERDICT: {'CORRECT' if correct else 'INCORRECT'}")


Policy = Callable[[ModelRequest, int], AssistantMessage]
POLICIES: dict[str, Policy] = {"echo": echo, "bracket": bracket, "tools": tools, "judge": judge}


def register_policy(name: str, policy: Policy) -> None:
    """Serve ``policy`` as ``builtin/<name>`` (a plugin's scripted policy, e.g. a game
    solver's: registered when its module is imported). ``policy(request, seed)``
    returns the assistant message, deterministically for the same request and seed.
    Raises ``ValueError`` for a name already taken by another policy or one that is
    not a plain word (letters, digits, ``-``, ``_``)."""
    if not re.fullmatch(r"[A-Za-z0-9][\w-]*", name):
        raise ValueError(f"register_policy: {name!r} is not a policy name (letters, digits, -, _)")
    if POLICIES.get(name, policy) is not policy:
        raise ValueError(f"register_policy: builtin/{name} is already another policy")
    POLICIES[name] = policy


def _words(messages: Sequence[Message]) -> int:
    # spaces + 1 per message: a word count without building the word lists
    return sum(text_of(m.content).count(" ") + 2 for m in messages)


class BuiltinModel(ModelClient):
    """A scripted model called in process. ``complete`` is a checkpoint: it sleeps
    ``latency`` seconds (or just checkpoints when latency is 0); its concurrent calls
    share one timer (``taketurns._models.delay``)."""

    def __init__(
        self, policy: str = "bracket", *, latency: float = 0.0, seed: int = 0, field: str = "model"
    ):
        if policy not in POLICIES:
            raise ConfigError(
                f"{field}: unknown built-in policy {policy!r}; "
                f"choose one of {', '.join(f'builtin/{p}' for p in sorted(POLICIES))}"
            )
        self.policy = policy
        self.latency = latency
        self.seed = seed
        self._fn = POLICIES[policy]
        self._delay = FixedDelay(latency) if latency > 0 else None

    @classmethod
    def from_model_name(cls, model: str | None, *, field: str = "model") -> BuiltinModel:
        """Parse ``builtin/<policy>[?latency_ms=N&seed=S]``; None means the default."""
        if model is None:
            return cls()
        spec, _, query = model.removeprefix(PREFIX).partition("?")
        try:
            opts = {k: float(v) for k, v in parse_qsl(query, strict_parsing=bool(query))}
        except ValueError as exc:
            raise ConfigError(
                f"{field}: {model!r} has a bad option string; "
                "use builtin/<policy>?latency_ms=N&seed=S"
            ) from exc
        unknown = set(opts) - {"latency_ms", "seed"}
        if unknown:
            raise ConfigError(
                f"{field}: {model!r} has unknown options {sorted(unknown)}; "
                "accepted: latency_ms, seed"
            )
        return cls(
            spec or "bracket",
            latency=opts.get("latency_ms", 0.0) / 1000,
            seed=int(opts.get("seed", 0)),
            field=field,
        )

    def respond(self, request: ModelRequest) -> ModelResponse:
        """The answer, computed synchronously (no latency): for servers and tests."""
        seed = request.sampling.get("seed")
        message = self._fn(request, self.seed if seed is None else int(seed))
        completion = len(text_of(message.content).split()) + 4 * len(message.tool_calls)
        max_tokens = request.sampling.get("max_tokens")
        finish = "tool_calls" if message.tool_calls else "stop"
        if max_tokens is not None and completion > max_tokens and not message.tool_calls:
            kept = text_of(message.content).split()[: max(int(max_tokens), 0)]
            message, completion, finish = AssistantMessage(" ".join(kept)), len(kept), "length"
        usage = Usage(_words(request.messages), completion)
        response = ModelResponse(message, usage, finish, policy_version=request.model)
        if request.sampling.get("logprobs") or request.sampling.get("return_token_ids"):
            return _with_tokens(response, request)
        return response

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self._delay is not None:
            await self._delay.wait()
        else:
            await trio.lowlevel.checkpoint()
        return self.respond(request)


def _with_tokens(response: ModelResponse, request: ModelRequest) -> ModelResponse:
    """``response`` with the toy tokenizer's ids and logprobs, as vLLM returns them."""
    finished = response.finish_reason != "length"
    ids = completion_ids(response.message, finished=finished)
    return attrs.evolve(
        response,
        token_ids=ids,
        stop_token="sampled" if finished else None,  # its END is the last completion id
        prompt_token_ids=prompt_ids(request.messages),
        logprobs=logprobs_of(ids),
    )
