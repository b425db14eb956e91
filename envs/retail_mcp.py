"""The retail-lite store served as an MCP stdio server (official SDK, ``taketurns[mcp]``):
what ``--env.taskset.tools=mcp`` starts for each rollout.

    python -m taketurns.envs.retail_mcp --seed SEED

The store is ``Store.generate(SEED)``; the tools are ``RetailTools``' own (same names,
descriptions and parameters) and answer with the same text as the in-process tools
(a JSON value, or the store rule that refused the action). The resource
``retail://store/digest`` is the store's current digest: how the taskset's rubric
reads the final state of a rollout whose store lives in this process.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from taketurns.envs.retail_store import RetailTools, Store, StoreError

__all__ = ["DIGEST_URI", "main", "make_server"]

DIGEST_URI = "retail://store/digest"


def _as_tool(fn: Callable[..., Any]) -> Callable[..., str]:
    """``fn`` answering as the in-process tool does: JSON text, or the rule's error."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def tool(**arguments: Any) -> str:
        try:
            result = fn(**arguments)
        except StoreError as exc:
            raise ToolError(f"StoreError: {exc}") from None
        return result if isinstance(result, str) else json.dumps(result, default=str)

    return tool


def make_server(seed: int) -> Any:
    """An ``MCPServer`` over a fresh store of ``seed``."""
    from mcp.server.mcpserver import MCPServer

    store = Store.generate(seed)
    server = MCPServer("retail-lite")
    for fn in RetailTools(store).all():
        server.tool(structured_output=False)(_as_tool(fn))

    @server.resource(DIGEST_URI)
    def digest() -> str:
        """The store's current digest (``Store.digest``)."""
        return store.digest()

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, required=True, help="the task's store seed")
    make_server(parser.parse_args().seed).run()


if __name__ == "__main__":
    main()
