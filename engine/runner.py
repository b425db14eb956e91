"""The eval runner: every planned (task, rollout) pair becomes one episode.

Structure (DESIGN.md "who owns what")::

    run_eval (one nursery: signal watcher, the backend)
     └─ play_pairs (local backend; each worker of engine.ray_backend and of
        │          engine.process_backend runs it on its shard of the pairs)
        ├─ interception server (if a harness needs one), shared asyncio loop (engine.aio)
        └─ episode limiter (CapacityLimiter c), taken before an episode opens any
           session and held until it is written; the only other gate is the optional
           model-call limiter, held for one request at a time.

Each finished episode is appended to ``episodes.jsonl`` at once (also a failed,
timed-out or cancelled one); a worker backend hands over each batch it receives,
lines and digests as its workers made them (``shards.OnLines``). SIGINT/SIGTERM
cancel the running episodes, which are closed, scored and written as cancelled (also
by worker processes; on Ray: not written, ``--resume`` reruns them); a second signal
exits at once.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import trio

from engine.agent import Agent, make_harness
from engine.aio import open_asyncio_host
from engine.builtin import BuiltinModel, is_builtin
from engine.config import AgentConfig, EvalConfig, Sampling
from engine.env import Env
from engine.episode import Episode, episode_id, run_episode
from engine.errors import ConfigError, TaketurnsError, sole_error
from engine.model import ModelClient
from engine.output import RunDir
from engine.progress import EvalProgress
from engine.records import episode_line
from engine.registry import envs
from engine.summary import digest, summarize
from engine.task import Task
from engine.trace import EpisodeInfo, Trace

__all__ = [
    "EvalRun",
    "Interrupted",
    "Plan",
    "collect_less",
    "make_env",
    "play_pairs",
    "preflight",
    "run_eval",
]


class Interrupted(Exception):
    """The eval was stopped by SIGINT/SIGTERM; finished episodes are on disk."""


@attrs.define
class EvalRun:
    """What ``run_eval`` returns: the summary and where everything was written."""

    summary: dict[str, Any]
    run_dir: RunDir
    written: int


def resolve_role(config: EvalConfig, env: Env, role: str, agent: AgentConfig) -> AgentConfig:
    """The role's config with its unset endpoint fields taken from the eval."""
    return attrs.evolve(
        agent,
        harness=agent.harness or env.default_harness(role),
        model=agent.model or config.model,
        base_url=agent.base_url if agent.base_url is not None else config.base_url,
        api_key_var=agent.api_key_var or config.api_key_var,
        sampling=agent.sampling.over(config.sampling),
    )


def _client_for(config: EvalConfig, role: str, agent: AgentConfig) -> ModelClient:
    if agent.base_url is None:
        if not is_builtin(agent.model):
            raise ConfigError(
                f"env.{role}.model = {agent.model!r}: an endpoint model needs a base URL "
                f"(--base-url or --env.{role}.base_url); without one use builtin/<policy>"
            )
        return BuiltinModel.from_model_name(agent.model, field=f"env.{role}.model")
    from engine.client import OpenAIClient

    return OpenAIClient(
        agent.base_url,
        api_key_var=agent.api_key_var,
        timeout=config.request_timeout_s,
        concurrency=config.concurrency * 2,
    )


async def preflight(config: EvalConfig, env: Env) -> None:
    """Call every distinct endpoint once with throwaway clients (their connections
    belong to this trio run). Raises ``ConfigError`` naming the failing endpoint."""
    seen = set()
    for role, agent in env.roles.items():
        agent = resolve_role(config, env, role, agent)
        key = (agent.model, agent.base_url, agent.api_key_var)
        if agent.base_url is None or key in seen:
            continue
        seen.add(key)
        client = _client_for(config, role, agent)
        try:
            await client.preflight(agent.model or config.model)
        finally:
            await client.aclose()


class Plan:
    """Clients, harnesses and limiters per role, built (and validated, raising
    ``ConfigError``) before any episode starts; ``run_eval`` builds one if not given."""

    def __init__(self, config: EvalConfig, env: Env) -> None:
        self.env = env
        self.roles = {r: resolve_role(config, env, r, a) for r, a in env.roles.items()}
        self.clients: dict[tuple[Any, ...], ModelClient] = {}  # one per distinct endpoint
        self.services: dict[str, Any] = {}  # filled by the runner (interception server)
        shared = config.max_concurrent_calls
        shared_limiter = trio.CapacityLimiter(shared) if shared else None
        # one prototype agent per role; each episode binds its own copy
        self.agents: dict[str, Agent] = {}
        for role, agent in self.roles.items():
            key = (agent.model, agent.base_url, agent.api_key_var)
            if key not in self.clients:
                self.clients[key] = _client_for(config, role, agent)
            cap = agent.max_concurrent_calls
            self.agents[role] = Agent(
                role,
                agent,
                client=self.clients[key],
                harness=make_harness(
                    agent.harness or "null", agent.harness_options, field=f"env.{role}"
                ),
                rubric=env.rubric(role),
                limiter=trio.CapacityLimiter(cap) if cap else shared_limiter,
                services=self.services,
            )

    def make_agent(
        self, role: str, _config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        prototype = self.agents[role]
        # rollouts of the (deterministic) built-in model differ by seed = rollout index
        seeded = isinstance(prototype.client, BuiltinModel) and info.rollout > 0
        sampling = Sampling(seed=info.rollout) if seeded else None
        return prototype.bind(info, on_close=on_close, sampling=sampling)

    @property
    def needs_interception(self) -> bool:
        from engine.interception import ServedHarness

        return any(isinstance(a.harness, ServedHarness) for a in self.agents.values())

    async def aclose(self) -> None:
        """Close the model clients, then shut each distinct harness down; shielded."""
        with trio.CancelScope(shield=True):
            for client in self.clients.values():
                await client.aclose()
            for harness in {id(a.harness): a.harness for a in self.agents.values()}.values():
                await harness.shutdown()


def make_env(config: EvalConfig) -> Env:
    env_cls = envs.get(config.env_id, field="env_id")
    env: Env = env_cls(config.env)
    return env


async def _watch_signals(cancel: trio.CancelScope, task_status: Any) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if cancel.cancel_called:
                os._exit(130)  # second signal: exit at once, as promised
            cancel.cancel()


async def run_eval(
    config: EvalConfig,
    run_dir: RunDir,
    *,
    env: Env | None = None,
    plan: Plan | None = None,
    tasks: Sequence[Task] | None = None,
    progress: bool = True,
    report: bool = True,
    handle_signals: bool = False,
) -> EvalRun:
    """Run every (task, rollout) pair not yet in ``run_dir`` and write the summary.
    Raises ``ConfigError`` before any episode starts; ``Interrupted`` after a signal
    (with every finished and cancelled episode written)."""
    env = env if env is not None else make_env(config)
    plan = plan if plan is not None else Plan(config, env)
    tasks = list(tasks if tasks is not None else env.tasks(config.num_tasks))
    finished = run_dir.finished()
    todo = _owed(tasks, config.rollouts, finished)
    start = time.monotonic()
    written = 0
    interrupted = True  # until the episodes' loop ends on its own
    run_dir.open()
    try:
        planned = len(tasks) * config.rollouts
        with EvalProgress(planned, done=planned - len(todo), enabled=progress) as bar:

            def record_lines(batch: list[tuple[bytes, dict[str, Any]]]) -> None:
                nonlocal written
                run_dir.append_lines(line for line, _ in batch)
                for _, digested in batch:
                    finished.append(digested)
                    bar.add(digested)
                written += len(batch)

            with trio.CancelScope() as cancel, _unwrapped():
                async with trio.open_nursery() as nursery:
                    if handle_signals:
                        await nursery.start(_watch_signals, cancel)
                    await _on_backend(config, env, plan, todo, record_lines)
                    nursery.cancel_scope.cancel()
            interrupted = cancel.cancelled_caught
    finally:
        run_dir.close()
        await plan.aclose()
        # also when the run is cancelled from outside: what was written is summed up
        summary = summarize(finished, rollouts=config.rollouts, wall_s=time.monotonic() - start)
        summary["interrupted"] = interrupted
        run_dir.write_summary(summary)
        if report:
            from engine.report import write_report

            write_report(run_dir.path)
    if interrupted:
        raise Interrupted(f"interrupted; {written} episodes written this run to {run_dir.path}")
    return EvalRun(summary, run_dir, written)


async def _on_backend(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    todo: Sequence[tuple[Task, int]],
    record_lines: Callable[[list[tuple[bytes, dict[str, Any]]]], None],
) -> None:
    """Play ``todo`` where ``config.backend`` says; each finished episode reaches
    ``record_lines`` as its JSONL line and summary digest."""
    if config.backend == "ray":
        from engine.ray_backend import run_on_ray

        await run_on_ray(config, env, todo, record_lines)
    elif config.backend == "processes":
        from engine.process_backend import run_on_processes

        await run_on_processes(config, env, todo, record_lines)
    else:

        def record(episode: Episode) -> None:
            record_lines([(episode_line(episode), digest(episode))])

        await play_pairs(config, env, plan, todo, record)


def _owed(
    tasks: Sequence[Task], rollouts: int, finished: Sequence[Mapping[str, Any]]
) -> list[tuple[Task, int]]:
    """The (task, rollout) pairs not yet on disk, in task order."""
    done = {(e["task"]["idx"], e["rollout"]) for e in finished}
    return [(t, r) for t in tasks for r in range(rollouts) if (t.idx, r) not in done]


async def play_pairs(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    on_episode: Callable[[Episode], None],
) -> None:
    """Play each (task, rollout) pair as an episode, ``config.concurrency`` at once, and
    call ``on_episode`` as each finishes (also a failed, timed-out or cancelled one).
    Brackets the episodes with ``env.setup`` / ``env.finalize``. The per-episode loop
    of the local backend and of every worker (Ray or process)."""
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
        with collect_less():
            await _serve_pairs(config, plan, pairs, play, limiter)
    finally:
        with trio.CancelScope(shield=True):
            await env.finalize()


async def _serve_pairs(
    config: EvalConfig,
    plan: Plan,
    pairs: Sequence[tuple[Task, int]],
    play: Callable[[Task, int], Any],
    limiter: trio.CapacityLimiter,
) -> None:
    """The services (interception server, asyncio host) and the episodes."""
    async with trio.open_nursery() as services, open_asyncio_host():
        if plan.needs_interception:
            from engine.interception import InterceptionServer

            server = InterceptionServer(
                host=config.interception_host,
                port=config.interception_port,
                public_url=config.interception_public_url,
            )
            plan.services["interception"] = await services.start(server.run)
        if config.concurrency == 1:
            # one at a time: in this task, in order (a task per episode would only
            # add its spawn and a wake-up of this loop: two of a Kuhn episode's seven
            # scheduler steps)
            for task, rollout in pairs:
                limiter.acquire_on_behalf_of_nowait((task.idx, rollout))
                await play(task, rollout)
            services.cancel_scope.cancel()
            return
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


@contextlib.contextmanager
def collect_less() -> Iterator[None]:
    """An eval keeps thousands of sessions alive while it churns through short-lived
    objects. A young-generation collection scans every young object still alive, and
    with the default threshold (a collection every 700 allocations) nearly all of them
    are: sessions live for seconds, collections come every few milliseconds (half the
    CPU at 10,000 episodes, benchmarks/bench_scale.py). The engine itself leaves no
    cyclic garbage per episode (tests/test_work_counts.py), so while episodes run (or,
    in a worker backend's driver, while their records arrive):
    freeze what exists already and collect only every million allocations, by which
    time most young objects have died by reference counting and are never scanned.
    The process's settings are restored after."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], 1_000_000), max(before[1], 20), max(before[2], 20))
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """A taketurns error raised on purpose (a backend's ``ConfigError``, a worker
    backend's ``WorkerLost``) leaves the run's nursery as itself, not in an exception
    group."""
    try:
        yield
    except BaseExceptionGroup as group:
        sole = sole_error(group)
        if isinstance(sole, TaketurnsError):
            raise sole from None
        raise


def _order(episode: Episode, rank: dict[str, int]) -> None:
    """Traces in role order (they join the episode in the order sessions close)."""
    traces = episode.traces
    keys = [rank.get(t.agent.name, len(rank)) for t in traces]
    if keys != sorted(keys):
        episode.traces = [t for _, t in sorted(zip(keys, traces, strict=True), key=_first)]


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]
