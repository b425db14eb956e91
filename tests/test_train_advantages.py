"""Group advantages: reward minus the group mean per trainable role, over ok episodes
only (optionally scaled by the standard deviation); zero-sum seats apart."""

from __future__ import annotations

import math
import statistics

import hypothesis.strategies as st
import pytest
from hypothesis import given

from taketurns import Episode, Task, Trace
from taketurns._exchange.trace import AgentStamp
from taketurns.train import group_advantages, make_group

REWARDS = st.floats(min_value=-100, max_value=100, allow_nan=False)


def episode(
    rollout: int,
    rewards: dict[str, float],
    *,
    ok: bool = True,
    frozen: frozenset[str] = frozenset(),
) -> Episode:
    task = Task(3, "t3")
    e = Episode(f"env/3/{rollout}", "env", task, rollout, ok=ok)
    for role, reward in rewards.items():
        stamp = AgentStamp(role, "builtin/bracket", "null", trainable=role not in frozen)
        e.traces.append(Trace(stamp, e.info_stamp, task, reward=reward))
    return e


@given(
    st.lists(st.tuples(REWARDS, REWARDS, st.booleans()), min_size=1, max_size=12),
    st.booleans(),
)
def test_advantages_sum_to_zero_per_role_over_ok_episodes(
    rows: list[tuple[float, float, bool]], scale: bool
) -> None:
    episodes = [episode(i, {"a": ra, "b": rb}, ok=ok) for i, (ra, rb, ok) in enumerate(rows)]
    advantages = group_advantages(episodes, scale=scale)
    ok_ids = {e.id for e in episodes if e.ok}
    assert {a.episode_id for a in advantages} == ok_ids
    for role in ("a", "b"):
        mine = [a for a in advantages if a.agent == role]
        assert len(mine) == len(ok_ids)
        if not mine:
            continue
        assert math.isclose(math.fsum(a.advantage for a in mine), 0.0, abs_tol=1e-6)
        rewards = [a.reward for a in mine]
        mean = statistics.fmean(rewards)
        std = statistics.pstdev(rewards)
        divisor = std if scale and std > 1e-6 else 1.0
        for a in mine:
            assert a.advantage == pytest.approx((a.reward - mean) / divisor, abs=1e-9)


def test_failed_episodes_neither_get_an_advantage_nor_move_the_mean() -> None:
    episodes = [
        episode(0, {"a": 1.0}),
        episode(1, {"a": 0.0}),
        episode(2, {"a": -50.0}, ok=False),
    ]
    advantages = group_advantages(episodes)
    assert [(a.episode_id, a.advantage) for a in advantages] == [
        ("env/3/0", 0.5),
        ("env/3/1", -0.5),
    ]


def test_zero_sum_seats_get_their_own_advantages() -> None:
    # pooled, the seats' rewards would cancel to a mean of 0 for every episode
    episodes = [episode(0, {"p0": 1.0, "p1": -1.0}), episode(1, {"p0": -2.0, "p1": 2.0})]
    by = {(a.episode_id, a.agent): a.advantage for a in group_advantages(episodes)}
    assert by == {
        ("env/3/0", "p0"): 1.5,
        ("env/3/1", "p0"): -1.5,
        ("env/3/0", "p1"): -1.5,
        ("env/3/1", "p1"): 1.5,
    }
    scaled = {(a.episode_id, a.agent): a.advantage for a in group_advantages(episodes, scale=True)}
    assert scaled[("env/3/0", "p0")] == pytest.approx(1.0)


def test_untrainable_roles_and_all_failed_groups_give_nothing() -> None:
    mixed = [episode(i, {"a": float(i), "user": 5.0}, frozen=frozenset({"user"})) for i in range(3)]
    assert {a.agent for a in group_advantages(mixed)} == {"a"}
    assert group_advantages([episode(0, {"a": 1.0}, ok=False)]) == []
    assert group_advantages([]) == []


def test_a_group_orders_its_episodes_and_counts_failures() -> None:
    group = make_group(Task(3, "t3"), [episode(1, {"a": 2.0}), episode(0, {"a": 0.0}, ok=False)])
    assert [e.rollout for e in group.episodes] == [0, 1]
    assert group.failed == 1
    assert [e.rollout for e in group.ok_episodes] == [1]
    assert [(a.episode_id, a.advantage) for a in group.advantages] == [("env/3/1", 0.0)]
    assert group.samples() == []  # these traces carry no token data
