"""For RL trainers (``taketurns.open_rollouts`` streams the groups): token-level
samples of a trace (``trace_samples``, ``episode_samples``; ``Sample``,
``TurnTokens``, ``turn_tokens``), groups of rollouts of one task (``Group``,
``make_group``, ``GroupStream``, ``RolloutSource``), group advantages
(``group_advantages``, ``TraceAdvantage``), dataset export (``export_samples``) and a
live in-process policy to train (``LocalPolicy``, ``load_policy``: the ``learn``
extra, torch and transformers, imported on first use only)."""

import typing

from taketurns._train.advantages import TraceAdvantage, group_advantages
from taketurns._train.groups import Group, make_group
from taketurns._train.rollouts import GroupStream, RolloutSource
from taketurns._train.samples import (
    Sample,
    TurnTokens,
    episode_samples,
    trace_samples,
    turn_tokens,
)

if typing.TYPE_CHECKING:  # the lazy name below, for type checkers
    from taketurns._train.export import export_samples
    from taketurns._train.policy import LocalPolicy, load_policy

# export reads run directories (the output stack), the policy imports torch: each
# imported on first use
_LAZY = {
    "export_samples": "taketurns._train.export",
    "LocalPolicy": "taketurns._train.policy",
    "load_policy": "taketurns._train.policy",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taketurns.train' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Group",
    "GroupStream",
    "LocalPolicy",
    "RolloutSource",
    "Sample",
    "TraceAdvantage",
    "TurnTokens",
    "episode_samples",
    "export_samples",
    "group_advantages",
    "load_policy",
    "make_group",
    "trace_samples",
    "turn_tokens",
]
