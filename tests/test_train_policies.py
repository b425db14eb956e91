"""Two policies from one stream: ``open_rollouts(..., policies="role" | "model")``
gives each task one group per policy — its own advantages (computed over its own
traces only), samples and version tag — from the same episodes (in-process
built-in model)."""

from __future__ import annotations

import math
from pathlib import Path

import hypothesis.strategies as st
import pytest
import trio
from hypothesis import given

from taketurns import AgentConfig, Episode, EvalConfig, Task, Trace, open_rollouts
from taketurns._exchange.trace import AgentStamp
from taketurns._train.groups import make_groups
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker
from taketurns.envs.user_sim import UserAgentConfig, UserSim, UserSimConfig
from taketurns.train import group_advantages

QA = Path(__file__).resolve().parent.parent / "examples" / "qa.jsonl"
REWARDS = st.floats(min_value=-100, max_value=100, allow_nan=False)
MODELS = {"a": "m1", "b": "m2", "c": "m1"}  # two roles on one model


def episode(rollout: int, rewards: dict[str, float], *, ok: bool = True) -> Episode:
    task = Task(3, "t3")
    e = Episode(f"env/3/{rollout}", "env", task, rollout, ok=ok)
    for role, reward in rewards.items():
        stamp = AgentStamp(role, MODELS[role], "null")
        e.traces.append(Trace(stamp, e.info_stamp, task, reward=reward))
    return e


@given(
    st.lists(st.tuples(REWARDS, REWARDS, REWARDS, st.booleans()), min_size=1, max_size=8),
    st.sampled_from(["role", "model"]),
)
def test_policy_groups_split_the_advantages_each_computed_within_its_role(
    rows: list[tuple[float, float, float, bool]], policies: str
) -> None:
    episodes = [episode(i, {"a": a, "b": b, "c": c}, ok=ok) for i, (a, b, c, ok) in enumerate(rows)]
    keys = ["a", "b", "c"] if policies == "role" else ["m1", "m2"]
    groups = make_groups(episodes[0].task, episodes, policies=policies, keys=keys)
    assert [g.policy for g in groups] == keys
    owner = {"a": "a", "b": "b", "c": "c"} if policies == "role" else MODELS
    ok = [e for e in episodes if e.ok]
    for group in groups:
        assert group.episodes == sorted(episodes, key=lambda e: e.rollout)
        assert {owner[a.agent] for a in group.advantages} <= {group.policy}
        for role in {a.agent for a in group.advantages}:
            mine = [a for a in group.advantages if a.agent == role]
            assert len(mine) == len(ok)
            mean = math.fsum(a.reward for a in mine) / len(mine)
            for a in mine:  # the baseline is this role's own rewards, nobody else's
                assert a.advantage == pytest.approx(a.reward - mean, abs=1e-9)
    pooled = sorted((a.episode_id, a.agent, a.advantage) for g in groups for a in g.advantages)
    assert pooled == sorted(
        (a.episode_id, a.agent, a.advantage) for a in group_advantages(episodes)
    )


def test_two_roles_on_one_model_are_one_policy_with_a_baseline_per_role() -> None:
    episodes = [
        episode(0, {"a": 1.0, "b": 5.0, "c": 10.0}),
        episode(1, {"a": 3.0, "b": 5.0, "c": 0.0}),
    ]
    m1, m2 = make_groups(episodes[0].task, episodes, policies="model", keys=["m1", "m2"])
    got = {(a.episode_id, a.agent): a.advantage for a in m1.advantages}
    assert got == {
        ("env/3/0", "a"): -1.0,
        ("env/3/1", "a"): 1.0,
        ("env/3/0", "c"): 5.0,
        ("env/3/1", "c"): -5.0,
    }
    assert [a.advantage for a in m2.advantages] == [0.0, 0.0]


def test_a_policy_group_is_tagged_with_its_own_oldest_version() -> None:
    episodes = [episode(0, {"a": 0.0, "b": 0.0}), episode(1, {"a": 0.0, "b": 0.0})]
    episodes[0].info.update(policy_version=5, policy_versions={"a": 3})
    episodes[1].info.update(policy_version=6, policy_versions={"a": 1, "b": 9})
    a, b = make_groups(episodes[0].task, episodes, policies="role", keys=["a", "b"])
    assert (a.policy_version, b.policy_version) == (1, 5)  # b: its own 9, else the shared 5


def user_sim_both_trainable() -> UserSim:
    user = UserAgentConfig(trainable=True)
    return UserSim(UserSimConfig(taskset={"id": "jsonl", "path": str(QA)}, user=user))


async def test_user_sim_streams_a_group_for_the_user_and_one_for_the_assistant() -> None:
    env = user_sim_both_trainable()
    config = EvalConfig(env_id="user-sim", concurrency=4)
    tasks = env.tasks(3)
    seen: list[tuple[int, str | None]] = []
    async with open_rollouts(env, config, policies="role") as source:
        assert source.policy_keys == ["assistant", "user"]
        source.policy_versions = {"assistant": 10, "user": 20}
        async for group in source.groups(tasks, per_task=2):
            seen.append((group.task.idx, group.policy))
            samples = group.samples()
            assert samples
            assert {s.agent for s in samples} == {group.policy}
            assert {a.agent for a in group.advantages} == {group.policy}
            assert group.policy_version == {"assistant": 10, "user": 20}[group.policy]  # type: ignore[index]
            for e in group.episodes:
                tags = {t.agent.name: {turn.policy_version for turn in t.turns} for t in e.traces}
                assert tags == {"assistant": {"10"}, "user": {"20"}}
    assert sorted(seen) == [(t.idx, p) for t in tasks for p in ("assistant", "user")]


async def test_kuhn_with_two_models_streams_a_group_per_model_with_its_own_staleness(
    autojump_clock: trio.abc.Clock,
) -> None:
    players = {
        "player0": AgentConfig(model="builtin/bracket?latency_ms=10"),
        "player1": AgentConfig(model="builtin/echo?latency_ms=10"),
    }
    env = KuhnPoker(KuhnConfig(**players))
    config = EvalConfig(env_id="kuhn-poker", concurrency=4)
    tasks = env.tasks(10)
    delivered = []
    async with open_rollouts(env, config, policies="model", max_staleness=1) as source:
        bracket, echo = source.policy_keys
        assert (bracket, echo) == (players["player0"].model, players["player1"].model)
        source.policy_versions = {bracket: 0, echo: 0}  # type: ignore[dict-item]
        async for group in source.groups(tasks, per_task=2):
            role = "player0" if group.policy == bracket else "player1"
            assert {s.agent for s in group.samples()} == {role}
            assert group.policy_version is not None
            for e in group.episodes:
                (trace,) = [t for t in e.traces if t.agent.name == role]
                assert trace.agent.model == group.policy
                tags = {int(turn.policy_version or "-1") for turn in trace.turns}
                assert min(tags) >= group.policy_version
            delivered.append(group)
            await trio.sleep(1)  # a training step
            if group.policy == echo:
                source.policy_versions[echo] += 2  # only the echo policy moves on
    assert source.stale
    assert {g.policy for g in source.stale} == {echo}
    assert {g.task.idx for g in delivered if g.policy == bracket} == {t.idx for t in tasks}
    assert len(delivered) + len(source.stale) == 2 * len(tasks)


async def test_bad_policies_and_no_trainable_role_are_refused() -> None:
    env = user_sim_both_trainable()
    config = EvalConfig(env_id="user-sim")
    with pytest.raises(ValueError, match="policies = 'seat'; expected None"):
        async with open_rollouts(env, config, policies="seat"):
            pass
    frozen = KuhnPoker(
        KuhnConfig(player0=AgentConfig(trainable=False), player1=AgentConfig(trainable=False))
    )
    with pytest.raises(ValueError, match="no role of the env is trainable"):
        async with open_rollouts(frozen, EvalConfig(env_id="kuhn-poker"), policies="role"):
            pass
