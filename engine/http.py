"""The HTTP face of the model boundary: the wire dialects and the servers.

- dialects: ``Dialect`` (how one HTTP API is translated into the wire-neutral
  ``ModelRequest`` and back; ``Parsed``, ``Failure``), and the three every server
  speaks: ``ChatCompletions`` (OpenAI chat completions), ``Responses`` (OpenAI
  Responses), ``AnthropicMessages`` (Anthropic Messages)
- the interception server: ``open_interception_server`` -> ``InterceptionServer``,
  whose rollout endpoints (``taketurns.harness.Endpoint``) go through ``EndpointState``
- the built-in model over HTTP: ``serve`` (what ``taketurns serve`` runs)
- ``OpenAIClient``: the model client for any OpenAI-compatible endpoint

Importing this module loads the HTTP stack (hypercorn, quart-trio, httpx2).
"""

from taketurns._http.anthropic import AnthropicMessages
from taketurns._http.chat_completions import ChatCompletions
from taketurns._http.dialect import Dialect, Failure, Parsed
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
    "InterceptionServer",
    "OpenAIClient",
    "Parsed",
    "Responses",
    "open_interception_server",
    "serve",
]
