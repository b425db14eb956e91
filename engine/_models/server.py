"""A model server the eval owns: any command that serves the OpenAI API on a port,
started as a child process for the eval's lifetime.

``ModelServer.run`` (a nursery task: ``base_url = await nursery.start(server.run)``)
picks a free loopback port, starts the command with ``{port}`` replaced by it (stdout
and stderr appended to ``log``), and reports ``http://127.0.0.1:<port>/v1`` once
``GET /v1/models`` answers 200 (naming ``expect_model`` when given, so that a
stranger's server that took the port first is not mistaken for it). Cancelled while
starting, it stops at once. Once ready it keeps serving until ``stop()``, even
while its nursery is cancelled: an interrupted eval still closes and scores its
episodes (judges included) on it, and whoever started it calls ``stop()`` when they
are done (``_eval.servers`` does, on every path). The server is an owned process
(``taketurns._procs.owner``, unsandboxed): stopping it sends its process group SIGTERM,
gives it ``GRACE_S`` to shut down, then kills its whole tree and reaps it, shielded;
the same happens when the eval's process dies, however (SIGKILL included: the
supervisor's lifeline). If the server exits on its own it raises ``ModelServerError``
quoting the end of the log. A server that exits before it is ready because its port
was taken in the meantime is started again on another port (up to ``PORT_ATTEMPTS``
times).

``ServedModel`` is the model client of the roles the server serves: an
``OpenAIClient`` made once the URL is known (``attach``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import httpx2
import trio

from taketurns._errors import ConfigError, ModelEndpointError, ModelServerError
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse
from taketurns._procs import owner
from taketurns._procs.sandbox import Sandbox

__all__ = ["GRACE_S", "PORT_ATTEMPTS", "ModelServer", "ServedModel", "parse_command"]

PORT_ATTEMPTS = 3
GRACE_S = 5.0  # after SIGTERM, how long the server may take to exit before SIGKILL
_HOST = "127.0.0.1"
_BUSY = ("address already in use", "errno 98", "eaddrinuse")


def parse_command(command: str | Sequence[str], *, field: str) -> tuple[str, ...]:
    """A server command (a shell-quoted string or an argv list) as an argv holding
    ``{port}``. Raises ``ConfigError`` naming ``field`` when it is empty, does not
    parse, or has no ``{port}``."""
    try:
        argv = tuple(shlex.split(command) if isinstance(command, str) else command)
    except ValueError as exc:
        raise ConfigError(f"{field} = {command!r}: cannot be split into words ({exc})") from None
    if not argv:
        raise ConfigError(f"{field}: empty; give the command that starts the server")
    if not any("{port}" in word for word in argv):
        raise ConfigError(
            f"{field} = {command!r}: put {{port}} where the server takes its port, e.g. "
            "'vllm serve MODEL --host 127.0.0.1 --port {port}'; taketurns picks a free one"
        )
    return argv


@attrs.define(eq=False)
class ModelServer:
    """One server command (argv with ``{port}``), what it is called in messages
    (``label``), how long it may take to answer ``/v1/models`` (``ready_timeout_s``),
    the model id its ``/v1/models`` must list, if known (``expect_model``), and its
    environment (None: this process's). ``log`` is where its output goes (the runner
    sets it to the run directory's ``model-server.log``). ``base_url`` is set once
    it is ready."""

    argv: tuple[str, ...]
    label: str
    ready_timeout_s: float = 300.0
    expect_model: str | None = None
    env: Mapping[str, str] | None = None
    log: Path | None = None
    base_url: str | None = None
    _process: owner.OwnedProcess | None = None
    _keep: trio.CancelScope | None = None

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the server, report its base URL once ready, keep it until ``stop()``
        (then stop and reap it, shielded). Raises ``ModelServerError`` when it cannot
        start, is not ready in time, or exits on its own."""
        log = self.log if self.log is not None else Path("model-server.log")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = _free_port()
            argv = [word.replace("{port}", str(port)) for word in self.argv]
            with log.open("ab") as out:
                out.write(f"$ {shlex.join(argv)}\n".encode())
            self._process = await self._start(argv, log)
            try:
                code = await self._wait_ready(self._process, port, log)
                if code is None:
                    self.base_url = f"http://{_HOST}:{port}/v1"
                    self._keep = trio.CancelScope(shield=True)
                    task_status.started(self.base_url)
                    with self._keep:
                        code = await self._process.wait()
                    if self._keep.cancelled_caught:
                        return
                    raise ModelServerError(
                        f"the model server ({self.label}) exited with code {code} during the "
                        f"eval; the end of its log ({log}):\n{tail(log)}"
                    )
                if attempt == PORT_ATTEMPTS or not _port_was_taken(log):
                    raise ModelServerError(
                        f"the model server ({self.label}) exited with code {code} before it "
                        f"was ready; the end of its log ({log}):\n{tail(log)}"
                    )
            finally:
                if self.base_url is None:  # not ready: nothing to shut down cleanly
                    self._process.kill()
                await self._process.aclose()
                self.base_url = None

    async def _start(self, argv: list[str], log: Path) -> owner.OwnedProcess:
        """``argv`` owned, in this process's directory, stdin closed, its output
        appended to ``log``. Raises ``ModelServerError`` when the program is missing."""
        env = dict(self.env if self.env is not None else os.environ)
        if shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
            raise ModelServerError(
                f"could not start the model server ({self.label}): {argv[0]}: no such "
                "executable; check the command (--model-server) and PATH"
            )
        here = Path.cwd()
        with log.open("ab") as out:
            return await owner.start(
                argv,
                cwd=here,
                env=env,
                sandbox=Sandbox(kind="none"),
                scratch=here,  # unsandboxed: nothing is hidden or bound
                stdout=out,
                stderr=out,
                grace_s=GRACE_S,
            )

    def stop(self) -> None:
        """Let ``run`` stop the server and return (it was started and is ready);
        before that, cancelling ``run`` stops it."""
        if self._keep is not None:
            self._keep.cancel()

    def kill_now(self) -> None:
        """Kill the server's tree at once, without its grace (a second Ctrl-C: the
        process is about to exit and cannot wait)."""
        if self._process is not None:
            self._process.kill()

    async def _wait_ready(self, process: owner.OwnedProcess, port: int, log: Path) -> int | None:
        """None once ``/v1/models`` answers as expected, else the exit code of a
        server that exited first. Raises ``ModelServerError`` after
        ``ready_timeout_s``."""
        url = f"http://{_HOST}:{port}/v1/models"
        exited: list[int] = []
        async with httpx2.AsyncClient(timeout=5.0) as client:
            with trio.move_on_after(self.ready_timeout_s) as waited:
                async with trio.open_nursery() as nursery:

                    async def watch() -> None:
                        exited.append(await process.wait())
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(watch)
                    await self._poll(client, url)
                    nursery.cancel_scope.cancel()
        if exited:
            return exited[0]
        if waited.cancelled_caught:
            raise ModelServerError(
                f"the model server ({self.label}) did not answer on {url} within "
                f"{self.ready_timeout_s:g} s; allow it longer with --model-server-timeout S, "
                f"or read its log ({log}):\n{tail(log)}"
            )
        return None

    async def _poll(self, client: httpx2.AsyncClient, url: str) -> None:
        """Return once ``url`` answers 200 (listing ``expect_model`` when set)."""
        delay = 0.05
        while True:
            try:
                response = await client.get(url)
                if response.status_code == 200 and self._lists_model(response):
                    return
            except httpx2.HTTPError:
                pass  # not listening yet
            await trio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _lists_model(self, response: httpx2.Response) -> bool:
        if self.expect_model is None:
            return True
        try:
            data = response.json().get("data")
        except (ValueError, AttributeError):
            return False
        ids = {m.get("id") for m in data if isinstance(m, dict)} if isinstance(data, list) else ()
        return self.expect_model in ids


def _free_port() -> int:
    """A port free on the loopback right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _port_was_taken(log: Path) -> bool:
    text = tail(log, 40).lower()
    return any(sign in text for sign in _BUSY)


def tail(log: Path, lines: int = 12) -> str:
    """The last ``lines`` lines of ``log`` (for an error message), or ``""``."""
    try:
        with log.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ServedModel(ModelClient):
    """The model client for roles served by a ``ModelServer``: ``make(base_url)``
    builds the real client once the server is ready (``attach``); a call before
    that raises ``ModelEndpointError``."""

    def __init__(self, server: ModelServer, make: Callable[[str], ModelClient]) -> None:
        self.server = server
        self._make = make
        self._client: ModelClient | None = None

    def attach(self, base_url: str) -> None:
        self._client = self._make(base_url)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self._client is None:
            await trio.lowlevel.checkpoint()
            raise ModelEndpointError(
                f"the model server ({self.server.label}) is not running; "
                "it runs only inside run_eval"
            )
        return await self._client.complete(request)

    def notes(self) -> list[str]:
        return [] if self._client is None else self._client.notes()

    async def preflight(self, model: str) -> None:
        if self._client is not None:
            await self._client.preflight(model)
        else:
            await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        else:
            await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"ServedModel({self.server.label!r}, client={self._client!r})"
