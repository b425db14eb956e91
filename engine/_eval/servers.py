"""The model servers an eval owns, for the eval's lifetime.

``open_model_servers(plan, log_dir)`` starts every server in ``plan.servers`` (in a
nursery of its own; output in ``log_dir/model-server.log``, ``model-server-2.log``...),
points each served client at its server, checks the served models answer (a
``ConfigError`` as the endpoint preflight gives), and on leaving stops and reaps them,
on every path: normal exit, an error, a cancelled or interrupted eval. A server keeps
serving while the body is being cancelled, until the body is done (its episodes'
shielded closes and scoring may still call it); a server that dies meanwhile fails the
eval with ``ModelServerError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from taketurns._errors import ConfigError
from taketurns._eval.plan import Plan

__all__ = ["open_model_servers"]


@asynccontextmanager
async def open_model_servers(
    plan: Plan, log_dir: Path, *, say: Callable[[str], None] | None = None, timeout_s: float = 30.0
) -> AsyncIterator[None]:
    """Start, check, and finally stop ``plan``'s model servers (module docstring);
    ``say`` hears each step, ``timeout_s`` bounds each served model's check."""
    if not plan.servers:
        yield
        return
    async with trio.open_nursery() as nursery:
        try:
            for n, server in enumerate(plan.servers.values(), start=1):
                server.log = log_dir / ("model-server.log" if n == 1 else f"model-server-{n}.log")
                if say is not None:
                    say(f"starting the model server ({server.label}); its log: {server.log}")
                url = await nursery.start(server.run)
                for model, client in plan.served(server):
                    client.attach(url)
                    with trio.move_on_after(timeout_s) as scope:
                        await client.preflight(model)
                    if scope.cancelled_caught:
                        raise ConfigError(
                            f"preflight: model {model!r} at {url} ({server.label}) did not "
                            f"answer within {timeout_s:g} s; see {server.log}"
                        )
            yield
        finally:
            for server in plan.servers.values():
                server.stop()
            nursery.cancel_scope.cancel()
