"""An example MCP tool server, written with the official SDK (``taketurns[mcp]``):
a counter whose state lives in the server process.

    python -m taketurns.envs.mcp_counter              # stdio (what a command runs)
    python -m taketurns.envs.mcp_counter --http 8765  # streamable HTTP at /mcp

Tools: ``bump(by)`` adds to the counter and returns it; ``whoami()`` returns the
server's process id (to tell servers apart). With ``placement = "per_rollout"`` every
rollout starts from 0; a ``shared`` server counts across rollouts.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["main", "make_server"]


def make_server() -> Any:
    """A fresh counter server (an ``mcp.server.mcpserver.MCPServer``)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("counter")
    count = 0

    @server.tool()
    def bump(by: int = 1) -> str:
        """Add ``by`` to the counter and return the new count."""
        nonlocal count
        count += by
        return f"count={count}"

    @server.tool()
    def whoami() -> str:
        """The counter server's process id."""
        return f"pid={os.getpid()}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    args = parser.parse_args()
    server = make_server()
    if args.http is None:
        server.run()
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
