"""Talking to an OpenEnv environment server from trio, and starting one on loopback.

The protocol (``openenv-core`` 0.3): ``GET /health``, ``GET /schema`` (the action's
JSON schema under ``action``), and a WebSocket ``/ws`` that holds one environment per
connection, taking ``{"type": "reset"|"step"|"state"|"close", "data": ...}`` and
answering ``{"type": "observation", "data": {"observation", "reward", "done"}}`` or
``{"type": "error", "data": {"message", "code", ...}}``.

Why trio-websocket rather than ``run_asyncio`` around the official (asyncio) client:
an episode is trio code, and a native trio client lives in the episode's nursery, so
the episode's cancel scopes and timeouts apply to every frame directly; the official
client would cross the trio-asyncio bridge on every step and bring each env's typed
pydantic classes, where the exchange only needs JSON. HTTP (``/health``, ``/schema``)
goes through httpx2, as every outbound HTTP call of the project does.

Failures of the server or the connection (it cannot be reached, disconnects, answers
garbage, takes longer than the timeout, refuses a reset) raise ``OpenEnvError``: the
episode fails. A step the server refuses as invalid raises ``ActionRefused``: that is
the model's doing, and the env re-asks it.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx2
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    wrap_client_stream,
)

from taketurns import TaketurnsError

__all__ = [
    "ActionRefused",
    "EnvSession",
    "OpenEnvError",
    "Result",
    "ServerProcess",
    "fetch_schema",
    "open_env_session",
]


class OpenEnvError(TaketurnsError):
    """The OpenEnv server or the connection to it failed; the episode fails."""


class ActionRefused(TaketurnsError):
    """The server refused a step's action as invalid (``message`` says why)."""


@attrs.frozen
class Result:
    """What a reset or step answered: the observation, its reward and ``done``."""

    observation: dict[str, Any]
    reward: float
    done: bool


def ws_url(base: str) -> str:
    """``http://host:port`` -> ``ws://host:port/ws`` (``https`` -> ``wss``)."""
    base = base.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :] + "/ws"
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :] + "/ws"
    return base + "/ws"


async def fetch_schema(base: str, *, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
    """The action's JSON schema from ``GET base/schema``. Raises ``OpenEnvError``."""
    try:
        async with httpx2.AsyncClient(timeout=timeout) as client:
            response = await client.get(base.rstrip("/") + "/schema")
            response.raise_for_status()
            schema = response.json()["action"]
    except (httpx2.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise OpenEnvError(f"OpenEnv server {base}: cannot read its /schema ({exc})") from exc
    if not isinstance(schema, dict):
        raise OpenEnvError(f"OpenEnv server {base}: /schema has no action schema")
    return schema


class EnvSession:
    """One environment on the server (one WebSocket connection). Each call is a
    checkpoint bounded by ``timeout`` seconds."""

    def __init__(self, ws: Any, url: str, timeout: float) -> None:
        self._ws, self._url, self._timeout = ws, url, timeout

    async def _ask(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        try:
            with trio.fail_after(self._timeout):
                await self._ws.send_message(json.dumps({"type": kind, "data": data}))
                raw = await self._ws.get_message()
        except trio.TooSlowError:
            raise OpenEnvError(
                f"OpenEnv server {self._url}: no answer to {kind} within {self._timeout:g}s"
            ) from None
        except ConnectionClosed as exc:
            raise OpenEnvError(
                f"OpenEnv server {self._url}: the connection closed during {kind} ({exc.reason})"
            ) from None
        try:
            message = json.loads(raw)
            assert isinstance(message, dict)
            assert isinstance(message.get("data"), dict)
        except (ValueError, AssertionError):
            raise OpenEnvError(
                f"OpenEnv server {self._url}: not an OpenEnv message: {str(raw)[:200]!r}"
            ) from None
        return message

    @staticmethod
    def _result(data: dict[str, Any]) -> Result:
        observation = data.get("observation")
        if not isinstance(observation, dict):
            observation = {"observation": observation}
        reward = data.get("reward")
        return Result(observation, float(reward or 0.0), bool(data.get("done")))

    async def reset(self, args: dict[str, Any]) -> Result:
        """Reset the environment with ``args``; its first observation."""
        message = await self._ask("reset", args)
        if message.get("type") != "observation":
            error = message["data"].get("message", message["data"])
            raise OpenEnvError(f"OpenEnv server {self._url}: reset {args} failed: {error}")
        return self._result(message["data"])

    async def step(self, action: dict[str, Any]) -> Result:
        """Step ``action``. ``ActionRefused`` when the server finds it invalid;
        ``OpenEnvError`` when the environment itself fails."""
        message = await self._ask("step", action)
        if message.get("type") == "observation":
            return self._result(message["data"])
        data = message["data"]
        if data.get("code") == "VALIDATION_ERROR":
            problems = [
                f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}"
                for e in data.get("errors") or ()
            ]
            raise ActionRefused("; ".join(problems) or str(data.get("message")))
        raise OpenEnvError(f"OpenEnv server {self._url}: step failed: {data.get('message', data)}")


@asynccontextmanager
async def open_env_session(base: str, *, timeout: float) -> AsyncIterator[EnvSession]:  # noqa: ASYNC109
    """A connection to ``base``'s ``/ws``: one environment for the block's lifetime.

    The session owns its TCP stream and closes it on the way out (trio-websocket's
    own ``open_websocket_url`` leaves a client's socket open when the server closes
    the WebSocket first and the TCP close is slow to follow)."""
    url = ws_url(base)
    parts = urllib.parse.urlsplit(url)
    secure = parts.scheme == "wss"
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with trio.fail_after(timeout):
            stream: Any = await trio.open_tcp_stream(host, port)
            if secure:
                stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname=host)
    except (OSError, trio.TooSlowError) as exc:
        raise OpenEnvError(f"OpenEnv server {url}: cannot connect ({exc!r})") from exc
    try:
        async with stream, trio.open_nursery() as nursery:
            try:
                with trio.fail_after(timeout):
                    ws = await wrap_client_stream(nursery, stream, host, resource)
            except (trio.TooSlowError, HandshakeError, ConnectionRejected) as exc:
                raise OpenEnvError(f"OpenEnv server {url}: no WebSocket ({exc!r})") from exc
            try:
                yield EnvSession(ws, url, timeout)
                with trio.move_on_after(min(timeout, 5.0)):
                    await ws.send_message(json.dumps({"type": "close", "data": {}}))
                    await ws.aclose()
            except ConnectionClosed:
                pass  # the server closed first: nothing left to say
            finally:
                nursery.cancel_scope.cancel()  # the reader task; the stream closes below
    except BaseExceptionGroup as group:  # the body's error, not wrapped in a group
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class ServerProcess:
    """An OpenEnv app served on loopback by ``python -m taketurns.envs.openenv_serve``.
    ``start`` returns once ``/health`` answers; ``stop`` terminates it (then kills it)
    and reaps it. Whatever the server writes to stderr is quoted when it fails."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.url: str | None = None
        self._process: trio.Process | None = None
        self._log: Any = None  # the server's stderr (a file: a pipe nobody reads fills up)

    async def start(self, *, timeout: float) -> str:  # noqa: ASYNC109
        """Start the server and wait until healthy; its base URL. ``OpenEnvError``
        when it exits, says nothing or is not healthy within ``timeout``."""
        command = [sys.executable, "-m", "taketurns.envs.openenv_serve", self.app]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL
        )
        try:
            with trio.fail_after(timeout):
                self.url = await self._read_url()
                await self._wait_healthy(self.url)
        except trio.TooSlowError:
            tail = self._tail()
            await self.stop()
            raise OpenEnvError(
                f"the OpenEnv server for {self.app} was not healthy within {timeout:g}s{tail}"
            ) from None
        except OpenEnvError:
            await self.stop()
            raise
        return self.url

    async def _read_url(self) -> str:
        assert self._process is not None
        assert self._process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await self._process.stdout.receive_some(1)
            if not chunk:
                raise OpenEnvError(
                    f"the OpenEnv server for {self.app} exited before listening{self._tail()}"
                )
            line += chunk
        words = line.decode().split()
        if len(words) != 2 or words[0] != "listening":
            raise OpenEnvError(f"the OpenEnv server for {self.app} said {line!r}")
        return words[1]

    async def _wait_healthy(self, url: str) -> None:
        assert self._process is not None
        async with httpx2.AsyncClient(timeout=5.0) as client:
            while True:
                if self._process.poll() is not None:
                    raise OpenEnvError(
                        f"the OpenEnv server for {self.app} exited with code "
                        f"{self._process.returncode}{self._tail()}"
                    )
                try:
                    if (await client.get(url + "/health")).status_code == 200:
                        return
                except httpx2.HTTPError:
                    pass
                await trio.sleep(0.25)

    def _tail(self) -> str:
        """The end of what the server wrote to stderr, for an error message."""
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip()
        return f"; its stderr ends:\n{text[-2000:]}" if text else ""

    async def stop(self) -> None:
        """Terminate the server (kill it after 5 s) and reap it. Idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        with trio.CancelScope(shield=True):
            if process.poll() is None:
                process.terminate()
                with trio.move_on_after(5):
                    await process.wait()
                if process.poll() is None:
                    process.kill()
                    await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None
