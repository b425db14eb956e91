"""Playing (task, rollout) pairs as episodes in this trio loop: the local backend,
and the loop every worker (Ray or process) runs on its shard.

Structure (DESIGN.md "who owns what")::

    play_pairs (env.setup ... env.finalize, shielded)
     └─ services nursery: interception server (if a harness needs one), the shared
        │                 asyncio loop (``_eval.aio``)
        └─ episodes nursery, admitted by the episode limiter (CapacityLimiter c),
           taken before an episode opens any session and held until its
           ``on_episode`` has run; the only other gate is the optional model-call
           limiter, held for one request at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from taketurns._config.options import EvalConfig
from taketurns._eval.aio import open_asyncio_host
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode, episode_id, run_episode
from taketurns._eval.plan import Plan
from taketurns._exchange.task import Task

__all__ = ["play_pairs"]


async def play_pairs(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    on_episode: Callable[[Episode], None],
    *,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Play each (task, rollout) pair as an episode, ``config.concurrency`` at once, and
    call ``on_episode`` as each finishes (also a failed, timed-out or cancelled one).
    Brackets the episodes with ``env.setup`` / ``env.finalize``; ``on_started`` is
    called once the setup is done and the services run, before the first episode. The
    per-episode loop of the local backend and of every worker (Ray or process)."""
    limiter = trio.CapacityLimiter(config.concurrency)
    rank = {role: i for i, role in enumerate(plan.roles)}

    async def play(task: Task, rollout: int) -> None:
        episode = Episode(episode_id(env.id, task.idx, rollout), env.id, task, rollout)
        try:
            await run_episode(env, episode, plan.make_agent, timeout=config.episode_timeout_s)
        finally:
            _order(episode, rank)
            on_episode(episode)
            limiter.release_on_behalf_of((task.idx, rollout))

    try:
        await env.setup()
        async with env.services():
            await _serve_pairs(config, plan, pairs, play, limiter, on_started)
    finally:
        with trio.CancelScope(shield=True):
            await env.finalize()


async def _serve_pairs(
    config: EvalConfig,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    play: Callable[[Task, int], Any],
    limiter: trio.CapacityLimiter,
    on_started: Callable[[], None] | None,
) -> None:
    """The services (interception server, asyncio host) and the episodes."""
    async with trio.open_nursery() as services, open_asyncio_host():
        if plan.needs_interception:
            from taketurns._http.interception import InterceptionServer

            server = InterceptionServer(
                host=config.interception_host,
                port=config.interception_port,
                public_url=config.interception_public_url,
            )
            plan.services["interception"] = await services.start(server.run)
        if on_started is not None:
            on_started()
        async with trio.open_nursery() as episodes:
            for i, (task, rollout) in enumerate(pairs):
                # taken here, released by play(): holds for the whole episode. While
                # there is room, admit without yielding (so -c episodes really are
                # open at once), checkpointing now and then to stay responsive.
                token = (task.idx, rollout)
                try:
                    limiter.acquire_on_behalf_of_nowait(token)
                except trio.WouldBlock:
                    await limiter.acquire_on_behalf_of(token)
                else:
                    if i % 256 == 255:
                        await trio.lowlevel.checkpoint()
                episodes.start_soon(play, task, rollout)
        services.cancel_scope.cancel()


def _order(episode: Episode, rank: dict[str, int]) -> None:
    """Traces in role order (they join the episode in the order sessions close)."""
    traces = episode.traces
    keys = [rank.get(t.agent.name, len(rank)) for t in traces]
    if keys != sorted(keys):
        episode.traces = [t for _, t in sorted(zip(keys, traces, strict=True), key=_first)]


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]
