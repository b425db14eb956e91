"""BFCL's backends over MCP, for agents that call tools themselves (``codex``,
``claude-code``): ``--env.tools=mcp``.

One MCP server per eval, one secret path per episode (``envs/episode_mcp.py``): each
episode registers its ``Backends``; the agent's MCP client lists the
functions that episode offers now (a ``miss_func`` function appears at its turn: an
agent CLI lists the tools again in every segment) and its calls run on that
episode's own instances, answering with the same text as in process. An unknown
secret gets 404. The path is dropped when the episode ends.
"""

from __future__ import annotations

from typing import Any

import trio

from taketurns.envs.bfcl_backends import Backends, openai_tool
from taketurns.envs.episode_mcp import EpisodeMcp

__all__ = ["McpFace"]


class McpFace(EpisodeMcp[Backends]):
    """The MCP server of an eval's BFCL episodes (``serving`` holds it open)."""

    name = "bfcl"

    def functions(self, state: Backends) -> list[dict[str, Any]]:
        return [openai_tool(doc)["function"] for doc in state.functions]

    async def call(self, state: Backends, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        await trio.lowlevel.checkpoint()
        if not state.offers(name):
            return f"Error: no tool named {name!r}", True
        return state.run(name, arguments), False
