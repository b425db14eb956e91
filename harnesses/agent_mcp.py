"""A rollout's MCP servers, handed to an agent CLI's own MCP configuration.

The taskset's MCP servers reach a harness as the ``McpTool`` members of
``rollout.tools`` (each knows its server: ``tool.connection.server``). An agent CLI
that speaks MCP itself (``codex``, ``claude-code``, ``opencode``, ``gemini-cli``) is given those
servers' definitions, so the agent starts each stdio server as its own subprocess
(per rollout: a fresh process for every rollout's agent, inside its sandbox, gone
when the agent's process tree is killed at the end of each segment) or connects to the HTTP URL,
and calls the tools itself.

Who may call: the agent CLI harnesses, at the start of a segment. ``rollout_servers``
raises ``HarnessError`` for what an agent CLI cannot be given: the rollout's Python
tools (they live in the eval process) and a ``shared`` stdio server (the agent would
start its own copy, so it would not be shared; serve it over HTTP instead).

``python``/``python3`` as a command's first word is the interpreter running taketurns
(as for the in-process client); ``cwd`` is honoured by a ``cd`` wrapper where the
CLI has no such setting.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from taketurns import HarnessError
from taketurns.harness import McpServer, McpTool, Rollout

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

__all__ = [
    "claude_mcp_config",
    "codex_mcp_args",
    "gemini_mcp_config",
    "opencode_mcp_config",
    "rollout_servers",
]


def rollout_servers(rollout: Rollout, harness: str) -> list[McpServer]:
    """The distinct MCP servers whose tools ``rollout`` offers, in order; raises
    ``HarnessError`` for Python tools and ``shared`` stdio servers (module doc)."""
    servers: dict[str, McpServer] = {}
    python: list[str] = []
    for tool in rollout.tools:
        if isinstance(tool, McpTool):
            servers.setdefault(tool.connection.server.name, tool.connection.server)
        else:
            python.append(str(getattr(tool, "name", None) or getattr(tool, "__name__", tool)))
    if python:
        raise HarnessError(
            f"harness {harness!r} runs the agent's own tools; it cannot call the rollout's "
            f"Python tools ({', '.join(python)}); use the tools or program harness for "
            "those (MCP servers are handed to the agent's own MCP configuration)"
        )
    for server in servers.values():
        if server.placement == "shared" and server.command is not None:
            raise HarnessError(
                f"MCP server {server.name!r} is a shared stdio server: harness {harness!r} "
                "starts its own MCP server processes, so it cannot share one; serve it "
                "over HTTP (url) to share it, or make it per_rollout"
            )
    return list(servers.values())


def command_of(server: McpServer, *, native_cwd: bool) -> list[str]:
    """The stdio server's argv: ``python`` resolved, wrapped in ``cd`` when the server
    has a ``cwd`` and the CLI has no setting for it."""
    command = list(server.command or ())
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    if server.cwd is not None and not native_cwd:
        command = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', server.cwd, *command]
    return command


def _toml(value: Any) -> str:
    """A TOML inline value for strings, lists of strings and string tables."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}={_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_toml(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_mcp_args(servers: list[McpServer]) -> list[str]:
    """``-c mcp_servers.<name>={...}`` per server (Codex's ``config.toml`` keys:
    ``command``/``args``/``env``/``cwd`` or ``url``, ``startup_timeout_sec``,
    ``tool_timeout_sec``; ``required`` so Codex waits for the server before its first
    request and fails when it cannot start; ``default_tools_approval_mode =
    "approve"``: the taskset chose these tools, and ``codex exec`` has nobody to ask)."""
    argv: list[str] = []
    for server in servers:
        table: dict[str, Any] = {}
        if server.url is not None:
            table["url"] = server.url
        else:
            command = command_of(server, native_cwd=True)
            table.update(command=command[0], args=command[1:])
            if server.env:
                table["env"] = dict(server.env)
            if server.cwd is not None:
                table["cwd"] = server.cwd
        table["required"] = True  # codex waits for it, and fails when it cannot start
        table["default_tools_approval_mode"] = "approve"  # `codex exec` asks nobody
        table["startup_timeout_sec"] = float(server.startup_timeout_s)
        table["tool_timeout_sec"] = float(server.call_timeout_s)
        if not BARE_KEY.fullmatch(server.name):
            raise HarnessError(
                f"MCP server name {server.name!r} cannot be given to codex: its `-c` "
                "keys take letters, digits, '_' and '-' only"
            )
        argv += ["-c", f"mcp_servers.{server.name}={_toml(table)}"]
    return argv


def claude_mcp_config(servers: list[McpServer]) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` document: ``{"mcpServers": {name: {...}}}``
    (``type`` ``stdio`` with ``command``/``args``/``env``, or ``http`` with ``url``)."""
    entries: dict[str, Any] = {}
    for server in servers:
        if server.url is not None:
            entries[server.name] = {"type": "http", "url": server.url}
        else:
            command = command_of(server, native_cwd=False)
            entries[server.name] = {
                "type": "stdio",
                "command": command[0],
                "args": command[1:],
                "env": dict(server.env),
            }
    return {"mcpServers": entries}


def claude_mcp_env(servers: list[McpServer]) -> dict[str, str]:
    """Claude Code's MCP variables: its timeouts (milliseconds) from the servers'
    longest ones, and tool search off (``ENABLE_TOOL_SEARCH=false``), so the servers'
    tools are offered to the model in every request rather than deferred."""
    if not servers:
        return {}
    startup = max(s.startup_timeout_s for s in servers)
    call = max(s.call_timeout_s for s in servers)
    return {
        "MCP_TIMEOUT": str(int(startup * 1000)),
        "MCP_TOOL_TIMEOUT": str(int(call * 1000)),
        "ENABLE_TOOL_SEARCH": "false",
    }


def opencode_mcp_config(servers: list[McpServer]) -> dict[str, Any]:
    """opencode's ``mcp`` config section: ``{name: {"type": "local", "command": [...],
    "environment": {...}}}`` or ``{"type": "remote", "url": ...}``."""
    entries: dict[str, Any] = {}
    for server in servers:
        timeout = int(server.startup_timeout_s * 1000)
        if server.url is not None:
            entries[server.name] = {
                "type": "remote",
                "url": server.url,
                "enabled": True,
                "timeout": timeout,
            }
        else:
            entries[server.name] = {
                "type": "local",
                "command": command_of(server, native_cwd=False),
                "environment": dict(server.env),
                "enabled": True,
                "timeout": timeout,
            }
    return entries


def gemini_mcp_config(servers: list[McpServer]) -> dict[str, Any]:
    """gemini-cli's ``mcpServers`` settings: ``{name: {"command", "args", "env", "cwd"}}``
    or ``{"httpUrl": ...}`` (streamable HTTP), each with its ``timeout`` (milliseconds,
    a tool call's) and ``trust`` (the taskset chose these tools, and a headless run has
    nobody to confirm them)."""
    entries: dict[str, Any] = {}
    for server in servers:
        entry: dict[str, Any]
        if server.url is not None:
            entry = {"httpUrl": server.url}
        else:
            command = command_of(server, native_cwd=True)
            entry = {"command": command[0], "args": command[1:], "env": dict(server.env)}
            if server.cwd is not None:
                entry["cwd"] = server.cwd
        entry.update(timeout=int(server.call_timeout_s * 1000), trust=True)
        entries[server.name] = entry
    return entries
