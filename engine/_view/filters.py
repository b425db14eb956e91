"""Which episodes a transcript list shows: by agent, stop condition, failure cause,
reward range and text. Parsed from a query string (the run page's form and
``/api/runs/<id>/episodes``); a malformed value is refused with a message naming
the field."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from taketurns._config.suggest import did_you_mean
from taketurns._errors import BadRequest
from taketurns._exchange.outcome import ALL_CAUSES, record_cause

__all__ = ["EpisodeFilter"]

ANY_FAILURE = "failed"  # the cause filter's value for "any cause"
NO_FAILURE = "ok"


def _cause(args: Mapping[str, str]) -> str:
    """The ``cause`` filter: empty, ``ok``, ``failed`` or one cause; else refused."""
    text = (args.get("cause") or "").strip()
    accepted = (NO_FAILURE, ANY_FAILURE, *ALL_CAUSES)
    if text and text not in accepted:
        hint = did_you_mean(text, accepted)
        raise BadRequest(
            f"cause={text!r}: not a cause; {hint + ' ' if hint else ''}"
            f"give one of {', '.join(accepted)}"
        )
    return text


def _number(args: Mapping[str, str], name: str) -> float | None:
    text = (args.get(name) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{name}={text!r}: not a number; give e.g. {name}=0.5") from None
    if math.isnan(value):
        raise BadRequest(f"{name}: NaN is not a bound; give a number")
    return value


@attrs.frozen
class EpisodeFilter:
    """Every field empty or None: no condition. ``agent`` narrows ``stop`` and the
    reward range to that agent's trace; without it any trace may match. ``cause``:
    ``ok`` (no failure), ``failed`` (any cause) or one cause (``model``, ``env``...).
    ``text``: case-insensitive, in any string of the record (messages, task, errors,
    tracebacks)."""

    agent: str = ""
    stop: str = ""
    cause: str = ""
    min_reward: float | None = None
    max_reward: float | None = None
    text: str = ""

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> EpisodeFilter:
        """From query parameters ``agent``, ``stop``, ``cause``, ``min_reward``,
        ``max_reward``, ``q``. Raises ``BadRequest``."""
        return cls(
            agent=(args.get("agent") or "").strip(),
            stop=(args.get("stop") or "").strip(),
            cause=_cause(args),
            min_reward=_number(args, "min_reward"),
            max_reward=_number(args, "max_reward"),
            text=(args.get("q") or "").strip(),
        )

    @property
    def empty(self) -> bool:
        return self == EpisodeFilter()

    def query(self) -> dict[str, str]:
        """The query parameters that give this filter back (empty ones left out)."""
        pairs = {
            "agent": self.agent,
            "stop": self.stop,
            "cause": self.cause,
            "min_reward": "" if self.min_reward is None else f"{self.min_reward:g}",
            "max_reward": "" if self.max_reward is None else f"{self.max_reward:g}",
            "q": self.text,
        }
        return {k: v for k, v in pairs.items() if v}

    def may_match(self, raw: bytes) -> bool:
        """False only when the raw JSON line cannot hold ``text`` (a cheap test before
        parsing: a query with no character JSON escapes appears in the line as it
        is, ASCII case aside); True otherwise."""
        text = self.text
        if (
            not text
            or not text.isascii()
            or any(c in text for c in '"\\')
            or not text.isprintable()
        ):
            return True
        return text.lower().encode() in raw.lower()

    def matches(self, record: Mapping[str, Any]) -> bool:
        cause = record_cause(record)
        if self.cause == NO_FAILURE and cause is not None:
            return False
        if self.cause == ANY_FAILURE and cause is None:
            return False
        if self.cause not in ("", NO_FAILURE, ANY_FAILURE) and cause != self.cause:
            return False
        if not self._traces_match(record):
            return False
        if self.text:
            needle = self.text.lower()
            return any(needle in s.lower() for s in _strings(record))
        return True

    def _traces_match(self, record: Mapping[str, Any]) -> bool:
        if not (
            self.agent or self.stop or self.min_reward is not None or self.max_reward is not None
        ):
            return True
        for t in record.get("traces") or ():
            if not isinstance(t, dict):
                continue
            if self.agent and str((t.get("agent") or {}).get("name")) != self.agent:
                continue
            if self.stop and str(t.get("stop_condition")) != self.stop:
                continue
            reward = t.get("reward")
            reward = float(reward) if isinstance(reward, int | float) else 0.0
            if self.min_reward is not None and reward < self.min_reward:
                continue
            if self.max_reward is not None and reward > self.max_reward:
                continue
            return True
        return False


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (keys left out), depth first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
