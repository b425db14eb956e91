"""A toy tokenizer and chat template for the built-in model, so that token-level
training data (prompt ids, completion ids, logprobs) can be produced and tested
offline, exactly as a vLLM server returns them.

The template is the usual shape: each message is ``<role> words... <end>``; a prompt
is the rendered conversation plus the generation prompt ``<assistant>``; a completion
is the reply's words plus ``<end>`` (no ``<end>`` when cut off by ``max_tokens``).
So a multi-turn conversation's next prompt extends the previous prompt + completion
token for token, as it does with a real model whose template keeps history as is.
Word ids are a CRC32 of the word (collisions do not matter: ids are never decoded).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence

from taketurns._models.messages import AssistantMessage, Message, text_of

__all__ = ["END", "ROLE_TOKENS", "completion_ids", "logprobs_of", "prompt_ids"]

ROLE_TOKENS = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
END = 5
_FIRST_WORD = 16
_VOCAB = 50_000


@functools.lru_cache(maxsize=4096)
def _word_ids(text: str) -> tuple[int, ...]:
    # cached per text: a conversation's earlier messages are re-tokenized every turn
    # (benchmarks/bench_rollouts.py: halves the cost of the token data)
    return tuple(_FIRST_WORD + zlib.crc32(w.encode()) % _VOCAB for w in text.split())


def _body(message: Message) -> list[int]:
    ids = list(_word_ids(text_of(message.content)))
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            ids += _word_ids(f"{call.name} {call.arguments}")
    return ids


def prompt_ids(messages: Sequence[Message]) -> list[int]:
    """The rendered conversation followed by the generation prompt."""
    ids: list[int] = []
    for m in messages:
        ids.append(ROLE_TOKENS[m.role])
        ids += _body(m)
        ids.append(END)
    ids.append(ROLE_TOKENS["assistant"])
    return ids


def completion_ids(message: AssistantMessage, *, finished: bool = True) -> list[int]:
    """The reply's tokens: its words (and tool calls), then ``END`` if ``finished``."""
    ids = _body(message)
    if finished:
        ids.append(END)
    return ids


def logprobs_of(ids: Sequence[int]) -> list[float]:
    """A deterministic logprob in [-1, -0.001] per token (depends on id and position)."""
    return [-(((t * 7919) + i * 104729) % 1000 + 1) / 1000 for i, t in enumerate(ids)]
