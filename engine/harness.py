"""What a plugin author needs beyond ``taketurns``: the harness contract and the
pieces a harness, an env or a taskset is built from.

- the harness contract: ``Harness``, ``Rollout`` (a harness's handle on its rollout),
  ``Prompt``, ``can_chat``, ``NullHarness``, ``SessionState``; out of process,
  ``ServedHarness`` and the rollout's ``Endpoint`` on the interception server
- the model contract: ``ModelClient`` (``complete(ModelRequest) -> ModelResponse``),
  ``Usage``; a scripted policy of a plugin's own served as ``builtin/<name>``:
  ``register_builtin_policy``
- messages in detail and on the wire: ``ToolCall``, ``TextPart``, ``ImagePart``,
  ``text_of``, ``to_wire``/``from_wire``, ``messages_to_wire``/``messages_from_wire``
- what a trace records: ``Turn``, ``TurnReward``, ``ErrorInfo``, ``JudgeCall``,
  ``AgentStamp``, ``EpisodeInfo``
- tools: ``as_tools``, ``tool_schema``; MCP servers: ``McpServer``, ``McpTool``,
  ``McpConnection``, ``open_mcp_servers``
- processes: ``start_owned``/``run_owned`` (the process owner), ``OwnedProcess``,
  ``Captured``, ``Sandbox``
- envs and tasksets: ``open_taskset``, ``roles_of``, ``run_asyncio``,
  ``parse_verdict``; ``PolicyProbe`` (an env whose policy ``taketurns
  exploitability`` measures state by state); ``load_reference`` (import what
  ``./file.py:name`` or ``package.module:name`` names, as envs are named); option
  checks for config fields (``at_least``, ``int_between``, ``one_of``); the id
  registries (``env_registry``, ``harness_registry``, ``taskset_registry``)

The errors a harness raises are in ``taketurns.errors``.
"""

import typing

from taketurns._config.options import at_least, int_between, one_of
from taketurns._config.reference import load_reference
from taketurns._config.registry import envs as env_registry
from taketurns._config.registry import harnesses as harness_registry
from taketurns._config.registry import tasksets as taskset_registry
from taketurns._eval.aio import run_asyncio
from taketurns._eval.env import roles_of
from taketurns._eval.probe import PolicyProbe
from taketurns._eval.taskset import open_taskset
from taketurns._exchange.harness import Harness, Prompt, Rollout, can_chat
from taketurns._exchange.judge import parse_verdict
from taketurns._exchange.mcp_servers import McpConnection, McpServer, McpTool, open_mcp_servers
from taketurns._exchange.null import NullHarness
from taketurns._exchange.session import SessionState
from taketurns._exchange.tools import as_tools, tool_schema
from taketurns._exchange.trace import (
    AgentStamp,
    EpisodeInfo,
    ErrorInfo,
    JudgeCall,
    Turn,
    TurnReward,
    Usage,
)
from taketurns._models.builtin import register_policy as register_builtin_policy
from taketurns._models.messages import ImagePart, TextPart, ToolCall, text_of
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse
from taketurns._models.wire import from_wire, messages_from_wire, messages_to_wire, to_wire
from taketurns._procs.owner import Captured, OwnedProcess
from taketurns._procs.owner import run as run_owned
from taketurns._procs.owner import start as start_owned
from taketurns._procs.sandbox import Sandbox

if typing.TYPE_CHECKING:  # the lazy names below, for type checkers
    from taketurns._http.interception import Endpoint
    from taketurns._http.served import ServedHarness

# Names whose modules pull in the HTTP stack (hypercorn, quart): imported on first use,
# so an in-process harness does not load it.
_LAZY = {
    "Endpoint": "taketurns._http.interception",
    "ServedHarness": "taketurns._http.served",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taketurns.harness' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AgentStamp",
    "Captured",
    "Endpoint",
    "EpisodeInfo",
    "ErrorInfo",
    "Harness",
    "ImagePart",
    "JudgeCall",
    "McpConnection",
    "McpServer",
    "McpTool",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "NullHarness",
    "OwnedProcess",
    "PolicyProbe",
    "Prompt",
    "Rollout",
    "Sandbox",
    "ServedHarness",
    "SessionState",
    "TextPart",
    "ToolCall",
    "Turn",
    "TurnReward",
    "Usage",
    "as_tools",
    "at_least",
    "can_chat",
    "env_registry",
    "from_wire",
    "harness_registry",
    "int_between",
    "load_reference",
    "messages_from_wire",
    "messages_to_wire",
    "one_of",
    "open_mcp_servers",
    "open_taskset",
    "parse_verdict",
    "register_builtin_policy",
    "roles_of",
    "run_asyncio",
    "run_owned",
    "start_owned",
    "taskset_registry",
    "text_of",
    "to_wire",
    "tool_schema",
]
