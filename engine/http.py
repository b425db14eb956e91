"""The HTTP face of the model boundary: the wire dialects and the servers.

- dialects: ``Dialect`` (how one HTTP API is translated into the wire-neutral
  ``ModelRequest`` and back; ``Parsed``, ``Failure``), registered by id in
  ``dialect_registry`` (the ``taketurns.dialects`` entry points, or
  ``dialect_registry.register(id)``), every one served by both servers; the four
  built in: ``ChatCompletions`` (OpenAI chat completions), ``Responses`` (OpenAI
  Responses), ``AnthropicMessages`` (Anthropic Messages), ``Gemini`` (Google's
  Gemini API)
- the interception server: ``open_interception_server`` -> ``InterceptionServer``,
  whose rollout endpoints (``taketurns.harness.Endpoint``) go through ``EndpointState``
- the built-in model over HTTP: ``serve`` (what ``taketurns serve`` runs)
- ``OpenAIClient``: the model client for any OpenAI-compatible endpoint

Importing this module loads the HTTP stack (hypercorn, quart-trio, httpx2).
"""

from taketurns._config.registry import dialects as dialect_registry
from taketurns._http.anthropic import AnthropicMessages
from taketurns._http.chat_completions import ChatCompletions
from taketurns._http.dialect import Dialect, Failure, Parsed
from taketurns._http.gemini import Gemini
from taketurns._http.interception import (
    EndpointState,
    InterceptionServer,
    open_interception_server,
)
from taketurns._http.responses import Responses
from taketurns._http.server import serve
from taketurns._models.openai import OpenAIClient

__all__ = [
    "AnthropicMessages",
    "ChatCompletions",
    "Dialect",
    "EndpointState",
    "Failure",
    "Gemini",
    "InterceptionServer",
    "OpenAIClient",
    "Parsed",
    "Responses",
    "dialect_registry",
    "open_interception_server",
    "serve",
]
