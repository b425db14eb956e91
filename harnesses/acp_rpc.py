"""A small Agent Client Protocol client on trio: newline-delimited JSON-RPC 2.0 over a
child process's stdin/stdout.

No background reader: a call writes its request and then reads the agent's lines
itself until its response arrives, handling on the way the agent's notifications
(``session/update``: passed to ``on_update``) and requests (``session/request_permission``:
answered by ``permissions``; anything else: "method not found", since this client
advertises no file-system or terminal capability). Between calls nobody reads; an
idle agent writes nothing. So the connection needs no task of its own and can
outlive any one segment.

``AcpError`` is a JSON-RPC error answer; ``AcpGone`` means the process closed its
stdout (it exited or crashed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio

__all__ = ["AcpConnection", "AcpError", "AcpGone", "choose_permission"]

Json = dict[str, Any]
_CHUNK = 65536
METHOD_NOT_FOUND = -32601


class AcpError(Exception):
    """The agent answered a call with a JSON-RPC error."""

    def __init__(self, method: str, error: Any) -> None:
        self.error = error
        message = error.get("message") if isinstance(error, dict) else error
        super().__init__(f"{method}: {message}")


class AcpGone(Exception):
    """The agent process closed its stdout mid-call."""


def choose_permission(policy: str) -> Callable[[Json], Json]:
    """A permission answerer: ``allow`` picks the first allow option, ``reject`` the
    first reject option (either falls back to cancelling the request)."""
    wanted = (
        ("allow_once", "allow_always") if policy == "allow" else ("reject_once", "reject_always")
    )

    def answer(params: Json) -> Json:
        for option in params.get("options") or []:
            if isinstance(option, dict) and option.get("kind") in wanted:
                return {"outcome": {"outcome": "selected", "optionId": option.get("optionId")}}
        return {"outcome": {"outcome": "cancelled"}}

    return answer


class AcpConnection:
    """One agent process's JSON-RPC channel. Calls must not overlap (the harness runs
    one segment at a time per rollout)."""

    def __init__(
        self,
        stdin: trio.abc.SendStream,
        stdout: trio.abc.ReceiveStream,
        *,
        permissions: Callable[[Json], Json],
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._buffer = bytearray()
        self._next_id = 0
        self.permissions = permissions

    async def _send(self, message: Json) -> None:
        try:
            await self._stdin.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise AcpGone("the agent closed its stdin") from exc

    async def _line(self) -> Json:
        start = 0
        while (end := self._buffer.find(b"\n", start)) < 0:
            start = len(self._buffer)
            try:
                chunk = await self._stdout.receive_some(_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise AcpGone("the agent closed its stdout") from exc
            if not chunk:
                raise AcpGone("the agent closed its stdout")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            message = json.loads(line)
        except ValueError:
            return {}  # a stray log line: not protocol
        return message if isinstance(message, dict) else {}

    async def notify(self, method: str, params: Json) -> None:
        await self._send({"method": method, "params": params})

    async def call(
        self, method: str, params: Json, *, on_update: Callable[[Json], None] | None = None
    ) -> Any:
        """Send a request and return its result, serving the agent meanwhile."""
        self._next_id += 1
        call_id = self._next_id
        await self._send({"id": call_id, "method": method, "params": params})
        while True:
            message = await self._line()
            if "method" in message:
                await self._serve(message, on_update)
            elif message.get("id") == call_id:
                if "error" in message:
                    raise AcpError(method, message["error"])
                return message.get("result")

    async def _serve(self, message: Json, on_update: Callable[[Json], None] | None) -> None:
        method, params = message["method"], message.get("params") or {}
        if "id" not in message:  # a notification
            if method == "session/update" and on_update is not None:
                on_update(params)
            return
        if method == "session/request_permission":
            await self._send({"id": message["id"], "result": self.permissions(params)})
        else:
            error = {"code": METHOD_NOT_FOUND, "message": f"{method} is not offered"}
            await self._send({"id": message["id"], "error": error})
