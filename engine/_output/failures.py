"""Failures a user can act on: the first failure of each distinct kind, with its
cause, exception type, ``file:line`` and message, shown as they happen and again at
the end, with where to find the rest.

A failure's *kind* is (cause, exception type, where): the same bug hit by a thousand
episodes is one line, counted. ``first_failure`` picks, from a failed episode, the
error that made it fail (``_exchange.outcome``'s cause); ``FailureKinds`` counts the
kinds (the summary's ``failures``); ``LiveFailures`` prints each new kind while the
eval runs, rate-limited (``MIN_GAP_S`` between lines, ``MAX_LIVE`` lines at most;
the rest are in the summary at the end).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taketurns._exchange.outcome import describe_cause, trace_cause

if TYPE_CHECKING:
    from taketurns._eval.episode import Episode
    from taketurns._exchange.trace import ErrorInfo

__all__ = ["FailureKinds", "LiveFailures", "describe", "failure_lines", "first_failure"]

MIN_GAP_S = 1.0  # between two live failure lines
MAX_LIVE = 10  # live failure lines in one run
MAX_KINDS = 20  # kinds kept in the summary (the most frequent)
_MESSAGE_CHARS = 300


def first_failure(episode: Episode) -> dict[str, Any] | None:
    """The error that made ``episode`` fail, as a small dict (``cause``, ``type``,
    ``where``, ``message``, ``agent``, ``episode``); None when the episode is ok or
    was cancelled (a cancellation is no bug to show)."""
    cause = episode.cause
    if cause is None or cause == "cancelled":
        return None
    error: ErrorInfo | None = None
    agent = ""
    if cause == "env":
        error = next((e for e in episode.errors if e.kind == "env"), None)
    for trace in episode.traces:
        if error is not None:
            break
        if trace_cause(trace.stop_condition, [e.kind for e in trace.errors]) != cause:
            continue
        matching = [e for e in trace.errors if e.kind == cause]
        if matching:  # the endpoint's last error ended the trace; others the first
            error, agent = (matching[-1] if cause == "model" else matching[0]), trace.agent.name
    if error is None:
        every = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
        error = every[0] if every else None
    if error is None:
        return {"cause": cause, "type": "", "where": "", "message": "", "agent": agent}
    message = " ".join(error.message.split())
    if len(message) > _MESSAGE_CHARS:
        message = message[: _MESSAGE_CHARS - 3] + "..."
    return {
        "cause": cause,
        "type": error.type,
        "where": error.where,
        "message": message,
        "agent": agent,
        "episode": episode.id,
    }


def _key(failure: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(failure.get("cause")), str(failure.get("type")), str(failure.get("where")))


def describe(failure: Mapping[str, Any], *, count: int | None = None) -> str:
    """One line: ``the env raised: KeyError at envs/x.py:12 in run: 'k' (episode e/3/0)``."""
    what = describe_cause(str(failure.get("cause")))
    if count is not None and count > 1:
        what += f" ({count} episodes)"
    parts = [what + ":"]
    if failure.get("type"):
        parts.append(str(failure["type"]))
    if failure.get("where"):
        parts.append(f"at {_relative(str(failure['where']))}")
    text = " ".join(parts)
    if failure.get("message"):
        text += f": {failure['message']}"
    if failure.get("episode"):
        text += f" (first: episode {failure['episode']})"
    return text


def _relative(where: str) -> str:
    """``where`` with its path relative to the working directory when under it."""
    path, sep, rest = where.partition(":")
    try:
        shown = os.path.relpath(path)
    except ValueError:
        return where
    return shown + sep + rest if not shown.startswith("..") else where


class FailureKinds:
    """The first failure of each kind and how many episodes failed that way."""

    def __init__(self) -> None:
        self.kinds: dict[tuple[str, str, str], list[Any]] = {}  # key -> [first, count]

    def add(self, failure: Mapping[str, Any] | None) -> bool:
        """Count ``failure`` (a ``first_failure`` dict); True when its kind is new."""
        if not isinstance(failure, Mapping):
            return False
        key = _key(failure)
        seen = self.kinds.get(key)
        if seen is not None:
            seen[1] += 1
            return False
        self.kinds[key] = [dict(failure), 1]
        return True

    def result(self) -> list[dict[str, Any]]:
        """The ``MAX_KINDS`` most frequent kinds: each first failure with its ``count``."""
        ranked = sorted(self.kinds.values(), key=lambda kc: -kc[1])[:MAX_KINDS]
        return [{**first, "count": count} for first, count in ranked]


class LiveFailures:
    """Says each new kind of failure while the eval runs (``say`` gets one line),
    rate-limited: ``MIN_GAP_S`` apart, at most ``MAX_LIVE`` lines."""

    def __init__(self, say: Callable[[str], None] | None, *, clock: Any = time.monotonic) -> None:
        self.say = say
        self.kinds = FailureKinds()
        self.shown = 0
        self.held = 0  # new kinds not said (shown at the end)
        self._clock = clock
        self._last = -MIN_GAP_S

    def add(self, failure: Mapping[str, Any] | None) -> None:
        if not self.kinds.add(failure) or self.say is None or failure is None:
            return
        now = self._clock()
        if self.shown >= MAX_LIVE or now - self._last < MIN_GAP_S:
            self.held += 1
            return
        self.shown += 1
        self._last = now
        self.say(f"failed: {describe(failure)}")


def failure_lines(summary: Mapping[str, Any], run_dir: Path) -> list[str]:
    """The end-of-eval lines: each kind of failure (the most frequent first), then
    where the tracebacks are."""
    kinds = summary.get("failures") or []
    if not kinds:
        return []
    lines = [f"  - {describe(k, count=k.get('count'))}" for k in kinds if isinstance(k, Mapping)]
    lines.append(
        f"  tracebacks: the errors of each record in {run_dir / 'episodes.jsonl'} "
        f"(errors[].traceback), and {run_dir / 'report.html'}"
    )
    return lines
