"""A misbehaving MCP stdio server for tests (run as a script): ``fail`` raises,
``hang`` never answers, ``crash`` kills the server mid-call, ``whoami`` its pid.
With ``--die-at-start`` it writes to stderr and exits before the handshake; with
``--mute`` it never answers the handshake."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if "--die-at-start" in sys.argv:
    print("faulty: refusing to start (configuration missing)", file=sys.stderr)
    sys.exit(3)
if "--mute" in sys.argv:
    time.sleep(600)

server = MCPServer("faulty")


@server.tool()
def whoami() -> str:
    """The server's process id."""
    return f"pid={os.getpid()}"


@server.tool()
def fail(why: str = "no reason") -> str:
    """Always fails (a ToolError: its message reaches the client)."""
    raise ToolError(f"fail was asked to fail: {why}")


@server.tool()
async def hang() -> str:
    """Never answers."""
    import anyio

    await anyio.sleep(600)
    return "unreachable"


@server.tool()
def crash() -> str:
    """Kills the server."""
    os._exit(9)


if __name__ == "__main__":
    server.run()
