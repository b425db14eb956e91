"""Where a framework seat's ``run_in_executor`` jobs run: worker threads the seat owns,
joined when it closes.

A framework's asyncio code hands blocking work to the loop's default executor
(``loop.run_in_executor(None, ...)``: langchain-openai converts every response there,
langchain runs a plain ``def`` node or tool there, the Agents SDK's ``asyncio.to_thread``
runs a plain ``def`` tool there; pydantic-ai uses anyio's threads, which anyio stops
when the segment's asyncio task ends).
Under trio-asyncio that executor is a ``TrioExecutor``: a thread of trio's process-wide
cache, which lingers ~10 s after its last job, so a run would end with threads left.

``install(loop)`` makes the loop's default executor a router (once per loop; the
loop's previous default stays as its fallback): a job submitted from a seat's run
(``seat_jobs(workers)`` around it, inherited by the asyncio tasks it starts) runs on
that seat's ``Workers``; any other job goes to the fallback, as before. ``Workers``
starts its threads on first use (a seat whose framework submits nothing starts none)
and ``Workers.close()`` joins them: after a rollout closes, none of its threads is
left.

A job runs to its end, as with trio's threads (``abandon_on_cancel=False``): a thread
cannot be stopped, so a cancelled caller waits for it, and a segment never ends with
one of its jobs running. ``close()`` therefore finds the threads idle and returns as
soon as they exit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import trio

__all__ = ["Workers", "install", "seat_jobs"]

T = TypeVar("T")

# a seat's threads, how many at most (a framework rarely runs more than one job at once)
MAX_THREADS = 4


class Workers:
    """One seat's worker threads (module docstring). Trio side."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of the seat's threads, waited for even if cancelled."""
        if self.closed:
            raise RuntimeError("the seat closed: its worker threads are gone")
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                MAX_THREADS, thread_name_prefix="taketurns-framework"
            )
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        future = self._pool.submit(fn, *args)
        future.add_done_callback(lambda _: token.run_sync_soon(done.set))
        with trio.CancelScope(shield=True):  # the thread runs on regardless
            await done.wait()
        return future.result()

    def close(self) -> None:
        """Join the threads (idle: every job was waited for)."""
        self.closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


_JOBS: ContextVar[Workers | None] = ContextVar("taketurns_framework_jobs", default=None)


@contextmanager
def seat_jobs(workers: Workers) -> Iterator[None]:
    """Inside the block (asyncio side, a seat's run) and in the asyncio tasks started
    from it, the loop's default-executor jobs run on ``workers``."""
    token = _JOBS.set(workers)
    try:
        yield
    finally:
        _JOBS.reset(token)


@functools.cache
def _router() -> type[Any]:
    """The ``Router`` class, defined on first use: trio-asyncio accepts only its own
    ``TrioExecutor`` as a default executor, and is imported only when asyncio runs."""
    import trio_asyncio

    class Router(trio_asyncio.TrioExecutor):
        """A loop's default executor: a seat's jobs to its ``Workers``, the rest to
        ``fallback`` (the loop's default before). trio-asyncio awaits ``submit`` as a
        trio task started in the caller's context, so it sees the caller's seat."""

        def __init__(self, fallback: Any) -> None:
            super().__init__()
            self.fallback = fallback

        async def submit(self, fn: Callable[..., T], *args: Any) -> T:
            workers = _JOBS.get()
            if workers is None:
                result: T = await self.fallback.submit(fn, *args)
                return result
            return await workers.run(fn, *args)

        def shutdown(self, wait: bool | None = None) -> None:
            super().shutdown(wait)
            self.fallback.shutdown(wait)

    return Router


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop``'s default executor a router (once per loop; asyncio side)."""
    import trio_asyncio

    router = _router()
    current = getattr(loop, "_default_executor", None)  # asyncio has no getter
    if not isinstance(current, router):
        loop.set_default_executor(router(current or trio_asyncio.TrioExecutor()))
