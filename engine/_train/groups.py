"""``Group``: one task's complete group of episodes, with their advantages and the
token-level samples a policy-gradient step consumes.

Groups per policy: with ``policies="role"`` each trainable role is its own policy,
with ``policies="model"`` each model name a trainable role runs on (two roles on one
model are one policy). A task's episodes then make one group per policy, each
holding all the episodes but only that policy's traces' advantages (and so
samples). Advantages are per role either way (``group_advantages``), so a policy's
group never mixes another policy's rewards into its baseline; with ``policies=None``
one group holds every trainable trace, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taketurns._eval.episode import Episode
from taketurns._exchange.task import Task
from taketurns._exchange.trace import AgentStamp
from taketurns._train.advantages import TraceAdvantage, group_advantages
from taketurns._train.samples import Sample, trace_samples

__all__ = [
    "POLICIES",
    "Group",
    "check_policies",
    "episode_version",
    "make_group",
    "make_groups",
    "policy_of",
]

POLICIES = ("role", "model")


def check_policies(policies: str | None) -> None:
    """Raise ``ValueError`` naming the field unless ``policies`` is None or in ``POLICIES``."""
    if policies is not None and policies not in POLICIES:
        raise ValueError(
            f"policies = {policies!r}; expected None (one group per task), 'role' (one "
            "group per trainable role) or 'model' (one group per model name)"
        )


def policy_of(agent: AgentStamp, policies: str | None) -> str | None:
    """The policy key of the agent that made a trace: its role, its model, or None."""
    if policies == "role":
        return agent.name
    if policies == "model":
        return agent.model
    return None


def episode_version(episode: Episode, policy: str | None) -> int | None:
    """The version tag ``policy`` had when ``episode`` started: its own tag in
    ``info["policy_versions"]`` if the trainer set one, else the source's shared tag
    ``info["policy_version"]`` (None: untagged)."""
    own = episode.info.get("policy_versions") or {}
    if policy is not None and policy in own:
        return int(own[policy])
    shared = episode.info.get("policy_version")
    return None if shared is None else int(shared)


@attrs.define(eq=False)
class Group:
    """``episodes``: all of the task's episodes, failed ones included (``ok`` False);
    ``advantages``: one per trainable trace of the ok episodes (of ``policy``'s
    traces only, when the group is one policy's); ``policy``: the role or model
    name this group trains (None: every trainable trace); ``policy_version``: the
    oldest version tag of that policy its episodes started under (None: no tag)."""

    task: Task
    episodes: list[Episode]
    advantages: list[TraceAdvantage]
    policy_version: int | None = None
    policy: str | None = None

    @property
    def ok_episodes(self) -> list[Episode]:
        return [e for e in self.episodes if e.ok]

    @property
    def failed(self) -> int:
        return sum(not e.ok for e in self.episodes)

    def samples(self) -> list[Sample]:
        """The samples of every trace that has an advantage (trainable agents of ok
        episodes; of this group's policy only), each with its trace's reward and
        advantage."""
        by_episode = {e.id: e for e in self.episodes}
        out: list[Sample] = []
        for adv in self.advantages:
            trace = by_episode[adv.episode_id].traces[adv.trace]
            out += [attrs.evolve(s, advantage=adv.advantage) for s in trace_samples(trace)]
        return out


def make_group(
    task: Task,
    episodes: Sequence[Episode],
    *,
    scale: bool = False,
    policy_version: int | None = None,
) -> Group:
    """A ``Group`` of ``episodes`` (one task's) in rollout order, advantages computed."""
    ordered = sorted(episodes, key=lambda e: e.rollout)
    return Group(task, ordered, group_advantages(ordered, scale=scale), policy_version)


def make_groups(
    task: Task,
    episodes: Sequence[Episode],
    *,
    policies: str | None,
    keys: Sequence[str | None],
    scale: bool = False,
) -> list[Group]:
    """One ``Group`` per policy key in ``keys`` (``[None]`` with ``policies=None``),
    each over all of ``episodes`` in rollout order, holding the advantages of the
    traces whose ``policy_of`` is its key and the oldest tag its episodes started
    under for that key (``episode_version``)."""
    check_policies(policies)
    ordered = sorted(episodes, key=lambda e: e.rollout)
    advantages = group_advantages(ordered, scale=scale)
    by_episode = {e.id: e for e in ordered}
    groups = []
    for key in keys:
        mine = [
            a
            for a in advantages
            if policy_of(by_episode[a.episode_id].traces[a.trace].agent, policies) == key
        ]
        tags = [v for e in ordered if (v := episode_version(e, key)) is not None]
        groups.append(Group(task, ordered, mine, min(tags, default=None), key))
    return groups
