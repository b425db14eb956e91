"""Message-level training samples: for trainers that tokenize themselves.

A run whose endpoint returned no token ids still holds what such a trainer needs:
each trainable trace's conversation (OpenAI wire messages, as the model saw them)
with the model's own turns marked, its reward, its group advantage and its per-turn
rewards (``Trace.record_turn_reward``), each placed on the assistant message its turn
produced. One
``Conversation`` per trace that has an advantage (trainable agents of ok episodes).
"""

from __future__ import annotations

from typing import Any

import attrs

from taketurns._exchange.trace import Trace
from taketurns._models.wire import messages_to_wire
from taketurns._train.groups import Group

__all__ = ["Conversation", "group_conversations", "turn_reward_rows"]


@attrs.frozen
class Conversation:
    """One trace's conversation: ``messages`` in OpenAI wire shape and
    ``message_mask[i]`` 1 where ``messages[i]`` is the model's own (an assistant turn
    of this trace), 0 for the system prompt, the user, tool results.
    ``turn_rewards`` lists the trace's per-turn rewards as ``{"turn", "name",
    "value", "message"}``, ``message`` the index in ``messages`` of the assistant
    message that turn produced (None when the conversation does not hold it)."""

    episode_id: str
    agent: str
    task_idx: int
    rollout: int
    messages: list[dict[str, Any]]
    message_mask: list[int]
    reward: float
    advantage: float
    policy_versions: tuple[str, ...] = ()
    turn_rewards: tuple[dict[str, Any], ...] = ()


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
                turn_reward_rows(trace),
            )
        )
    return out


def turn_reward_rows(trace: Trace) -> tuple[dict[str, Any], ...]:
    """``trace.turn_rewards`` as rows, each with the index in ``trace.messages`` of the
    assistant message its turn produced, or None. Turns are matched to messages in
    order (each turn's response is the first equal message after the previous
    turn's), so two turns that said the same thing get their own positions."""
    position: dict[int, int] = {}
    at = 0
    for turn in sorted(trace.turns, key=lambda t: t.index):
        if turn.response is None:
            continue
        found = next(
            (i for i in range(at, len(trace.messages)) if trace.messages[i] == turn.response),
            None,
        )
        if found is not None:
            position[turn.index] = found
            at = found + 1
    return tuple(
        {"turn": r.turn, "name": r.name, "value": r.value, "message": position.get(r.turn)}
        for r in trace.turn_rewards
    )
