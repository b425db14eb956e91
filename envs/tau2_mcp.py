"""The assistant's tau2 tools over MCP, for agents that call tools themselves
(``codex``, ``claude-code``): ``--env.tools=mcp``.

One MCP server per eval, one secret path per episode (``envs/episode_mcp.py``): each
episode registers its ``World``; the agent's MCP client lists the domain's agent tools
(tau2's own schemas) and its calls run on that episode's own environment with
``requestor=assistant``, answering with the same text as in process and landing in
the same trajectory tau2's evaluator scores. An unknown secret gets 404; the path is
dropped when the episode ends.
"""

from __future__ import annotations

from typing import Any

import trio

from taketurns.envs.episode_mcp import EpisodeMcp
from taketurns.envs.tau2_world import World

__all__ = ["Tau2Face"]


class Tau2Face(EpisodeMcp[World]):
    """The MCP server of an eval's tau2 environments (``serving`` holds it open)."""

    name = "tau2"

    def functions(self, state: World) -> list[dict[str, Any]]:
        return [dict(schema["function"]) for schema in state.schemas("assistant")]

    async def call(self, state: World, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        await trio.lowlevel.checkpoint()
        tool = next((t for t in state.tools("assistant") if t.name == name), None)
        if tool is None:
            return f"Error: no tool named {name!r}", True
        text = tool.run(arguments)
        return text, text.startswith("Error")
