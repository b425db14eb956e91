"""Serve an OpenEnv app on loopback: ``python -m taketurns.envs.openenv_serve
MODULE:ATTR [--host 127.0.0.1]``. Binds an ephemeral port itself, prints one line
``listening http://HOST:PORT`` on stdout once the socket is bound (before the app is
imported: importing ``openenv-core`` takes ~20 s, its readiness is ``GET /health``),
then runs uvicorn on that socket until terminated. The ``openenv`` env starts it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import socket
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taketurns.envs.openenv_serve")
    parser.add_argument("app", help="the ASGI app as MODULE:ATTR")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    module_name, _, attr = args.app.partition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, 0))
    sock.listen(128)
    print(f"listening http://{args.host}:{sock.getsockname()[1]}", flush=True)
    os.dup2(2, 1)  # nobody reads stdout after that line: the rest goes to stderr
    import uvicorn

    app = getattr(importlib.import_module(module_name), attr or "app")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
