"""``taketurns view [DIR ...] [--host H] [--port P]``: serve the viewer until Ctrl-C.

Folders that do not exist are refused (``ConfigError``, exit 2); so is an address
that cannot be bound. A host other than a loopback address is served, with a
warning: anyone who can reach it reads every transcript."""

from __future__ import annotations

import argparse
import signal
from functools import partial
from pathlib import Path

import trio
from rich.console import Console
from rich.markup import escape

from taketurns._errors import ConfigError
from taketurns._view.server import is_loopback, serve

__all__ = ["view_command"]

DEFAULT_DIR = Path("outputs")


def view_command(args: argparse.Namespace, console: Console) -> int:
    if not 0 <= args.port <= 65535:  # before the folders: the first thing wrong is named
        raise ConfigError(f"--port {args.port}: a port is 0-65535 (0 picks a free one)")
    roots = [Path(d) for d in args.dirs] or [DEFAULT_DIR]
    missing = [str(r) for r in roots if not r.is_dir()]
    if missing:
        hint = (
            "run an eval first (it writes under outputs/) or name the folder"
            if roots == [DEFAULT_DIR]
            else "name folders that hold run directories"
        )
        raise ConfigError([f"view: {m} is not a folder; {hint}" for m in missing])
    if not is_loopback(args.host):
        warning = (
            f"warning: --host {args.host} is not a loopback address: anyone who can reach "
            "it can read every run and transcript under the folders served"
        )
        console.print(f"[yellow]{escape(warning)}", highlight=False, soft_wrap=True)

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(serve, roots, host=args.host, port=args.port))
                folders = ", ".join(str(r) for r in roots)
                console.print(f"taketurns view: {url} over {escape(folders)} (Ctrl-C stops)")
                print(url, flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(run)
    except* OSError as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup):  # trio's groups may nest
            error = error.exceptions[0]
        raise ConfigError(
            f"view --host/--port: cannot listen on {args.host}:{args.port} ({error}); is "
            "another server there? pick another port with --port (0: any free port)"
        ) from None
    return 0
