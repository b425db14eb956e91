"""``Episode``: one env run on one task, and ``run_episode`` which plays it.

An episode is one trio nursery holding its chat sessions. However ``env.run`` ends
(returning, raising, timing out, cancelled) every session it opened is closed and
scored exactly once and its trace joins ``episode.traces``; the outcome is recorded
on the episode (``ok``, ``cause``, ``errors``, ``stop``), never lost. Whether it is ok
is decided by ``taketurns._exchange.outcome`` (the one place that draws the line
between a failure and an outcome). The episode timeout is an outcome (stop
``episode_timeout``) for a session whose agent, tools or env were running when it
fired; a session that was waiting on its model endpoint then fails with cause
``model`` (time on the endpoint is never held against the model).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig
from taketurns._errors import sole_error
from taketurns._eval.env import Env
from taketurns._exchange.agent import Agent, Agents
from taketurns._exchange.outcome import cause_of
from taketurns._exchange.session import ChatSession
from taketurns._exchange.task import Task
from taketurns._exchange.trace import EpisodeInfo, ErrorInfo, Trace

__all__ = ["Episode", "EpisodeTiming", "run_episode"]

AgentFactory = Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]


@attrs.define
class EpisodeTiming:
    started_at: float = 0.0
    ended_at: float = 0.0
    wall_s: float = 0.0


@attrs.define(eq=False)
class Episode:
    """One env run on one task.

    ``stop`` is ``completed``, ``env_error``, ``episode_timeout`` or ``cancelled``.
    ``ok`` is False when the result is not the model's behaviour: an infrastructure
    failure or a cancellation, named by ``cause`` (``env``, ``model``, ``harness``,
    ``scoring``, ``cancelled``; None when ok). The rule is ``_exchange.outcome``'s and
    is applied once, when the episode ends (``settle``). ``attempts`` counts the times
    the episode was played (episode retries rerun a failed one; earlier attempts are
    summarised in ``info["retried"]``, never scored into this record). ``seed`` is
    the episode's seed (``_exchange.seeds.episode_seed`` of the run's seed, the task
    and the rollout): the env's RNG (``agents.rng``) and its agents' model-call seeds
    derive from it."""

    id: str
    env: str
    task: Task
    rollout: int = 0
    ok: bool = True
    cause: str | None = None
    attempts: int = 1
    stop: str = "completed"
    errors: list[ErrorInfo] = attrs.field(factory=list)
    traces: list[Trace] = attrs.field(factory=list)
    timing: EpisodeTiming = attrs.field(factory=EpisodeTiming)
    info: dict[str, Any] = attrs.field(factory=dict)
    seed: int = 0

    @property
    def info_stamp(self) -> EpisodeInfo:
        return EpisodeInfo(self.id, self.env, self.task.idx, self.rollout, self.seed)

    def settle(self) -> None:
        """Set ``ok`` and ``cause`` from how the episode and its traces ended."""
        self.cause = cause_of(
            self.stop, ((t.stop_condition, [e.kind for e in t.errors]) for t in self.traces)
        )
        self.ok = self.cause is None


def episode_id(env: str, task_idx: int, rollout: int) -> str:
    return f"{env}/{task_idx}/{rollout}"


async def run_episode(
    env: Env,
    episode: Episode,
    make_agent: AgentFactory,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - a per-episode budget, not a call option
) -> Episode:
    """Play ``episode`` (filled in place and returned). Checkpoint. Re-raises
    ``Cancelled`` after recording it and closing every session; any other error of
    ``env.run`` is recorded and swallowed."""
    stamp = episode.info_stamp
    agents = Agents(
        {
            role: make_agent(role, config, stamp, episode.traces.append)
            for role, config in env.roles.items()
        },
        seed=episode.seed,
    )
    episode.timing.started_at = time.time()
    start = trio.current_time()
    reason = "user_closed"
    deadline = math.inf if timeout is None else start + timeout

    def cancel_reason(session: ChatSession) -> str:
        # holds no session or agent (they hold it): the episode's objects stay free
        # of reference cycles, freed by reference counting (tests/test_work_counts.py)
        if trio.current_time() < deadline:
            return "cancelled"
        _waited_on_endpoint(session, deadline)
        return "episode_timeout"

    for agent in agents.values():
        agent.cancel_reason = cancel_reason
    try:
        async with trio.open_nursery() as nursery:
            # the episode's nursery: its scope carries the episode timeout, and
            # env.run runs in its body (tasks the env starts nest below it)
            scope = nursery.cancel_scope
            if timeout is not None:  # a scope's deadline is inf already: setting it
                scope.deadline = deadline  # costs a quarter of a scope (untimed evals)
            await env.run(episode.task, agents)
        if scope.cancelled_caught:  # an outcome, unless it caught a model request
            episode.stop, reason = "episode_timeout", "episode_timeout"
            for session in (s for agent in agents.values() for s in agent.sessions):
                _waited_on_endpoint(session, deadline)
            episode.errors.append(
                ErrorInfo("timeout", f"the episode took longer than {timeout}s", "TooSlowError")
            )
    except Exception as exc:
        episode.stop, reason = "env_error", "env_error"
        episode.errors.append(ErrorInfo.of("env", sole_error(exc)))
    except BaseException:
        episode.stop, reason = "cancelled", "cancelled"
        episode.errors.append(ErrorInfo("cancelled", "the episode was cancelled", "Cancelled"))
        raise
    finally:
        leftovers = [s for agent in agents.values() for s in agent.sessions]
        if leftovers:
            with trio.CancelScope(shield=True):
                for session in leftovers:
                    await session.close(reason=reason)
        episode.timing.ended_at = time.time()
        episode.timing.wall_s = trio.current_time() - start
        episode.settle()
    return episode


def _waited_on_endpoint(session: ChatSession, deadline: float) -> None:
    """The episode's timeout fired at ``deadline``: ``session``, if still open, its run
    not ended, and waiting on its model endpoint then, fails with cause ``model``
    (``ModelBoundary.timed_out``) before it is closed as timed out. Called when a
    session closes by the timeout's cancellation (its ``cancel_reason``) and once more
    for each session left open; idempotent."""
    if session.trace.stop_condition is None:
        session.rollout.boundary.timed_out("episode_timeout", deadline)
