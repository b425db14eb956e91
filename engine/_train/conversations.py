"""Message-level training samples: for trainers that tokenize themselves.

A run whose endpoint returned no token ids still holds what such a trainer needs:
each trainable trace's conversation (OpenAI wire messages, as the model saw them)
with the model's own turns marked, its reward and its group advantage. One
``Conversation`` per trace that has an advantage (trainable agents of ok episodes).
"""

from __future__ import annotations

from typing import Any

import attrs

from taketurns._models.wire import messages_to_wire
from taketurns._train.groups import Group

__all__ = ["Conversation", "group_conversations"]


@attrs.frozen
class Conversation:
    """One trace's conversation: ``messages`` in OpenAI wire shape and
    ``message_mask[i]`` 1 where ``messages[i]`` is the model's own (an assistant turn
    of this trace), 0 for the system prompt, the user, tool results."""

    episode_id: str
    agent: str
    task_idx: int
    rollout: int
    messages: list[dict[str, Any]]
    message_mask: list[int]
    reward: float
    advantage: float
    policy_versions: tuple[str, ...] = ()


def group_conversations(group: Group) -> list[Conversation]:
    """The conversation of every trace of ``group`` that has an advantage."""
    by_episode = {e.id: e for e in group.episodes}
    out = []
    for adv in group.advantages:
        trace = by_episode[adv.episode_id].traces[adv.trace]
        wire = messages_to_wire(trace.messages)
        versions = dict.fromkeys(t.policy_version for t in trace.turns if t.policy_version)
        out.append(
            Conversation(
                adv.episode_id,
                adv.agent,
                trace.episode.task_idx,
                trace.episode.rollout,
                wire,
                [int(m.get("role") == "assistant") for m in wire],
                trace.reward,
                adv.advantage,
                tuple(versions),
            )
        )
    return out
