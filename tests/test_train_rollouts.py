"""Streaming rollouts: groups as they complete, in the caller's trio loop, with
backpressure, policy-version tags and staleness, and cancellation that closes and
scores every episode in flight (in-process built-in model: autojump clock)."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pairenv
import pytest
import trio
import trio.testing
from httpservers import Answer, start_scripted
from hypothesis import given, settings

from taketurns import ConfigError, EvalConfig, Sampling, open_rollouts
from taketurns._eval.plan import make_env
from taketurns._models.model import ModelRequest, ModelResponse
from taketurns.errors import SessionError
from taketurns.testing import BuiltinModel
from taketurns.train import Group

SLOW = "builtin/bracket?latency_ms=10"


def kuhn(concurrency: int = 4, model: str = "builtin/bracket") -> tuple[EvalConfig, object]:
    config = EvalConfig(env_id="kuhn-poker", concurrency=concurrency, model=model)
    return config, make_env(config)


def check_group(group: Group, per_task: int) -> None:
    assert len(group.episodes) == per_task
    assert {e.task.idx for e in group.episodes} == {group.task.idx}
    assert [e.rollout for e in group.episodes] == list(range(per_task))
    for role in {a.agent for a in group.advantages}:
        total = math.fsum(a.advantage for a in group.advantages if a.agent == role)
        assert abs(total) < 1e-9


async def test_groups_arrive_complete_with_samples_and_advantages() -> None:
    config, env = kuhn()
    tasks = env.tasks(5)
    seen = []
    async with open_rollouts(env, config) as source:
        async for group in source.groups(tasks, per_task=4):
            check_group(group, 4)
            seen.append(group.task.idx)
            samples = group.samples()
            assert {s.agent for s in samples} == {"player0", "player1"}
            assert all(s.advantage is not None for s in samples)
            assert all(s.completion_logprobs is not None for s in samples)
            for e in group.episodes:
                assert e.ok
                for t in e.traces:
                    assert all(turn.policy_version == "builtin/bracket" for turn in t.turns)
    assert sorted(seen) == [t.idx for t in tasks]
    assert source.cut_off == []
    assert source.undelivered == []
    with pytest.raises(SessionError, match="closed"):
        source.groups(tasks, per_task=1)


async def test_rollouts_of_a_task_differ_so_advantages_are_not_all_zero() -> None:
    config, env = kuhn()
    async with open_rollouts(env, config) as source:
        groups = [g async for g in source.groups(env.tasks(6), per_task=6)]
    advantages = [a.advantage for g in groups for a in g.advantages]
    assert any(a != 0 for a in advantages)


async def test_a_stalled_consumer_holds_admission(autojump_clock: trio.abc.Clock) -> None:
    config, env = kuhn(concurrency=4, model=SLOW)
    tasks = env.tasks(30)
    peak = 0
    async with open_rollouts(env, config, max_waiting=1) as source:

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, source.in_flight)
                await trio.sleep(0.005)

        stream = source.groups(tasks, per_task=2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            first = await stream.__anext__()
            check_group(first, 2)
            await trio.sleep(20)  # the trainer is busy
            nursery.cancel_scope.cancel()
        started = source.started
        # one group taken, one waiting, and what the in-flight episodes finish
        assert started <= 2 * (1 + 1) + config.concurrency + 2
        assert len(stream.ready) <= 1 + config.concurrency
        await trio.sleep(500)
        assert source.started == started  # admission stayed paused
        assert source.in_flight == 0
        rest = [g async for g in stream]
    assert peak == config.concurrency  # full while running, never above
    assert len(rest) + 1 == len(tasks)
    assert source.started == 2 * len(tasks)


async def test_policy_version_tags_turns_and_stale_groups_are_dropped(
    autojump_clock: trio.abc.Clock,
) -> None:
    config, env = kuhn(concurrency=8, model=SLOW)
    tasks = env.tasks(12)
    delivered: list[Group] = []
    async with open_rollouts(env, config, max_waiting=2, max_staleness=1) as source:
        source.policy_version = 0
        async for group in source.groups(tasks, per_task=2):
            assert group.policy_version is not None
            assert group.policy_version == min(e.info["policy_version"] for e in group.episodes)
            assert source.policy_version - group.policy_version <= 1
            tags = {
                turn.policy_version for e in group.episodes for t in e.traces for turn in t.turns
            }
            assert tags <= {str(v) for v in range(group.policy_version, source.policy_version + 1)}
            delivered.append(group)
            await trio.sleep(1)  # a training step
            source.policy_version += 2
    assert delivered
    assert source.stale  # groups started two steps back were dropped
    for group in source.stale:
        assert group.policy_version is not None
    assert len(delivered) + len(source.stale) == len(tasks)


async def test_leaving_early_closes_and_scores_every_episode_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    ledger = pairenv.PairEnv.reset()
    config = EvalConfig(env_id="faults-pair", concurrency=6, model=SLOW)
    env = make_env(config)
    async with open_rollouts(env, config, max_waiting=4) as source:
        async for group in source.groups(env.tasks(20), per_task=3):
            check_group(group, 3)
            break
    assert source.cut_off, "nothing was in flight"
    assert any(e.stop == "cancelled" for e in source.cut_off)
    for e in source.cut_off:
        assert not e.ok or e.stop == "completed"
        for t in e.traces:
            assert t.stop_condition is not None
    assert ledger.opened  # every session opened was scored exactly once
    assert ledger.scored == ledger.opened
    assert source.in_flight == 0


async def test_an_error_in_the_body_leaves_as_itself(autojump_clock: trio.abc.Clock) -> None:
    config, env = kuhn(model=SLOW)

    async def train() -> None:
        async with open_rollouts(env, config) as source:
            async for group in source.groups(env.tasks(4), per_task=2):
                raise ZeroDivisionError(group.task.idx)

    with pytest.raises(ZeroDivisionError):
        await train()


async def test_bad_arguments_are_refused() -> None:
    config, env = kuhn()
    with pytest.raises(ValueError, match="max_waiting"):
        async with open_rollouts(env, config, max_waiting=0):
            pass
    async with open_rollouts(env, config) as source:
        with pytest.raises(ValueError, match="per_task"):
            source.groups(env.tasks(1), per_task=0)


@settings(max_examples=12, deadline=None)
@given(
    concurrency=st.integers(1, 6),
    per_task=st.integers(1, 4),
    max_waiting=st.integers(1, 3),
    taken=st.integers(0, 3),
)
def test_in_flight_stays_bounded_whatever_the_sizes(
    concurrency: int, per_task: int, max_waiting: int, taken: int
) -> None:
    # one trio run per example (docs/design.md "Testing": hypothesis + async fixtures do not mix)
    config, env = kuhn(concurrency=concurrency, model=SLOW)
    tasks = env.tasks(12)

    async def main() -> None:
        peak = 0
        async with open_rollouts(env, config, max_waiting=max_waiting) as source:
            stream = source.groups(tasks, per_task=per_task)

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, source.in_flight)
                    await trio.sleep(0.005)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                for _ in range(taken):
                    await stream.__anext__()
                await trio.sleep(10)  # stalled
                nursery.cancel_scope.cancel()
            held = source.started
            assert peak <= concurrency
            # the groups taken, those allowed to wait, and what was in flight at the pause
            assert held <= per_task * (taken + max_waiting) + concurrency + per_task
            await trio.sleep(100)
            assert source.started == held
            rest = [g async for g in stream]
        assert taken + len(rest) == len(tasks)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_wrong_endpoint_is_refused_before_any_episode(nursery: trio.Nursery) -> None:
    endpoint = await start_scripted(nursery, Answer(404, {"error": {"message": "no model"}}))
    config = EvalConfig(env_id="kuhn-poker", model="nope", base_url=endpoint.base_url)
    env = make_env(config)
    with pytest.raises(ConfigError, match="preflight"):
        async with open_rollouts(env, config):
            pytest.fail("the source opened")
    assert len(endpoint.seen) == 1  # the one check, no episode


async def test_failed_episodes_stay_in_their_group_without_advantages(
    autojump_clock: trio.abc.Clock,
) -> None:
    ledger = pairenv.PairEnv.reset({1: "env_raises"})
    config = EvalConfig(env_id="faults-pair", concurrency=4, model=SLOW)
    env = make_env(config)
    async with open_rollouts(env, config) as source:
        groups = {g.task.idx: g async for g in source.groups(env.tasks(3), per_task=2)}
    assert sorted(groups) == [0, 1, 2]
    broken = groups[1]
    assert broken.failed == 2
    assert all(e.stop == "env_error" for e in broken.episodes)
    assert broken.advantages == []
    assert broken.samples() == []
    for idx in (0, 2):
        assert groups[idx].failed == 0
        assert {a.agent for a in groups[idx].advantages} == {"a", "b"}
        assert groups[idx].samples()
    assert ledger.scored == ledger.opened  # the failed ones were closed and scored too


async def test_every_episode_id_is_unique_across_repeated_tasks_and_streams() -> None:
    config, env = kuhn()
    task = env.tasks(1)[0]
    async with open_rollouts(env, config) as source:
        first = [g async for g in source.groups([task, task], per_task=2)]
        second = [g async for g in source.groups([task], per_task=2)]
    ids = [e.id for g in first + second for e in g.episodes]
    assert len(ids) == len(set(ids)) == 6
    assert all(i.startswith("kuhn-poker/0/") for i in ids)
    for group in first + second:
        assert len({e.id.rsplit("/", 1)[1] for e in group.episodes}) == 1  # /g<n>


async def test_a_trainer_samples_at_temperature_one_without_truncation_unless_set() -> None:
    config, env = kuhn()
    task = env.tasks(1)
    async with open_rollouts(env, config) as source:
        async for group in source.groups(task, per_task=1):
            for turn in group.episodes[0].traces[0].turns:
                assert turn.sampling is not None
                assert turn.sampling["temperature"] == 1.0
                assert turn.sampling["top_p"] == 1.0
                assert turn.sampling["top_k"] == -1
                assert turn.sampling["min_p"] == 0.0
                assert turn.sampling["repetition_penalty"] == 1.0
            assert group.samples()[0].sampling == group.episodes[0].traces[0].turns[0].sampling
    config = EvalConfig(
        env_id="kuhn-poker",
        model="builtin/bracket",
        sampling=Sampling(temperature=0.7, extra={"top_k": 20}),
    )
    async with open_rollouts(env, config, tokens=False) as source:
        async for group in source.groups(task, per_task=1):
            sent = group.episodes[0].traces[0].turns[0].sampling
            assert sent == {"temperature": 0.7, "top_p": 1.0, "top_k": 20}


class _Owned(BuiltinModel):
    """A caller's in-process client: counts its calls and whether it was closed."""

    def __init__(self) -> None:
        super().__init__("bracket")
        self.calls = 0
        self.closed = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return await super().complete(request)

    async def aclose(self) -> None:
        self.closed = True


async def test_a_client_the_caller_owns_serves_its_model_name_unchecked_and_stays_open() -> None:
    owned = _Owned()
    # a base URL nothing listens on: never preflighted nor called for the owned name
    config = EvalConfig(
        env_id="kuhn-poker", concurrency=4, model="live", base_url="http://127.0.0.1:9/v1"
    )
    env = make_env(config)
    async with open_rollouts(env, config, models={"live": owned}) as source:
        async for group in source.groups(env.tasks(2), per_task=2):
            turns = [t for e in group.episodes for tr in e.traces for t in tr.turns]
            assert turns
            assert all(e.ok for e in group.episodes)
    assert owned.calls > 0
    assert not owned.closed
