"""One streaming pass over ``episodes.jsonl`` gathering everything the report draws.

Memory is bounded by what the page shows, not by the number of episodes: counts per
agent and value for the histograms, running sums of the per-turn rewards, the
summary's running statistics, every failed episode (all are listed) and the ``cap`` first
others by task and rollout (a sorted list never longer than ``cap``).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable

from taketurns._exchange.outcome import record_cause
from taketurns._output.summary import Summarizer
from taketurns._report.markup import Json, agent_of, as_dict, as_float, as_int, as_list, traces_of
from taketurns._report.transcript import episode_key

__all__ = ["Scan"]


class Scan:
    """Feed each episode record to ``add``; then read the fields."""

    def __init__(self, cap: int, *, rollouts: int | None = None, summarize: bool = True) -> None:
        """``summarize``: feed ``summary`` (a ``Summarizer``) every record; False when
        the run's ``summary.json`` is there to read instead (``summary`` stays empty)."""
        self.summarize = summarize
        self.cap = max(cap, 0)
        self.episodes = 0
        self.traces = 0
        self.max_rollout = 0
        self.env: str | None = None
        self.models: dict[str, set[str]] = defaultdict(set)
        self.ident: dict[str, tuple[str, str]] = {}
        self.rewards: dict[str, Counter[float]] = defaultdict(Counter)
        self.turns: dict[str, Counter[float]] = defaultdict(Counter)
        self.scored: set[str] = set()  # agents with rewards (a modeled user has none)
        # per-turn rewards: (agent, name) -> k-th rewarded turn of a trace -> [sum, count]
        self.turn_rewards: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(lambda: [0.0, 0.0])
        )
        self.summary = Summarizer(rollouts=rollouts)
        self.failed: list[Json] = []
        self.others = 0
        self._shown: list[tuple[tuple[int, int, str], int, Json]] = []
        self._order = itertools.count()

    def add_all(self, episodes: Iterable[Json]) -> Scan:
        for e in episodes:
            self.add(e)
        return self

    def add(self, e: Json) -> None:
        self.episodes += 1
        self.max_rollout = max(self.max_rollout, as_int(e.get("rollout")))
        if self.env is None and e.get("env") is not None:
            self.env = str(e.get("env"))
        if self.summarize:
            self.summary.add(e)
        failed = record_cause(e) is not None
        models, ident, rewards, turns = self.models, self.ident, self.rewards, self.turns
        for t in traces_of(e):
            self.traces += 1
            agent = agent_of(t)
            stamp = as_dict(t.get("agent"))
            models[agent].add(str(stamp.get("model", "?")))
            if agent not in ident:
                ident[agent] = (str(stamp.get("model")), str(stamp.get("harness")))
            if as_dict(t.get("rewards")):
                self.scored.add(agent)
            if not failed:  # a failed episode's rewards are not the model's: left out
                rewards[agent][as_float(t.get("reward")) or 0.0] += 1
                turns[agent][float(len(as_list(t.get("turns"))))] += 1
                self._turn_rewards(agent, t)
        if failed:
            self.failed.append(e)
        else:
            self.others += 1
            self._keep(e)

    def _turn_rewards(self, agent: str, t: Json) -> None:
        """Running sums of ``trace.turn_rewards`` by agent, name and ordinal (the
        k-th turn that name paid in the trace, from 1)."""
        given = as_list(t.get("turn_rewards"))
        if not given:  # the common case: no Counter for a trace without any
            return
        seen: Counter[str] = Counter()
        for r in given:
            r = as_dict(r)
            value, name = as_float(r.get("value")), str(r.get("name", "turn"))
            if value is None:
                continue
            seen[name] += 1
            total = self.turn_rewards[(agent, name)][seen[name]]
            total[0] += value
            total[1] += 1

    def _keep(self, e: Json) -> None:
        """Keep ``e`` if it is among the ``cap`` first episodes by task and rollout."""
        key = episode_key(e)
        shown = self._shown
        if len(shown) >= self.cap and (not shown or key >= shown[-1][0]):
            return
        bisect.insort(shown, (key, next(self._order), e))
        if len(shown) > self.cap:
            shown.pop()

    @property
    def shown(self) -> list[Json]:
        """The episodes that get a transcript besides the failed ones, in order."""
        return [e for _, _, e in self._shown]
