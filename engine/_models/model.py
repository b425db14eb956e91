"""The model-client interface: one ``ModelRequest`` in, one ``ModelResponse`` out.

Two implementations ship: ``BuiltinModel`` (``_models.builtin``, in process) and
``OpenAIClient`` (``_models.openai``: any OpenAI-compatible endpoint over httpx2).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import trio

from taketurns._models.messages import AssistantMessage, Message

__all__ = ["ModelClient", "ModelRequest", "ModelResponse", "Usage"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@attrs.frozen
class Usage:
    """Tokens one model call read and wrote, as the endpoint reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@attrs.frozen
class ModelRequest:
    """``tools`` are OpenAI tool schemas (``{"type": "function", "function": {...}}``);
    ``sampling`` holds request fields such as temperature, top_p, max_tokens, seed."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...] = ()
    sampling: Mapping[str, Any] = _EMPTY


@attrs.frozen
class ModelResponse:
    """``token_ids`` / ``prompt_token_ids`` / ``logprobs``: the completion's and the
    prompt's token ids and the completion's logprobs, when the endpoint returned them;
    ``policy_version``: the model name (or version tag) that answered, when known;
    ``dropped``: request fields the client left out because the endpoint refuses them
    (``seed``, by ``OpenAIClient``); ``stop_token``, ``retokenized`` and
    ``token_gap``: as on the recorded ``Turn`` (``taketurns._exchange.trace``)."""

    message: AssistantMessage
    usage: Usage = Usage()
    finish_reason: str | None = "stop"
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    policy_version: str | None = None
    dropped: frozenset[str] = frozenset()
    stop_token: str | None = None
    retokenized: list[int] | None = None
    token_gap: str | None = None


class ModelClient(abc.ABC):
    """Makes model calls. ``complete`` is a checkpoint; it raises
    ``ModelEndpointError`` for any failure of the endpoint (never a foreign error)."""

    @abc.abstractmethod
    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most clients hold nothing
        """Release connections. Idempotent."""

    def notes(self) -> list[str]:
        """What this client noted once for the run's summary (an endpoint that refuses
        a request field, say). Default: nothing."""
        return []

    async def preflight(self, model: str) -> None:
        """Check the endpoint answers for ``model`` before an eval starts; raise
        ``ConfigError`` saying what is wrong. Default: nothing to check."""
        await trio.lowlevel.checkpoint()
