"""Live counts of a run, updated one record at a time in constant time: episodes, ok,
failed by cause, each agent's reward mean and standard error (Welford), the models
each agent ran, and the newest episodes. Cheap enough to refresh every half second;
the bootstrap intervals of ``summary.json`` are computed at the end of a run (or on
demand, ``RunView.summary``), not here."""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from taketurns._exchange.outcome import record_cause

__all__ = ["NEWEST", "Tally"]

NEWEST = 8  # newest episodes kept for the live list


class Tally:
    def __init__(self) -> None:
        self.episodes = 0
        self.ok = 0
        self.causes: Counter[str] = Counter()
        self.stops: dict[str, Counter[str]] = {}  # agent -> its traces' stop conditions
        self.models: dict[str, set[str]] = {}
        self._agents: dict[str, list[float]] = {}  # name -> [n scored, mean, m2]
        self._traces: Counter[str] = Counter()  # name -> ok traces, scored or not
        self.newest: deque[dict[str, Any]] = deque(maxlen=NEWEST)

    def add(self, line: int, record: Mapping[str, Any]) -> None:
        self.episodes += 1
        cause = record_cause(record)
        if cause is None:
            self.ok += 1
        else:
            self.causes[cause] += 1
        rewards: dict[str, float] = {}
        for t in record.get("traces") or ():
            if not isinstance(t, dict):
                continue
            stamp = t.get("agent")
            stamp = stamp if isinstance(stamp, dict) else {}
            name = str(stamp.get("name", "?"))
            self.models.setdefault(name, set()).add(str(stamp.get("model", "?")))
            self.stops.setdefault(name, Counter())[str(t.get("stop_condition"))] += 1
            if cause is None:
                self._traces[name] += 1
            reward = t.get("reward")
            if not t.get("rewards") or not isinstance(reward, int | float):
                continue  # never scored (a modeled user): no reward, not a 0.0
            reward = float(reward)
            rewards[name] = reward
            if cause is None:
                acc = self._agents.setdefault(name, [0.0, 0.0, 0.0])
                acc[0] += 1
                delta = reward - acc[1]
                acc[1] += delta / acc[0]
                acc[2] += delta * (reward - acc[1])
        self.newest.append(
            {
                "line": line,
                "id": str(record.get("id")),
                "cause": cause,
                "stop": record.get("stop"),
                "rewards": rewards,
            }
        )

    @property
    def failed(self) -> int:
        return sum(self.causes.values())

    def agents(self) -> dict[str, dict[str, Any]]:
        """Per agent: ok traces, reward mean and its standard error (None over no
        scored trace: a seat no rubric scores has no mean),
        and the normal-approximation 95% interval (mean ± 1.96 stderr)."""
        out = {}
        for name in sorted(self._traces):
            n, mean, m2 = self._agents.get(name, (0.0, 0.0, 0.0))
            stderr = math.sqrt(m2 / (n - 1) / n) if n >= 2 else 0.0
            out[name] = {
                "traces": self._traces[name],
                "reward_mean": mean if n else None,
                "reward_stderr": stderr if n else None,
                "reward_ci95": [mean - 1.96 * stderr, mean + 1.96 * stderr] if n else None,
            }
        return out
