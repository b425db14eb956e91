"""``taketurns view``: serve the viewer (``app``) on hypercorn's trio worker, with the
task that keeps the runs current (``Library.watch``), until cancelled::

    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, [Path("outputs")])  # "http://127.0.0.1:8765/"
        ...
        nursery.cancel_scope.cancel()
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import hypercorn.trio
import trio

from taketurns._http.chat_completions import hypercorn_config
from taketurns._view.app import create_app
from taketurns._view.library import Library

__all__ = ["DEFAULT_PORT", "is_loopback", "serve"]

DEFAULT_PORT = 8765
log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hosts(host: str, port: int) -> set[str]:
    """The ``Host`` header values a loopback server answers (DNS rebinding guard)."""
    names = {host, "localhost", "127.0.0.1", "[::1]"}
    bare = {n if ":" not in n or n.startswith("[") else f"[{n}]" for n in names}
    return bare | {f"{n}:{port}" for n in bare}


async def serve(
    roots: Sequence[Path],
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    graceful_timeout: float = 0.5,
    access_log: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the viewer over ``roots`` until cancelled. ``port=0`` binds an ephemeral
    port. Once listening, reports the URL (``"http://127.0.0.1:8765/"``) via
    ``task_status.started``. Raises ``OSError`` from ``nursery.start`` if the address
    cannot be bound."""
    library = Library(roots)
    config = hypercorn_config(host, port, graceful_timeout, access_log, log)
    allowed: set[str] | None = set() if is_loopback(host) else None
    app = create_app(library, allowed_hosts=allowed)
    async with trio.open_nursery() as nursery:
        await nursery.start(library.watch)
        binds: list[str] = await nursery.start(partial(hypercorn.trio.serve, app, config))
        if allowed is not None:  # the Host values need the port bound (0: ephemeral)
            allowed.update(_hosts(host, int(binds[0].rsplit(":", 1)[1])))
        task_status.started(f"{binds[0]}/")
