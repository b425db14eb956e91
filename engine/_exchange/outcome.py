"""What a reward means: the one place that decides whether an episode's result is the
model's behaviour (``ok``) or was spoiled by the infrastructure (failed, with a cause).

The line (docs/design.md "Outcomes"). An episode **fails** when:

- ``env``:       the env's own ``run`` raised (episode stop ``env_error``);
- ``model``:     a trace ended because the model endpoint failed after the client's
                 retries, or because a timeout fired while a model request was in
                 flight (stop condition ``model_error``; time spent waiting on the
                 endpoint is never held against the model, ``ModelBoundary.timed_out``);
- ``harness``:   a trace ended because its harness crashed (``harness_error``), or the
                 harness failed while finalizing (an error of kind ``harness``);
- ``scoring``:   a reward, metric or ``@stop`` hook raised or timed out (an error of
                 kind ``scoring``): the rewards were not measured;
- ``cancelled``: the episode was cancelled before it ended (Ctrl-C, SIGTERM/SIGHUP,
                 the eval cancelled from outside): it was never played out;
- ``divergence``: (``taketurns replay`` only) the replayed episode left its record:
                 the env asked a seat for a call the record does not hold. Not an
                 endpoint failure, though the seat's run ended as one.

Everything else is an **outcome**, whatever the reward: limits (``max_turns``, token
budgets), ``@stop`` hooks, the user closing, ``agent_completed``, and timeouts that
fire while the agent's own program, its tools or the env run (``segment_timeout``,
``rollout_timeout``, ``episode_timeout``). A model error a
harness recovered from (the program retried and the rollout went on) is not a
failure: only how a trace *ended* counts.

A failed episode's rewards are left out of reward means, ``--resume`` reruns it, and
the CLI exits 1. Causes are checked in the order above (the episode's own first,
then its traces in order); the first found is the episode's ``cause``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from taketurns._config.options import CAUSES

__all__ = [
    "ALL_CAUSES",
    "CAUSES",
    "DIVERGENCE",
    "RETRYABLE_CAUSES",
    "cause_of",
    "describe_cause",
    "is_failure",
    "record_cause",
    "trace_cause",
]

DIVERGENCE = "divergence"  # a replay's cause (``_replay``); an eval never records it
ALL_CAUSES = (*CAUSES, DIVERGENCE)  # every cause a record may hold
# causes an episode retry may cure by default (a flaky endpoint, a crashed program)
RETRYABLE_CAUSES = ("model", "harness")

_STOP_CAUSES = {"model_error": "model", "harness_error": "harness"}
_EPISODE_CAUSES = {"env_error": "env", "cancelled": "cancelled"}
_ERROR_CAUSES = {"harness": "harness", "scoring": "scoring"}
_DESCRIBED = {
    "env": "the env raised",
    "model": "the model endpoint failed",
    "harness": "the harness crashed",
    "scoring": "scoring failed",
    "cancelled": "cancelled",
    DIVERGENCE: "the replay diverged from the record",
}


def is_failure(stop_condition: str | None) -> bool:
    """True when a run that stopped with ``stop_condition`` was ended by the
    infrastructure (the model endpoint or the harness failing), not by the model's
    behaviour. An env uses it to tell a failed seat from one that lost."""
    return stop_condition in _STOP_CAUSES


def trace_cause(stop_condition: str | None, error_kinds: Iterable[str]) -> str | None:
    """The failure cause of one trace (``model``, ``harness``, ``scoring``) or None."""
    cause = _STOP_CAUSES.get(stop_condition or "")
    if cause is not None:
        return cause
    for kind in error_kinds:
        cause = _ERROR_CAUSES.get(kind)
        if cause is not None:
            return cause
    return None


def cause_of(stop: str, traces: Iterable[tuple[str | None, Iterable[str]]]) -> str | None:
    """The failure cause of an episode that ended with ``stop`` and whose traces
    ended with (stop condition, error kinds); None when its result is an outcome."""
    cause = _EPISODE_CAUSES.get(stop)
    if cause is not None:
        return cause
    for stop_condition, kinds in traces:
        cause = trace_cause(stop_condition, kinds)
        if cause is not None:
            return cause
    return None


def record_cause(record: Mapping[str, Any]) -> str | None:
    """The cause of an episode read back from ``episodes.jsonl``: its ``cause`` field
    (format 2), or worked out from its stops and errors by the same rule (records
    written before the field existed, whose ``ok`` meant something else)."""
    if "cause" in record:
        cause = record["cause"]
        return cause if isinstance(cause, str) else None
    traces = record.get("traces") or []
    return cause_of(
        str(record.get("stop")),
        (
            (t.get("stop_condition"), [str(e.get("kind")) for e in t.get("errors") or []])
            for t in traces
            if isinstance(t, Mapping)
        ),
    )


def describe_cause(cause: str) -> str:
    """A cause in words: ``model`` -> ``the model endpoint failed``."""
    return _DESCRIBED.get(cause, cause)
