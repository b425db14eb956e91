"""Group advantages: how much better each rollout of a task did than its siblings.

For one task's group of episodes, per trainable agent role: the advantage of a trace
is its reward minus the mean reward of that role's traces in the group (optionally
divided by their standard deviation), computed over ``ok`` episodes only — a failed
episode's reward measures the infrastructure, not the model (docs/design.md "Outcomes"),
so it neither gets an advantage nor moves the mean. Roles are separate: the two
seats of a zero-sum self-play game each get their own advantages (pooled, their
rewards would cancel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from taketurns._eval.episode import Episode

__all__ = ["TraceAdvantage", "group_advantages"]


@attrs.frozen
class TraceAdvantage:
    """The advantage of trace ``trace`` (its position in the episode's traces)."""

    episode_id: str
    agent: str
    trace: int
    reward: float
    advantage: float


def group_advantages(
    episodes: Sequence[Episode], *, scale: bool = False, eps: float = 1e-6
) -> list[TraceAdvantage]:
    """The advantages of every trainable trace of the ``ok`` episodes in ``episodes``
    (one task's group), per agent role; with ``scale``, divided by the role's reward
    standard deviation (population) when it exceeds ``eps``. Per role they sum to zero
    (up to rounding). Pure: never blocks, never raises for empty or all-failed groups."""
    by_role: dict[str, list[tuple[Episode, int, float]]] = {}
    for episode in episodes:
        if not episode.ok:
            continue
        for i, trace in enumerate(episode.traces):
            if trace.agent.trainable:
                by_role.setdefault(trace.agent.name, []).append((episode, i, trace.reward))
    out: list[TraceAdvantage] = []
    for role, members in by_role.items():
        rewards = [r for _, _, r in members]
        mean = math.fsum(rewards) / len(rewards)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
        divisor = std if scale and std > eps else 1.0
        out += [TraceAdvantage(e.id, role, i, r, (r - mean) / divisor) for e, i, r in members]
    return out
