"""What a harness author needs beyond ``taketurns``, and the pieces a harness or an env
builds with (issue 41: one door per audience; an env author's is ``taketurns.env``, a
taskset author's ``taketurns.taskset``):

- the harness contract: ``Harness``, ``Rollout`` (a harness's handle on its rollout),
  ``Prompt``, ``can_chat``, ``NullHarness``, ``SessionState``; out of process,
  ``ServedHarness`` and the rollout's ``Endpoint`` on the interception server; the
  ``harness_registry``
- messages in detail and on the wire: ``ToolCall``, ``TextPart``, ``ImagePart``,
  ``text_of``, ``to_wire``/``from_wire``, ``messages_to_wire``/``messages_from_wire``
- what a harness records beside its turns: ``ErrorInfo``
- tools: ``as_tools``, ``tool_schema``; MCP servers: ``McpServer``, ``McpTool``,
  ``McpConnection``, ``open_mcp_servers``
- processes: ``start_owned``/``run_owned`` (the process owner), ``OwnedProcess``,
  ``Captured``, ``Sandbox``; files in a rollout's scratch directory, which its
  processes write too (never through a link they left): ``create_in_scratch``,
  ``write_in_scratch``, ``read_in_scratch``, ``read_descriptor``
- asyncio-only libraries inside an episode (a framework's agent loop, an env's
  client): ``run_asyncio``

The errors a harness raises (and ``RolloutStopped``, the stop it lets through) are in
``taketurns.errors``.
"""

import typing

from taketurns._config.reference import load_reference
from taketurns._config.registry import harnesses as harness_registry
from taketurns._eval.aio import run_asyncio
from taketurns._exchange.harness import Harness, Prompt, Rollout, can_chat
from taketurns._exchange.mcp_servers import McpConnection, McpServer, McpTool, open_mcp_servers
from taketurns._exchange.null import NullHarness
from taketurns._exchange.session import SessionState
from taketurns._exchange.tools import as_tools, tool_schema
from taketurns._exchange.trace import ErrorInfo
from taketurns._models.messages import ImagePart, TextPart, ToolCall, text_of
from taketurns._models.wire import from_wire, messages_from_wire, messages_to_wire, to_wire
from taketurns._procs.owner import Captured, OwnedProcess
from taketurns._procs.owner import run as run_owned
from taketurns._procs.owner import start as start_owned
from taketurns._procs.sandbox import Sandbox
from taketurns._procs.scratch import create as create_in_scratch
from taketurns._procs.scratch import read_all as read_descriptor
from taketurns._procs.scratch import read_bytes as read_in_scratch
from taketurns._procs.scratch import write_text as write_in_scratch

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
    "Captured",
    "Endpoint",
    "ErrorInfo",
    "Harness",
    "ImagePart",
    "McpConnection",
    "McpServer",
    "McpTool",
    "NullHarness",
    "OwnedProcess",
    "Prompt",
    "Rollout",
    "Sandbox",
    "ServedHarness",
    "SessionState",
    "TextPart",
    "ToolCall",
    "as_tools",
    "can_chat",
    "create_in_scratch",
    "from_wire",
    "harness_registry",
    "load_reference",
    "messages_from_wire",
    "messages_to_wire",
    "open_mcp_servers",
    "read_descriptor",
    "read_in_scratch",
    "run_asyncio",
    "run_owned",
    "start_owned",
    "text_of",
    "to_wire",
    "tool_schema",
    "write_in_scratch",
]
