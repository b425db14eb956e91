"""``Group``: one task's complete group of episodes, with their advantages and the
token-level samples a policy-gradient step consumes."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taketurns._eval.episode import Episode
from taketurns._exchange.task import Task
from taketurns._train.advantages import TraceAdvantage, group_advantages
from taketurns._train.samples import Sample, trace_samples

__all__ = ["Group", "make_group"]


@attrs.define(eq=False)
class Group:
    """``episodes``: all of the task's episodes, failed ones included (``ok`` False);
    ``advantages``: one per trainable trace of the ok episodes; ``policy_version``: the
    oldest version tag its episodes started under (None: no tag)."""

    task: Task
    episodes: list[Episode]
    advantages: list[TraceAdvantage]
    policy_version: int | None = None

    @property
    def ok_episodes(self) -> list[Episode]:
        return [e for e in self.episodes if e.ok]

    @property
    def failed(self) -> int:
        return sum(not e.ok for e in self.episodes)

    def samples(self) -> list[Sample]:
        """The samples of every trace that has an advantage (trainable agents of ok
        episodes), each with its trace's reward and advantage."""
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
