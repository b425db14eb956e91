"""The user's device tools of ``telecom-lite`` over MCP: ``--env.user_tools=mcp``.

One MCP server (the official SDK's low-level ``Server``, streamable HTTP, stateless)
runs in the eval's own process on a 127.0.0.1 ephemeral port, served by hypercorn in
the env's ``services()``. Each episode registers its device (``Device`` over the
episode's one shared ``World``) under a fresh secret path,
``http://127.0.0.1:PORT/<secret>/mcp``; the user's session connects with
``open_mcp_servers`` and calls the tools as an MCP client. A call runs the
in-process tool itself (``taketurns.Tool``: same schema, same argument checks, same
text), so it acts on the same world and lands in the same attributed log as the
assistant's back-office calls. An unknown secret gets 404; the path is dropped when
the episode ends.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import trio

from taketurns import Tool
from taketurns.envs.telecom_world import Device
from taketurns.harness import ToolCall, as_tools, text_of

__all__ = ["DeviceFace"]

log = logging.getLogger(__name__)
_EPISODE = "taketurns.telecom.episode"  # the ASGI scope key naming the request's episode


class DeviceFace:
    """The MCP server of an eval's telecom devices (``serving`` holds it open)."""

    def __init__(self) -> None:
        self.episodes: dict[str, dict[str, Tool]] = {}
        self.base_url: str | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Listen on an ephemeral loopback port until the body ends."""
        import hypercorn.trio
        from hypercorn.config import Config
        from mcp.server.lowlevel import Server

        server: Any = Server(
            "telecom-device", on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )
        app = server.streamable_http_app(stateless_http=True, json_response=True)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.graceful_timeout = 0.5
        config.backlog = 2048  # episodes connect at once: hypercorn's 100 drops connections
        config.errorlog = log
        config.accesslog = None
        async with trio.open_nursery() as nursery:
            serve = functools.partial(hypercorn.trio.serve, self._route(app), config)
            binds = await nursery.start(serve)
            self.base_url = binds[0]
            try:
                yield
            finally:
                self.base_url = None
                nursery.cancel_scope.cancel()

    @contextlib.contextmanager
    def episode(self, device: Device) -> Iterator[str]:
        """Serve ``device``'s tools at a fresh secret URL for the body's duration."""
        if self.base_url is None:
            raise RuntimeError("the telecom device MCP server is not serving (env.services())")
        secret = secrets.token_urlsafe(16)
        self.episodes[secret] = as_tools(device.all())
        try:
            yield f"{self.base_url}/{secret}/mcp"
        finally:
            del self.episodes[secret]

    def _route(self, app: Any) -> Any:
        async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)  # lifespan: the app runs its session manager
                return
            _, secret, *rest = scope["path"].split("/", 2)
            if secret not in self.episodes or rest != ["mcp"]:
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            scope = {**scope, "path": "/mcp", "raw_path": b"/mcp", _EPISODE: secret}
            await app(scope, receive, send)

        return route

    def _tools(self, ctx: Any) -> dict[str, Tool]:
        secret = ctx.request.scope.get(_EPISODE) if ctx.request is not None else None
        tools = self.episodes.get(secret or "")
        if tools is None:
            raise LookupError("this telecom episode has ended")
        return tools

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        await trio.lowlevel.checkpoint()
        listed = [
            types.Tool(
                name=tool.name,
                description=tool.schema["function"]["description"],
                input_schema=tool.schema["function"]["parameters"],
            )
            for tool in self._tools(ctx).values()
        ]
        return types.ListToolsResult(tools=listed)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        tool = self._tools(ctx).get(params.name)
        if tool is None:
            await trio.lowlevel.checkpoint()
            text, failed = f"Error: no tool named {params.name!r}", True
        else:
            call = ToolCall("mcp", params.name, json.dumps(params.arguments or {}))
            text = text_of((await tool.call(call)).content)
            failed = text.startswith("Error: ")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )
