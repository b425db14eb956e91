"""MCP tool servers: their tools offered to the agent beside a taskset's Python tools.

An ``McpServer`` names one server: a ``command`` run as a subprocess speaking MCP on
its stdin/stdout, or the ``url`` of a streamable-HTTP server. ``open_mcp_servers``
connects to servers (with the official ``mcp`` SDK, ``pip install 'taketurns[mcp]'``)
for the body of an ``async with`` and yields one ``McpTool`` per tool they list; an
``McpTool`` is a ``Tool``, so every harness that offers ``rollout.tools`` (``tools``
in process, ``program`` through the interception server's tool URL) offers it too.

Failure contract:

- a server that cannot be started, or does not finish the MCP handshake within
  ``startup_timeout_s``, raises ``HarnessError`` from ``open_mcp_servers`` (quoting
  the end of what the server wrote to stderr);
- a tool that fails, a server that died, or a call not answered within
  ``call_timeout_s`` comes back to the model as an ``Error: ...`` tool message;
- leaving the ``async with`` (normally, by error or by cancellation) stops every
  server it started: the SDK closes stdin, waits, then signals the process group,
  every wait bounded and shielded.

Process ownership: the SDK's stdio client starts and stops the server's process
itself, so the engine wraps the command in its supervisor
(``taketurns._procs.owner.supervised``): the server's whole tree (children, ``setsid``
daemons) dies when the server exits, when the SDK stops it, and when the eval's
process dies. Stdio servers run outside the rollout sandbox: they are the taskset's
code, like its Python tools, not the agent's (an agent CLI's own MCP servers run in
its sandbox).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import attrs
import trio

from taketurns._config.options import at_least
from taketurns._errors import HarnessError, OptionError, sole_error
from taketurns._exchange.tools import Tool
from taketurns._models.messages import ToolCall, ToolMessage
from taketurns._procs.owner import supervised

__all__ = ["McpConnection", "McpServer", "McpTool", "open_mcp_servers"]

PLACEMENTS = ("per_rollout", "shared")
NO_SDK = "MCP tool servers need the official MCP SDK: pip install 'taketurns[mcp]'"
_STDERR_TAIL = 2000


def _placement(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in PLACEMENTS:
        raise OptionError(attribute.name, value, " or ".join(PLACEMENTS))


def _name(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise OptionError(attribute.name, value, "a non-empty name for the server")


@attrs.define
class McpServer:
    """One MCP tool server: ``{name, command = [...], env = {...}}`` (stdio: the
    command is started with ``env`` added to a minimal environment) or ``{name, url}``
    (streamable HTTP, e.g. ``http://127.0.0.1:8000/mcp``). ``placement``:
    ``per_rollout`` (a fresh connection, and for stdio a fresh process, per rollout, so
    tool state is the rollout's own) or ``shared`` (one per eval process)."""

    name: str = attrs.field(validator=_name)
    command: list[str] | None = None
    env: dict[str, str] = attrs.field(factory=dict)
    url: str | None = None
    placement: str = attrs.field(default="per_rollout", validator=_placement)
    cwd: str | None = None
    startup_timeout_s: float = attrs.field(default=60.0, validator=at_least(0, exclusive=True))
    call_timeout_s: float = attrs.field(default=60.0, validator=at_least(0, exclusive=True))

    def __attrs_post_init__(self) -> None:
        if not sdk_installed():
            raise OptionError("name", self.name, f"an MCP server; {NO_SDK}")
        if (self.command is None) == (self.url is None):
            raise OptionError(
                "command", self.command, "either command = [...] (stdio) or url (HTTP), not both"
            )
        if self.command is not None and not (self.command and all(self.command)):
            raise OptionError("command", self.command, "a non-empty list of strings")

    @property
    def where(self) -> str:
        return self.url if self.url is not None else " ".join(self.command or ())


class McpConnection:
    """One live connection to an MCP server (made by ``open_mcp_servers``). ``call``
    and ``read_resource`` may be used by a taskset's rubric (a resource holding the
    server's state, say) while the connection is open."""

    def __init__(self, server: McpServer, client: Any, stderr: IO[str] | None) -> None:
        self.server = server
        self.client = client
        self._stderr = stderr

    def stderr_tail(self) -> str:
        """The end of what a stdio server wrote to stderr (empty for HTTP)."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            return self._stderr.read()[-_STDERR_TAIL:].strip()
        except (OSError, ValueError):
            return ""

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Call tool ``name``; (its text, whether the server flagged an error). Raises
        ``trio.TooSlowError`` after ``call_timeout_s``; the SDK's errors pass through."""
        with trio.fail_after(self.server.call_timeout_s):
            result = await self.client.call_tool(name, dict(arguments))
        return _content_text(result.content), bool(result.is_error)

    async def read_resource(self, uri: str) -> str:
        """The text of resource ``uri`` (text parts joined)."""
        with trio.fail_after(self.server.call_timeout_s):
            result = await self.client.read_resource(uri)
        return "".join(getattr(part, "text", "") or "" for part in result.contents)


def _content_text(content: Sequence[Any]) -> str:
    parts = []
    for part in content:
        text = getattr(part, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:  # an image, audio or resource part: its JSON, so nothing is lost
            parts.append(json.dumps(part.model_dump(mode="json", exclude_none=True)))
    return "\n".join(parts)


class McpTool(Tool):
    """A tool of an MCP server, offered like a Python ``Tool`` (``name``, ``schema``
    from the server's listing, ``call``; it has no ``fn``). ``call`` never raises for
    the model's mistakes, the tool's failures or a server gone or silent: they come
    back as ``Error: ...`` tool messages. ``Cancelled`` propagates."""

    def __init__(self, connection: McpConnection, listed: Any) -> None:
        self.connection = connection
        self.name = listed.name
        parameters = dict(listed.input_schema or {"type": "object", "properties": {}})
        parameters.pop("title", None)
        self.schema = {
            "type": "function",
            "function": {
                "name": listed.name,
                "description": listed.description or "",
                "parameters": parameters,
            },
        }

    async def call(self, call: ToolCall) -> ToolMessage:
        """Call the tool on its server; the answer (or what went wrong) as a tool
        message."""
        arguments = _arguments(call.arguments)
        if isinstance(arguments, str):
            return ToolMessage(call.id, arguments, self.name)
        server = self.connection.server
        try:
            text, failed = await self.connection.call(self.name, arguments)
            if failed:
                text = _error_text(self.name, text)
        except trio.TooSlowError:
            text = (
                f"Error: MCP server {server.name!r} did not answer within "
                f"{server.call_timeout_s:g}s (call_timeout_s)"
            )
        except Exception as exc:
            text = f"Error: MCP server {server.name!r} failed: {_describe(exc)}"
        return ToolMessage(call.id, text, self.name)


def _arguments(raw: str) -> dict[str, Any] | str:
    """The model's arguments as an object, or the ``Error: ...`` text saying why not."""
    try:
        arguments = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return f"Error: the arguments are not valid JSON ({exc})"
    if not isinstance(arguments, dict):
        return "Error: the arguments must be a JSON object"
    return arguments


def _error_text(name: str, text: str) -> str:
    """A tool's failure as ``Error: ...`` (without the SDK's own "Error executing
    tool NAME: " prefix, so the text reads as an in-process tool's failure)."""
    text = text.removeprefix(f"Error executing tool {name}: ")
    return text if text.startswith("Error: ") else f"Error: {text}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc)
    kind = type(exc).__name__
    if not text or "Closed" in kind or "Broken" in kind or "EndOfStream" in kind:
        return f"{kind}: the server is gone (it exited or closed the connection)"
    return f"{kind}: {text}"


def sdk_installed() -> bool:
    """Whether the ``mcp`` SDK can be imported (without importing it: it is heavy)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except ValueError:
        return False


def _sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise HarnessError(NO_SDK) from None
    return mcp


def _transport(server: McpServer, stack: contextlib.ExitStack) -> tuple[Any, IO[str] | None]:
    mcp = _sdk()
    if server.url is not None:
        return server.url, None
    from mcp.client.stdio import stdio_client

    stderr = stack.enter_context(  # closed with the servers
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
    )
    command = list(server.command or ())
    if command[0] in ("python", "python3"):
        command[0] = sys.executable  # the interpreter running taketurns (its venv)
    command = supervised(command)  # the SDK starts it; the supervisor owns its tree
    params = mcp.StdioServerParameters(
        command=command[0], args=command[1:], env=dict(server.env) or None, cwd=server.cwd
    )
    return stdio_client(params, errlog=stderr), stderr


async def _keep(
    server: McpServer, target: Any, *, task_status: trio.TaskStatus[tuple[Any, Any]]
) -> None:
    """Hold one client open until cancelled; reports (client, its tool listing). A
    connection that breaks later is left to its calls (they answer ``Error: ...``)."""
    mcp = _sdk()
    started = False
    try:
        async with mcp.Client(target) as client:
            listed = await client.list_tools()
            task_status.started((client, listed))
            started = True
            await trio.sleep_forever()
    except Exception:
        if not started:
            raise  # nursery.start raises it in _connect
        # the transport broke after the tools were listed (the server died): the
        # rollout goes on, and its calls to this server answer Error: ...


async def _connect(
    server: McpServer, nursery: trio.Nursery, stack: contextlib.ExitStack
) -> tuple[McpConnection, list[McpTool]]:
    """Start ``server``'s connection in ``nursery`` and list its tools; raises
    ``HarnessError`` when it does not come up within ``startup_timeout_s``."""
    target, stderr = _transport(server, stack)
    connection = McpConnection(server, None, stderr)
    try:
        with trio.fail_after(server.startup_timeout_s):
            connection.client, listed = await nursery.start(_keep, server, target)
    except (Exception, trio.TooSlowError) as exc:
        why = (
            f"no answer within {server.startup_timeout_s:g}s (startup_timeout_s)"
            if isinstance(exc, trio.TooSlowError)
            else _describe(exc)
        )
        tail = connection.stderr_tail()
        raise HarnessError(
            f"MCP server {server.name!r} ({server.where}) failed to start: {why}"
            + (f"; its stderr ends: {tail}" if tail else "")
        ) from None
    return connection, [McpTool(connection, tool) for tool in listed.tools]


async def _start_all(
    servers: Sequence[McpServer], nursery: trio.Nursery, stack: contextlib.ExitStack
) -> list[tuple[McpConnection, list[McpTool]]]:
    """Start every server at once (a stdio server takes seconds to import its SDK);
    their connections live in ``nursery``. Raises the first ``HarnessError``, once
    every start has ended."""
    started: list[tuple[McpConnection, list[McpTool]] | None] = [None] * len(servers)
    failures: list[HarnessError] = []

    async def start(i: int, server: McpServer) -> None:
        try:
            started[i] = await _connect(server, nursery, stack)
        except HarnessError as exc:
            failures.append(exc)

    async with trio.open_nursery() as starting:
        for i, server in enumerate(servers):
            starting.start_soon(start, i, server)
    if failures:
        raise failures[0]
    return [s for s in started if s is not None]


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """An error leaves ``open_mcp_servers``' nursery as itself (the body's own errors
    and a server's ``HarnessError``), not in a one-member exception group."""
    try:
        yield
    except BaseExceptionGroup as group:
        sole = sole_error(group)
        if isinstance(sole, BaseExceptionGroup):
            raise
        raise sole from sole.__cause__


@asynccontextmanager
async def open_mcp_servers(
    servers: Sequence[McpServer],
) -> AsyncIterator[tuple[tuple[McpTool, ...], dict[str, McpConnection]]]:
    """Connect to ``servers`` (all at once) for the body; yields (their tools in
    server order, the connections by server name). Raises ``HarnessError`` when one
    fails to start (the ones that started are stopped first). Every server is
    stopped on exit."""
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise HarnessError(f"two MCP servers share a name: {names}")
    with contextlib.ExitStack() as stack, _unwrapped():
        async with trio.open_nursery() as nursery:
            try:
                started = await _start_all(servers, nursery, stack)
                tools = tuple(tool for _, found in started for tool in found)
                yield tools, {c.server.name: c for c, _ in started}
            finally:
                # each client closes itself as its task is cancelled: the SDK stops a
                # stdio server shielded, every wait bounded
                nursery.cancel_scope.cancel()
