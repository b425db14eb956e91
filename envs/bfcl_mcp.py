"""BFCL's backends over MCP, for agents that call tools themselves (``codex``,
``claude-code``): ``--env.tools=mcp``.

One MCP server (the official SDK's low-level ``Server``, streamable HTTP, stateless)
runs in the eval's own process on a 127.0.0.1 ephemeral port, served by hypercorn in
the env's ``services()``. Each episode registers its ``Backends`` under a fresh secret
path, ``http://127.0.0.1:PORT/<secret>/mcp``: the agent's MCP client lists the
functions that episode offers now (a ``miss_func`` function appears at its turn: an
agent CLI lists the tools again in every segment) and its calls run on that
episode's own instances, answering with the same text as in process. An unknown
secret gets 404. The path is dropped when the episode ends.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import trio

from taketurns.envs.bfcl_backends import Backends, openai_tool

__all__ = ["McpFace"]

log = logging.getLogger(__name__)
_EPISODE = "taketurns.bfcl.episode"  # the ASGI scope key naming the request's episode


class McpFace:
    """The MCP server of an eval's BFCL episodes (``serving`` holds it open)."""

    def __init__(self) -> None:
        self.episodes: dict[str, Backends] = {}
        self.base_url: str | None = None

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Listen on an ephemeral loopback port until the body ends."""
        import hypercorn.trio
        from hypercorn.config import Config
        from mcp.server.lowlevel import Server

        server: Any = Server("bfcl", on_list_tools=self._list_tools, on_call_tool=self._call_tool)
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
    def episode(self, backends: Backends) -> Iterator[str]:
        """Serve ``backends`` at a fresh secret URL for the body's duration."""
        if self.base_url is None:
            raise RuntimeError("the BFCL MCP server is not serving (env.services())")
        secret = secrets.token_urlsafe(16)
        self.episodes[secret] = backends
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

    def _backends(self, ctx: Any) -> Backends:
        secret = ctx.request.scope.get(_EPISODE) if ctx.request is not None else None
        backends = self.episodes.get(secret or "")
        if backends is None:
            raise LookupError("this BFCL episode has ended")
        return backends

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        await trio.lowlevel.checkpoint()
        listed = []
        for doc in self._backends(ctx).functions:
            function = openai_tool(doc)["function"]
            listed.append(
                types.Tool(
                    name=function["name"],
                    description=function["description"],
                    input_schema=function["parameters"],
                )
            )
        return types.ListToolsResult(tools=listed)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        await trio.lowlevel.checkpoint()
        backends = self._backends(ctx)
        if not backends.offers(params.name):
            text, failed = f"Error: no tool named {params.name!r}", True
        else:
            text, failed = backends.run(params.name, params.arguments or {}), False
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )
