"""asyncio inside an episode: ``run_asyncio(fn, *args)`` runs an asyncio coroutine
function from trio code (an env's ``run``, a tool, a reward) through trio-asyncio.

Which loop runs it, first match wins:

1. the trio-asyncio loop the caller opened itself (``async with
   trio_asyncio.open_loop():`` around the call);
2. the eval run's shared loop: ``run_eval`` (and each Ray worker) holds an
   ``open_asyncio_host()`` around its episodes; the loop opens on the first
   ``run_asyncio`` call of the run, in a task of the run's own nursery, is reused by
   every later call of every episode, and is closed (its leftover asyncio tasks
   cancelled) when the run's episodes are done. A run that never calls
   ``run_asyncio`` never opens a loop. Libraries that cache per-loop objects (a
   connection pool) therefore share them across the run's episodes;
3. otherwise (trio code outside any run) a loop opened and closed around this one
   call: correct, but it pays a loop per call.

Cancellation crosses both ways. A trio cancel scope that cancels the call cancels the
asyncio task (``asyncio.CancelledError`` is thrown into the coroutine) and the call
raises ``trio.Cancelled`` as any checkpoint would. If the asyncio side cancels itself
while the trio side was not cancelled, the call raises ``AsyncioCancelled`` (an
ordinary error, so an episode records it as its failure instead of the bare
``asyncio.CancelledError``, a ``BaseException``, tearing through the eval). Any other
exception of ``fn`` propagates unchanged.

trio_asyncio is imported on first use: ``import engine`` does not pull it in (it
patches asyncio's loop lookup functions process-wide when imported).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import trio

from taketurns._errors import AsyncioCancelled

__all__ = ["open_asyncio_host", "run_asyncio"]

T = TypeVar("T")


class _Host:
    """One run's asyncio loop, opened lazily in a task of the run's nursery (so it
    runs in the run's context, not the first caller's) and reused by every call."""

    def __init__(self) -> None:
        self._wanted = trio.Event()
        self._opened = trio.Event()
        self._loop: Any = None

    async def serve(self) -> None:
        await self._wanted.wait()
        import trio_asyncio

        async with trio_asyncio.open_loop() as loop:
            self._loop = loop
            self._opened.set()
            await trio.sleep_forever()

    async def loop(self) -> Any:
        self._wanted.set()
        await self._opened.wait()
        return self._loop


_HOST: ContextVar[_Host | None] = ContextVar("taketurns_asyncio_host", default=None)


@asynccontextmanager
async def open_asyncio_host() -> AsyncIterator[None]:
    """Give the trio tasks started inside the block (episodes) one shared asyncio loop
    for ``run_asyncio``, opened on first use and closed when the block exits."""
    host = _Host()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(host.serve)
        token = _HOST.set(host)
        try:
            yield
        finally:
            _HOST.reset(token)
            nursery.cancel_scope.cancel()


async def run_asyncio(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` on an asyncio loop (see the module docstring for which) and
    return its result. Trio-flavoured: call it from trio code, give it an asyncio
    coroutine function (``fn``, not ``fn(*args)``: the coroutine is created on the
    asyncio side)."""
    import trio_asyncio

    loop = trio_asyncio.current_loop.get()
    host = _HOST.get()
    if loop is None and host is not None:
        loop = await host.loop()
    if loop is not None:
        return await _call(loop, fn, args)
    async with trio_asyncio.open_loop() as own:
        return await _call(own, fn, args)


async def _call(loop: Any, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    import trio_asyncio

    try:
        result: T = await trio_asyncio.aio_as_trio(fn, loop=loop)(*args)
    except asyncio.CancelledError as exc:
        # trio-asyncio turns the cancellation it caused into trio.Cancelled; this one
        # came from the asyncio side
        name = getattr(fn, "__qualname__", repr(fn))
        raise AsyncioCancelled(
            f"run_asyncio({name}): the asyncio side cancelled the call ({exc!r}); "
            "catch asyncio.CancelledError inside the coroutine to handle it there"
        ) from exc
    return result
