"""Episode retries in the streaming rollouts: the eval's rule (``play_with_retries``),
so a streamed group holds each episode's last attempt only, counted, and the attempts
share one admission slot (in-process built-in model: autojump clock)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import trio
import trio.testing
from pairenv import Ledger, PairConfig, PairEnv

from taketurns import (
    Agents,
    EvalConfig,
    ModelEndpointError,
    RunDir,
    Task,
    open_rollouts,
    read_episodes,
)
from taketurns.testing import ScriptedModel
from taketurns.train import Group

SLOW = "builtin/bracket?latency_ms=10"


class FlakyPairEnv(PairEnv):
    """``faults-pair`` whose model endpoint is down for the first attempt of each
    episode of the ``flaky`` tasks (seat a's first call fails: a ``model`` failure);
    counts the attempts played per episode and how many run at once."""

    def __init__(self, config: PairConfig, flaky: set[int]) -> None:
        super().__init__(config)
        self.flaky = flaky
        self.played = collections.Counter[str]()
        self.running = 0
        self.peak = 0

    async def run(self, task: Task, agents: Agents) -> None:
        assert agents.a.episode is not None
        id_ = agents.a.episode.id
        self.played[id_] += 1
        if task.idx in self.flaky and self.played[id_] == 1:
            agents.a.client = ScriptedModel(ModelEndpointError("the endpoint is down"))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await super().run(task, agents)
        finally:
            self.running -= 1


def flaky_env(flaky: set[int], **options: Any) -> tuple[EvalConfig, FlakyPairEnv, Ledger]:
    ledger = PairEnv.reset()
    env = PairConfig(turns=1)
    config = EvalConfig("faults-pair", model=SLOW, env=env, **options)
    return config, FlakyPairEnv(env, flaky), ledger


def check_sessions(ledger: Ledger, env: FlakyPairEnv) -> None:
    """Every session of every attempt (dropped ones too) was scored exactly once."""
    assert ledger.opened
    assert ledger.scored == ledger.opened
    for (id_, _), opened in ledger.opened.items():
        assert opened == env.played[id_]


async def collect(env: FlakyPairEnv, config: EvalConfig, tasks: int, per_task: int) -> list[Group]:
    async with open_rollouts(env, config) as source:
        groups = [g async for g in source.groups(env.tasks(tasks), per_task=per_task)]
    assert source.started == tasks * per_task  # admitted once, whatever the attempts
    assert source.in_flight == 0
    assert source.cut_off == []
    assert source.undelivered == []
    assert len(groups) == tasks
    return groups


async def test_a_retried_episode_streams_its_last_attempt_only(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    flaky = {1, 3}
    config, env, ledger = flaky_env(flaky, concurrency=3, episode_retries=1)
    run_dir = RunDir(tmp_path / "run")
    run_dir.prepare(resume=False, overwrite=False)
    async with open_rollouts(env, config, run_dir=run_dir) as source:
        groups = [g async for g in source.groups(env.tasks(5), per_task=2)]
    assert source.started == 10
    assert source.in_flight == 0
    assert len(groups) == 5
    for group in groups:
        assert [e.rollout for e in group.episodes] == [0, 1]
        for e in group.episodes:
            assert e.ok, (e.id, e.cause)
            if group.task.idx in flaky:
                assert e.attempts == 2
                (note,) = e.info["retried"]
                assert (note["attempt"], note["cause"]) == (1, "model")
                assert any("the endpoint is down" in m for m in note["errors"])
            else:
                assert e.attempts == 1
                assert "retried" not in e.info
            assert sorted(t.agent.name for t in e.traces) == ["a", "b"]  # one attempt's
        assert len(group.advantages) == 4  # two seats of two kept episodes
    check_sessions(ledger, env)
    assert sum(env.played.values()) == 10 + 2 * len(flaky)
    assert env.peak <= config.concurrency  # a retry runs in its episode's slot
    # only the last attempts were written, once each
    on_disk = list(read_episodes(run_dir.path / "episodes.jsonl"))
    assert sorted(e["id"] for e in on_disk) == sorted(e.id for g in groups for e in g.episodes)
    assert {e["id"]: e["attempts"] for e in on_disk} == {
        e.id: e.attempts for g in groups for e in g.episodes
    }
    assert all(e["ok"] for e in on_disk)


async def test_without_retries_a_failed_episode_stays_failed(
    autojump_clock: trio.abc.Clock,
) -> None:
    config, env, ledger = flaky_env({0, 2}, concurrency=4)
    assert config.episode_retries == 0
    for group in await collect(env, config, tasks=4, per_task=2):
        for e in group.episodes:
            assert e.attempts == 1
            assert "retried" not in e.info
            assert e.ok == (group.task.idx not in {0, 2})
            assert e.cause == (None if e.ok else "model")
        if group.task.idx in {0, 2}:  # no ok episode: no advantages, no samples
            assert group.advantages == []
            assert group.samples() == []
    check_sessions(ledger, env)
    assert set(env.played.values()) == {1}


async def test_a_cause_not_in_retry_causes_is_not_retried(autojump_clock: trio.abc.Clock) -> None:
    config, env, ledger = flaky_env({1}, concurrency=2, episode_retries=3, retry_causes=["env"])
    groups = {g.task.idx: g for g in await collect(env, config, tasks=3, per_task=2)}
    for e in groups[1].episodes:
        assert (e.ok, e.cause, e.attempts) == (False, "model", 1)
        assert "retried" not in e.info
    assert all(e.ok for idx in (0, 2) for e in groups[idx].episodes)
    check_sessions(ledger, env)
    assert set(env.played.values()) == {1}


async def test_retries_hold_the_in_flight_bound_under_a_stalled_consumer(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Every episode fails its first attempt: the retries run inside the admitted
    episodes' slots, so at most ``concurrency`` attempts run at once, and a stalled
    consumer still pauses admission."""
    tasks = 12
    config, env, ledger = flaky_env(set(range(tasks)), concurrency=3, episode_retries=1)
    peak = 0
    async with open_rollouts(env, config, max_waiting=1) as source:

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, source.in_flight)
                await trio.sleep(0.003)

        stream = source.groups(env.tasks(tasks), per_task=2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            first = await stream.__anext__()
            await trio.sleep(30)  # the trainer is busy
            nursery.cancel_scope.cancel()
        started = source.started
        assert started <= 2 * (1 + 1) + config.concurrency + 2  # as without retries
        assert source.in_flight == 0
        await trio.sleep(300)
        assert source.started == started  # admission stayed paused
        rest = [g async for g in stream]
    assert peak == config.concurrency
    assert env.peak == config.concurrency  # attempts running at once, retries included
    assert len(rest) + 1 == tasks
    for group in [first, *rest]:
        assert [(e.ok, e.attempts) for e in group.episodes] == [(True, 2), (True, 2)]
    check_sessions(ledger, env)
    assert set(env.played.values()) == {2}


async def test_leaving_during_a_retry_closes_and_scores_it(autojump_clock: trio.abc.Clock) -> None:
    """Every first attempt fails at once and a retry takes about 30 ms (three model
    calls of 10 ms): 15 ms after the first group, the episodes in flight are retries.
    Leaving cancels them: each is closed and scored, and kept once with its count."""
    config, env, ledger = flaky_env(set(range(20)), concurrency=4, episode_retries=1)
    async with open_rollouts(env, config, max_waiting=20) as source:
        async for group in source.groups(env.tasks(20), per_task=2):
            assert all(e.attempts == 2 for e in group.episodes)
            await trio.sleep(0.015)
            break
    kept = source.cut_off + [e for g in source.undelivered for e in g.episodes]
    cancelled = [e for e in kept if e.stop == "cancelled"]
    assert len(cancelled) == config.concurrency, "the episodes in flight were not all kept"
    for e in cancelled:  # the attempt that was running, counted
        assert (e.ok, e.cause, e.attempts) == (False, "cancelled", 2)
        assert [r["cause"] for r in e.info["retried"]] == ["model"]
        for t in e.traces:
            assert t.stop_condition is not None
    for e in kept:
        assert e.attempts == env.played[e.id]
    ids = [e.id for e in kept] + [e.id for e in group.episodes]
    assert len(ids) == len(set(ids))  # each episode once, whatever its attempts
    assert set(ids) == set(env.played)
    check_sessions(ledger, env)
    assert source.in_flight == 0
