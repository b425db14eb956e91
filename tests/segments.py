"""A rollout whose segment the test holds open (a helper module, not a conftest).

A rollout's interception endpoint answers only while one of its segments runs, so a
test that plays the agent program itself does it from inside a segment:
``HoldingHarness`` registers its rollout and holds its first segment until the test
lets go, and ``held_segment`` runs that segment beside the test body::

    async with agent.chat(task) as session, held_segment(session) as endpoint:
        ...  # POST to endpoint.base_url with endpoint.secret: recorded turns
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from taketurns import ChatSession
from taketurns.harness import Endpoint, Prompt, Rollout, ServedHarness


class HoldingHarness(ServedHarness):
    """Registers its rollout and holds every segment open until ``release`` is set
    (one instance per agent: its events are the test's)."""

    id = "holding"

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.release = trio.Event()

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        self.endpoint(rollout)
        self.opened.set()
        await self.release.wait()


@asynccontextmanager
async def held_segment(session: ChatSession, message: str | None = None) -> AsyncIterator[Endpoint]:
    """Run a segment of ``session`` (its harness a ``HoldingHarness``: ``turn()``, or
    ``turn(message)`` when given) for the body of the ``async with``; yields the
    rollout's endpoint, open. The segment ends when the body does (or when the body
    closes the session)."""
    harness = session.harness
    assert isinstance(harness, HoldingHarness)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.turn, message)
        await harness.opened.wait()
        try:
            yield session.rollout.state["endpoint"]
        finally:
            harness.release.set()
