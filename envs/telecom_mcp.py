"""The user's device tools of ``telecom-lite`` over MCP: ``--env.user_tools=mcp``.

One MCP server per eval, one secret path per episode (``envs/episode_mcp.py``): each
episode registers its device (``Device`` over the episode's one shared ``World``); the
user's session connects with
``open_mcp_servers`` and calls the tools as an MCP client. A call runs the
in-process tool itself (``taketurns.Tool``: same schema, same argument checks, same
text), so it acts on the same world and lands in the same attributed log as the
assistant's back-office calls. An unknown secret gets 404; the path is dropped when
the episode ends.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from taketurns.envs.episode_mcp import EpisodeMcp
from taketurns.envs.telecom_world import Device
from taketurns.harness import ToolCall, as_tools, text_of

__all__ = ["DeviceFace"]


class DeviceFace(EpisodeMcp[Device]):
    """The MCP server of an eval's telecom devices (``serving`` holds it open)."""

    name = "telecom-device"

    def functions(self, state: Device) -> list[dict[str, Any]]:
        return [tool.schema["function"] for tool in as_tools(state.all()).values()]

    async def call(self, state: Device, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        tool = as_tools(state.all()).get(name)
        if tool is None:
            await trio.lowlevel.checkpoint()
            return f"Error: no tool named {name!r}", True
        text = text_of((await tool.call(ToolCall("mcp", name, json.dumps(arguments)))).content)
        return text, text.startswith("Error: ")
