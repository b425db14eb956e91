"""Playing (task, rollout) pairs as episodes in this trio loop: the local backend,
and the loop every worker (Ray or process) runs on its shard.

Structure (docs/design.md "Structured concurrency: who owns what")::

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
from taketurns._eval.episode import AgentFactory, Episode, episode_id, run_episode
from taketurns._eval.plan import Plan
from taketurns._exchange.seeds import episode_seed
from taketurns._exchange.task import Task

__all__ = ["play_pairs", "play_with_retries"]

_Args = tuple[EvalConfig, Env, AgentFactory, Callable[[int], Episode], Callable[[Episode], None]]


async def play_pairs(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    on_episode: Callable[[Episode], None],
    *,
    on_started: Callable[[], None] | None = None,
    stop_admitting: trio.Event | None = None,
) -> None:
    """Play each (task, rollout) pair as an episode, ``config.concurrency`` at once, and
    call ``on_episode`` as each finishes (also a failed, timed-out or cancelled one).
    An episode that failed by a cause in ``config.retry_causes`` is played again, up
    to ``config.episode_retries`` times (the whole episode: a session's turns cannot
    be replayed); only its last attempt reaches ``on_episode``.
    Brackets the episodes with ``env.setup`` / ``env.finalize``; ``on_started`` is
    called once the setup is done and the services run, before the first episode. Once
    ``stop_admitting`` is set no further pair starts; the running episodes finish. The
    per-episode loop of the local backend and of every worker (Ray or process)."""
    limiter = trio.CapacityLimiter(config.concurrency)
    rank = {role: i for i, role in enumerate(plan.roles)}
    if config.output_dir is not None:  # a worker's: hidden from every sandbox
        plan.services.setdefault("run_dir", config.output_dir)

    def episode_of(task: Task, rollout: int) -> _Args:
        """``play_with_retries``' arguments for one pair: the episode task runs it
        directly (one coroutine frame less on every resume of the episode)."""
        id_ = episode_id(env.id, task.idx, rollout)
        seed = episode_seed(config.seed, task.idx, rollout)

        def attempt(n: int) -> Episode:
            return Episode(id_, env.id, task, rollout, attempts=n, seed=seed)

        def done(episode: Episode) -> None:
            try:
                _order(episode, rank)
                on_episode(episode)
            finally:
                limiter.release_on_behalf_of((task.idx, rollout))

        return config, env, plan.make_agent, attempt, done

    try:
        await env.setup()
        async with env.services():
            try:
                await _serve_pairs(
                    config, plan, pairs, episode_of, limiter, on_started, stop_admitting
                )
            finally:
                for judge in env.judges():  # the env's own too (an env is no taskset)
                    await judge.aclose()  # shielded, idempotent
    finally:
        with trio.CancelScope(shield=True):
            await env.finalize()


async def _serve_pairs(
    config: EvalConfig,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    episode_of: Callable[[Task, int], _Args],
    limiter: trio.CapacityLimiter,
    on_started: Callable[[], None] | None,
    stop_admitting: trio.Event | None = None,
) -> None:
    """The services (interception server, asyncio host) and the episodes."""
    async with trio.open_nursery() as services, open_asyncio_host():
        if plan.needs_interception:
            from taketurns._http.interception import InterceptionServer

            server = InterceptionServer(
                host=config.interception_host,
                port=config.interception_port,
                public_url=config.interception_public_url,
                max_body_bytes=config.interception_max_body_bytes,
                journal_dir=plan.services.get("run_dir"),
            )
            plan.services["interception"] = await services.start(server.run)
        if on_started is not None:
            on_started()
        async with trio.open_nursery() as episodes:
            for i, (task, rollout) in enumerate(pairs):
                # taken here, released by the episode's done(): holds for the whole
                # episode. While there is room, admit without yielding (so -c episodes
                # really are open at once), checkpointing now and then to stay
                # responsive.
                token = (task.idx, rollout)
                try:
                    limiter.acquire_on_behalf_of_nowait(token)
                except trio.WouldBlock:
                    await limiter.acquire_on_behalf_of(token)
                else:
                    if i % 256 == 255:
                        await trio.lowlevel.checkpoint()
                if stop_admitting is not None and stop_admitting.is_set():
                    limiter.release_on_behalf_of(token)
                    break
                episodes.start_soon(play_with_retries, *episode_of(task, rollout))
        services.cancel_scope.cancel()


async def play_with_retries(
    config: EvalConfig,
    env: Env,
    make_agent: AgentFactory,
    attempt: Callable[[int], Episode],
    done: Callable[[Episode], None],
) -> None:
    """Episode retries, for the eval and the streaming rollouts alike: play
    ``attempt(1)``; while it failed by a cause in ``config.retry_causes`` and fewer
    than ``config.episode_retries`` retries were played, play ``attempt(n + 1)`` (a
    fresh episode: a session's turns cannot be replayed). ``done`` is called exactly
    once, with the last attempt (its ``attempts`` = n, earlier attempts summarised in
    ``info["retried"]``), however this ends: also failed, timed out or cancelled. A
    dropped attempt goes nowhere else (its traces were scored once, at their close,
    and are never written or summed). Checkpoint; re-raises ``Cancelled``."""
    episode = attempt(1)
    retried: list[dict[str, Any]] = []
    try:
        while True:
            await run_episode(env, episode, make_agent, timeout=config.episode_timeout_s)
            if not _retry(config, episode):
                break
            retried.append(_attempt_note(episode))
            episode = attempt(episode.attempts + 1)
    finally:
        if retried:
            episode.info["retried"] = retried
        done(episode)


def _retry(config: EvalConfig, episode: Episode) -> bool:
    """Play a failed episode again when its cause is one the config retries and
    attempts are left."""
    return (
        episode.cause is not None
        and episode.cause in config.retry_causes
        and episode.attempts <= config.episode_retries
    )


def _attempt_note(episode: Episode) -> dict[str, Any]:
    """What is kept of a retried attempt (on the final record's ``info["retried"]``)."""
    errors = [e.message for e in episode.errors]
    errors += [f"{t.agent.name}: {e.message}" for t in episode.traces for e in t.errors]
    return {"attempt": episode.attempts, "cause": episode.cause, "errors": errors[:10]}


def _order(episode: Episode, rank: dict[str, int]) -> None:
    """Traces in role order (they join the episode in the order sessions close)."""
    traces = episode.traces
    keys = [rank.get(t.agent.name, len(rank)) for t in traces]
    if keys != sorted(keys):
        episode.traces = [t for _, t in sorted(zip(keys, traces, strict=True), key=_first)]


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]
