"""One MCP server per eval, one secret path per episode: what the built-in envs that
offer their tools over MCP share (``bfcl-multi-turn``'s ``--env.tools=mcp``,
``telecom-lite``'s ``--env.user_tools=mcp``).

The server (the official SDK's low-level ``Server``, streamable HTTP, stateless) runs in
the eval's own process on a 127.0.0.1 ephemeral port, served by hypercorn while
``serving()`` is held open (an env's ``services()``). ``episode(state)`` registers an
episode's state under a fresh secret path, ``http://127.0.0.1:PORT/<secret>/mcp``, for
the body's duration; a request names its episode by that path alone, so an episode's
client reaches no other episode's tools. An unknown secret gets 404. What the tools are
and what a call does is the subclass's: ``functions(state)`` and ``call(state, name,
arguments)``.

An env holds its ``EpisodeMcp`` through an ``McpService``: the env's ``services()``
returns ``service.services(wanted)`` (the option asks for ``mcp``), and an episode
reaches its tools by ``service.open(state, server)``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import importlib.util
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs
import trio

from taketurns import OptionError
from taketurns.harness import McpConnection, McpServer, McpTool, open_mcp_servers

__all__ = ["EpisodeMcp", "McpService", "python_or_mcp"]

log = logging.getLogger(__name__)
_EPISODE = "taketurns.mcp.episode"  # the ASGI scope key naming the request's episode
State = TypeVar("State")


def python_or_mcp(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The attrs validator of an env option choosing its tools ``python`` (in process)
    or ``mcp`` (served by an ``EpisodeMcp``); ``mcp`` needs the MCP SDK installed."""
    if value not in ("python", "mcp"):
        raise OptionError(attribute.name, value, "python (in process) or mcp")
    if value == "mcp" and importlib.util.find_spec("mcp") is None:
        raise OptionError(
            attribute.name, value, "python (the MCP SDK is missing: pip install 'taketurns[mcp]')"
        )


class EpisodeMcp(abc.ABC, Generic[State]):
    """The MCP server of an eval's episodes (``serving`` holds it open). ``name``: the
    server's name, and what an ended episode's error calls it."""

    name = "episodes"

    def __init__(self) -> None:
        self.episodes: dict[str, State] = {}
        self.base_url: str | None = None

    @abc.abstractmethod
    def functions(self, state: State) -> list[dict[str, Any]]:
        """The episode's tools now, each an OpenAI function (``name``, ``description``,
        ``parameters``)."""

    @abc.abstractmethod
    async def call(self, state: State, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run tool ``name`` on the episode's state: its text and whether it failed (an
        unknown name included). A checkpoint."""

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Listen on an ephemeral loopback port until the body ends."""
        import hypercorn.trio
        from hypercorn.config import Config
        from mcp.server.lowlevel import Server

        server: Any = Server(
            self.name, on_list_tools=self._list_tools, on_call_tool=self._call_tool
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
    def episode(self, state: State) -> Iterator[str]:
        """Serve ``state``'s tools at a fresh secret URL for the body's duration. Raises
        ``RuntimeError`` outside ``serving()``."""
        if self.base_url is None:
            raise RuntimeError(f"the {self.name} MCP server is not serving (env.services())")
        secret = secrets.token_urlsafe(16)
        self.episodes[secret] = state
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

    def _state(self, ctx: Any) -> State:
        secret = ctx.request.scope.get(_EPISODE) if ctx.request is not None else None
        if secret not in self.episodes:
            raise LookupError(f"this {self.name} episode has ended")
        return self.episodes[secret]

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        await trio.lowlevel.checkpoint()
        listed = [
            types.Tool(
                name=function["name"],
                description=function["description"],
                input_schema=function["parameters"],
            )
            for function in self.functions(self._state(ctx))
        ]
        return types.ListToolsResult(tools=listed)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        text, failed = await self.call(self._state(ctx), params.name, params.arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )


class McpService(Generic[State]):
    """An env's tools served over MCP when its option ``option`` says ``mcp``: one fresh
    ``face()`` per eval, held while the env's ``services()`` are."""

    def __init__(self, face: Callable[[], EpisodeMcp[State]], option: str) -> None:
        self._face = face
        self.option = option
        self.face: EpisodeMcp[State] | None = None  # while served

    def services(self, wanted: bool) -> contextlib.AbstractAsyncContextManager[None]:
        """What the env's ``services()`` returns: with ``wanted``, a fresh ``face()``
        serving (``self.face``) for the body; else nothing."""
        return self._serving() if wanted else contextlib.nullcontext()

    @contextlib.asynccontextmanager
    async def _serving(self) -> AsyncIterator[None]:
        face = self._face()
        async with face.serving():
            self.face = face
            try:
                yield
            finally:
                self.face = None

    @contextlib.asynccontextmanager
    async def open(
        self, state: State, server: str
    ) -> AsyncIterator[tuple[tuple[McpTool, ...], dict[str, McpConnection]]]:
        """One episode's connection to ``state``'s tools, as the MCP server ``server``:
        yields what ``open_mcp_servers`` does. Raises ``RuntimeError`` outside
        ``services()`` (the env was not run under an eval)."""
        if self.face is None:
            raise RuntimeError(
                f"{self.option} = 'mcp' serves through env.services(): run under an eval"
            )
        with self.face.episode(state) as url:
            async with open_mcp_servers([McpServer(server, url=url)]) as opened:
                yield opened
