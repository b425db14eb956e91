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
patches asyncio's loop lookup functions process-wide when imported). A module that
bound those functions by name before that (anyio's asyncio backend, which pytest's
anyio plugin loads at start-up) would keep the unpatched ones, which see no running
loop under trio-asyncio (every anyio task group failing "no running event loop"): on
first use its names are pointed at the patched functions too.
"""

from __future__ import annotations

import asyncio
import sys
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
        trio_asyncio = _trio_asyncio()

        async with trio_asyncio.open_loop() as loop:
            self._loop = loop
            self._opened.set()
            await trio.sleep_forever()

    async def loop(self) -> Any:
        self._wanted.set()
        await self._opened.wait()
        return self._loop


# modules that import asyncio's loop lookups by name (``from asyncio import
# get_running_loop``) and may do so before trio_asyncio patches them
_BOUND_BY_NAME = ("anyio._backends._asyncio",)
_rebound = False


def _unpatched(trio_asyncio: Any) -> dict[str, set[Any]]:
    """asyncio's own loop lookups, by name, as a module may have bound them."""
    events = asyncio.events
    found: dict[str, set[Any]] = {
        name: {getattr(events, f"_c_{name}", None), getattr(events, f"_py_{name}", None)}
        for name in ("get_running_loop", "get_event_loop")
    }
    # trio_asyncio keeps the original (C in Python 3.12+) current_task it wraps
    found["current_task"] = {getattr(trio_asyncio._loop, "_orig_current_task", None)}
    return {name: originals - {None} for name, originals in found.items()}


def _trio_asyncio() -> Any:
    """``trio_asyncio``, imported, with the modules that bound asyncio's unpatched
    loop lookups before it was pointed at its patched ones (module docstring)."""
    global _rebound
    import trio_asyncio

    if not _rebound:
        _rebound = True
        for name in _BOUND_BY_NAME:
            module = sys.modules.get(name)
            if module is None:
                continue
            for attr, originals in _unpatched(trio_asyncio).items():
                if vars(module).get(attr) in originals:
                    setattr(module, attr, getattr(asyncio, attr))
    return trio_asyncio


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
    trio_asyncio = _trio_asyncio()

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
