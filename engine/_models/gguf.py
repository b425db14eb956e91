"""Real token ids for turns served by llama-cpp-python's server, from the GGUF's own
tokenizer and chat template.

The server (0.3.x) returns neither ``prompt_token_ids`` nor completion ids. Both are
recovered here, exactly, with llama.cpp's vocabulary-only loader (``Llama(path,
vocab_only=True)``: the tokenizer and metadata, no weights) and the server's own code:

- **Prompt ids**: the request body goes through the server's request model
  (``llama_cpp.server.types.CreateChatCompletionRequest``, the same ``model_dump``)
  into ``Llama.create_chat_completion``, which picks the chat handler as the server
  does (the GGUF's ``tokenizer.chat_template``, or the built-in format it matches),
  renders the template and tokenizes the prompt; the call that would generate is
  intercepted and its prompt ids kept. So the ids are what the server's own code
  makes of the same request, checked against the server's ``usage.prompt_tokens``.
- **Completion ids**: the server reports each completion token's text
  (``logprobs.content[*].token``, with its logprob: requested with ``logprobs`` and
  ``top_logprobs``). Each text is looked up in the vocabulary (every token's
  piece, decoded as the server decodes it); where several tokens share a text (byte
  fragments of a multi-byte character, control tokens), the one whose bytes continue
  the reply's text is taken. The ids are kept only if exactly one sequence fits
  the reply byte for byte and its length is ``usage.completion_tokens``: never a
  re-tokenization of the reply's text.

Not recoverable through this server (docs/train/samples.md): the end-of-generation
token that ended a reply and its logprob. ``Llama._create_completion`` breaks out of
its loop on any end-of-generation token before it keeps, counts or reports it, and
SmolLM2 has three (``<|endoftext|>`` 0, ``<|im_end|>`` 2, ``<reponame>`` 4), each of
nonzero probability at temperature 1 over the whole vocabulary: which one ended the
reply is not in the response, so none is appended (it would be a guess). A reply that
ended on one (``finish_reason`` ``stop``) says so: ``stop_token`` ``dropped``; the next
prompt's template inserts ``<|im_end|>`` there.

Tools under ``chatml-function-calling`` (``FUNCTION_CALLING``; a request with tools
and a ``tool_choice`` other than ``none``): the format picks a message or a call
greedily under a grammar, then samples the reply under another grammar (a call's
arguments under its JSON schema's, a message under the follow-up grammar), while the
logprobs the server reports are the unconstrained model's. So such a turn's token
data says what it lacks (``token_gap``): a tool call comes back with no completion
ids or logprobs at all (``TOOL_CALL_GAP``; a single call keeps its exact prompt ids,
the rendered prompt and the ``functions.NAME:`` choice its arguments were sampled
after, checked against the server's count); a message keeps its exact ids but not the
logprobs, which are not the sampler's (``GRAMMAR_GAP``).

The final-turn check: the reply is rendered into a next prompt (the request's messages
and the reply, through the same template) and the tokens at the completion's positions
are compared with the sampled ones; where they differ they are kept as
``retokenized`` (``taketurns._exchange.divergence``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from taketurns._models.model import ModelResponse
from taketurns._models.wire import messages_to_wire

__all__ = ["FUNCTION_CALLING", "GRAMMAR_GAP", "TOOL_CALL_GAP", "GgufTokens", "gguf_tokens"]

#: llama-cpp-python's chat format that samples every turn given tools under a grammar
FUNCTION_CALLING = "chatml-function-calling"
TOOL_CALL_GAP = (
    "tool call: chatml-function-calling samples it in several grammar-constrained "
    "completions and the server returns no completion ids or logprobs for it"
)
GRAMMAR_GAP = (
    "no logprobs: chatml-function-calling sampled this reply under a grammar, and the "
    "server reports the unconstrained model's logprobs, not the sampler's"
)
_SEARCH_STEPS = 100_000  # bound on the completion-id search (a pathological reply gives up)
_cache: dict[tuple[Path, str | None], GgufTokens] = {}
_lock = threading.Lock()


def gguf_tokens(path: Path, chat_format: str | None = None) -> GgufTokens:
    """The (cached) token view of the GGUF at ``path`` served with ``chat_format``
    (None: the GGUF's own template); closed at interpreter exit."""
    with _lock:
        key = (path, chat_format)
        if key not in _cache:
            if not _cache:
                atexit.register(_close_all)
            _cache[key] = GgufTokens(path, chat_format)
        return _cache[key]


def _close_all() -> None:
    """Free the cached vocabularies while llama.cpp's bindings still exist (left to
    the garbage collector at shutdown, their finalizer fails noisily)."""
    with _lock:
        for tokens in _cache.values():
            tokens.close()
        _cache.clear()


class _Captured(Exception):  # control flow: never escapes this module
    def __init__(self, prompt: list[int] | str) -> None:
        self.prompt = prompt


def _capture(*, prompt: Any, **_: Any) -> Any:
    # a Jinja template's handler passes token ids; chatml-function-calling, its text
    raise _Captured(prompt if isinstance(prompt, str) else list(prompt))


# chatml-function-calling, asked to choose, appends the choice it made under its
# grammar ("message:\n") to the prompt before it samples a message
_MESSAGE_CHOICE = "message:\n"


class GgufTokens:
    """Prompt and completion ids of chat requests to llama-cpp-python's server for
    the GGUF at ``path``, rendered with ``chat_format`` as the server is started
    with (None: the GGUF's own template; module docstring). Loading takes the
    vocabulary only (and indexes every token's text: about half a second for 49k
    tokens)."""

    def __init__(self, path: Path, chat_format: str | None = None) -> None:
        import llama_cpp
        from llama_cpp.server.types import CreateChatCompletionRequest

        self.path = path
        self._request_model = CreateChatCompletionRequest
        with _quiet_stderr():  # llama.cpp warns of a context it never uses, in C
            self._llama = llama_cpp.Llama(
                str(path),
                vocab_only=True,
                verbose=False,
                n_ctx=8,
                n_batch=8,
                chat_format=chat_format,
            )
        # generation is intercepted: the chat handler's prompt ids are the result
        vars(self._llama)["create_completion"] = _capture
        self._pieces: dict[str, tuple[tuple[int, bytes], ...]] | None = None
        self._render_lock = threading.Lock()
        self._index()  # now, not inside the first turn (~0.5 s for 49k tokens)

    @property
    def chat_format(self) -> str | None:
        """The chat format the server picks for this GGUF (``chat_template.default``:
        the GGUF's own Jinja template)."""
        return self._llama.chat_format

    @property
    def chat_template(self) -> str:
        """The GGUF's own Jinja chat template (empty when it has none)."""
        return str(self._llama.metadata.get("tokenizer.chat_template", ""))

    def prompt_ids(
        self, body: Mapping[str, Any], *, count: int | None = None, choice: str = _MESSAGE_CHOICE
    ) -> list[int] | None:
        """The prompt ids the server makes of the request ``body``, or None when its
        request model refuses the body. ``count``: the server's ``usage.prompt_tokens``;
        a text prompt (chatml-function-calling's) that it does not count is tried with
        the format's ``choice`` appended (the message choice, or a single call's
        ``functions.NAME:``), the prompt it samples the reply after."""
        prompt = self._render(body)
        if not isinstance(prompt, str):
            return prompt
        ids = self._tokenize(prompt)
        if count is not None and len(ids) != count:
            ids = self._tokenize(prompt + choice)
        return ids

    def _tokenize(self, text: str) -> list[int]:
        """``text``'s ids as ``Llama.create_completion`` makes them of a text prompt."""
        return list(self._llama.tokenize(text.encode("utf-8"), special=True))

    def _render(self, body: Mapping[str, Any]) -> list[int] | str | None:
        try:
            request = self._request_model(**body)
        except ValueError:
            return None
        kwargs = request.model_dump(exclude={"n", "logit_bias_type", "user", "min_tokens"})
        kwargs["stream"] = False
        with self._render_lock:  # the handler is not known to be thread-safe
            try:
                self._llama.create_chat_completion(**kwargs)
            except _Captured as captured:
                return captured.prompt
        return None  # pragma: no cover - the handler always generates

    def completion_ids(self, text: str | None, pieces: Sequence[str]) -> list[int] | None:
        """The one token sequence whose pieces are ``pieces`` and whose bytes are the
        reply ``text`` (see the module docstring), or None when none or several fit."""
        index = self._index()
        target = (text or "").encode("utf-8")
        options = [index.get(piece, ()) for piece in pieces]
        if not all(options):
            return None
        solutions = _search(options, target)
        return solutions[0] if len(solutions) == 1 else None

    def close(self) -> None:
        """Free the vocabulary (llama.cpp's memory). Idempotent."""
        self._llama.close()

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return bytes(self._llama.detokenize(list(ids)))

    def annotate(
        self, response: ModelResponse, body: Mapping[str, Any], pieces: Sequence[str] | None
    ) -> ModelResponse:
        """``response`` with ``prompt_token_ids`` and ``token_ids`` set where they are
        exact: each must also match the server's usage count."""
        calls = response.message.tool_calls
        # one call's usage counts the prompt its arguments were sampled after
        choice = f"functions.{calls[0].name}:\n" if len(calls) == 1 else _MESSAGE_CHOICE
        prompt = self.prompt_ids(body, count=response.usage.prompt_tokens, choice=choice)
        if prompt is not None and len(prompt) != response.usage.prompt_tokens:
            prompt = None
        completion = None
        if pieces is not None and response.logprobs is not None:
            text = response.message.content if isinstance(response.message.content, str) else ""
            completion = self.completion_ids(text, pieces)
            if completion is not None and len(completion) != response.usage.completion_tokens:
                completion = None
        again = None
        if prompt is not None and completion is not None:
            again = self.retokenized(body, response, len(prompt), completion)
        gap, logprobs = None, response.logprobs
        if self._grammar_constrained(body):
            gap = TOOL_CALL_GAP if response.message.tool_calls else GRAMMAR_GAP
            logprobs = None
        return attrs.evolve(
            response,
            prompt_token_ids=prompt,
            token_ids=completion,
            logprobs=logprobs,
            stop_token=self._stop(response, completion),
            retokenized=again,
            token_gap=gap,
        )

    def _grammar_constrained(self, body: Mapping[str, Any]) -> bool:
        """Whether the server samples ``body``'s reply under a grammar of its chat
        format (module docstring): ``FUNCTION_CALLING`` given tools to choose from."""
        choice = body.get("tool_choice")
        chosen = choice is not None and choice != "none"
        return self.chat_format == FUNCTION_CALLING and bool(body.get("tools")) and chosen

    def _stop(self, response: ModelResponse, completion: list[int] | None) -> str | None:
        """``dropped`` for a reply the end-of-generation token ended: ``stop``, its ids
        spelling exactly its text (a ``stop`` string ends it with the string's tokens
        still in the ids, the text cut before them: no stop token then)."""
        if response.finish_reason != "stop" or completion is None:
            return None
        text = response.message.content if isinstance(response.message.content, str) else ""
        return "dropped" if self.detokenize(completion) == text.encode("utf-8") else None

    def retokenized(
        self, body: Mapping[str, Any], response: ModelResponse, start: int, completion: list[int]
    ) -> list[int] | None:
        """The tokens a next prompt holds at the completion's positions (``start`` on)
        once the reply is rendered into it, when they differ from ``completion``."""
        reply = messages_to_wire((response.message,))[0]
        if reply.get("content") is None:
            reply["content"] = ""  # as the client sends a tool call's
        after = self.prompt_ids({**body, "messages": [*body.get("messages", ()), reply]})
        if after is None:
            return None
        again = after[start : start + len(completion)]
        return None if again == completion else again

    def _index(self) -> dict[str, tuple[tuple[int, bytes], ...]]:
        """Piece text (as the server writes it) -> the tokens with that text and
        their bytes."""
        if self._pieces is None:
            import ctypes

            import llama_cpp

            vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
            buffer = ctypes.create_string_buffer(512)
            found: dict[str, list[tuple[int, bytes]]] = {}
            for token in range(self._llama.n_vocab()):
                n = llama_cpp.llama_token_to_piece(vocab, token, buffer, 512, 0, False)
                raw = buffer.raw[: max(n, 0)]
                found.setdefault(raw.decode("utf-8", errors="ignore"), []).append((token, raw))
            self._pieces = {k: tuple(v) for k, v in found.items()}
        return self._pieces


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null meanwhile (what C code prints there)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _search(options: Sequence[Sequence[tuple[int, bytes]]], target: bytes) -> list[list[int]]:
    """Up to two token sequences, one option per position, whose bytes are
    ``target`` (the last tokens may run past it: bytes of a character the reply's
    text could not decode). Iterative depth-first search, bounded."""
    solutions: list[list[int]] = []
    chosen: list[int] = []
    stack: list[tuple[int, int, int]] = [(0, 0, 0)]  # (position, byte offset, option)
    steps = 0
    while stack and len(solutions) < 2:
        steps += 1
        if steps > _SEARCH_STEPS:
            return []
        i, pos, k = stack.pop()
        del chosen[i:]
        if i == len(options):
            if pos >= len(target):
                solutions.append(list(chosen))
            continue
        if k >= len(options[i]):
            continue
        stack.append((i, pos, k + 1))  # the next option, tried after this one
        token, raw = options[i][k]
        rest = target[pos:]
        if rest.startswith(raw) or (raw.startswith(rest) and pos + len(raw) > len(target)):
            chosen.append(token)
            stack.append((i + 1, pos + len(raw), 0))
    return solutions
