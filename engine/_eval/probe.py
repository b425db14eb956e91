"""``PolicyProbe``: an env whose seats can be asked to act at each information state
of its game, so that a model's policy can be measured as a whole (``taketurns
exploitability``: NashConv and exploitability, or whatever the env measures).

A probe run is an eval like any other (its own run directory, episodes, summary,
report): its tasks are ``samples`` tasks per information state (``probe_tasks``);
each episode asks one seat to act at one state once, through the engine like any
turn (seeded by the episode), and records on that seat's trace
``info["probe"] = {"state": KEY, "action": NAME}`` (NAME None when the seat's answer
did not count: a forfeit). The answers make the empirical tabular policy (``tally``,
``empirical``), which the env measures (``measure_policy``); ``measure`` adds a
bootstrap interval over each state's answers (the answers of a state resampled with
replacement, every state at once), so that ``samples`` and the noise it leaves show
in the result.
"""

from __future__ import annotations

import abc
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from taketurns._exchange.task import Task

if TYPE_CHECKING:
    from taketurns._eval.episode import Episode

__all__ = ["PROBE", "PolicyProbe", "Tally", "empirical", "measure", "tally"]

PROBE = "probe"  # the trace info key a probe episode records its answer under
Policy = Mapping[str, Mapping[str, float]]


class PolicyProbe(abc.ABC):
    """Mixin for an ``Env`` whose policies can be measured state by state."""

    @abc.abstractmethod
    def probe_tasks(self, samples: int) -> Sequence[Task]:
        """``samples`` tasks per information state (the same every run); playing one
        records its seat's answer as the module docstring says."""

    @abc.abstractmethod
    def measure_policy(self, policy: Policy) -> Mapping[str, float]:
        """The measures of a tabular ``policy`` (by state key, each action name's
        probability; a state left out plays uniformly), e.g. ``nash_conv`` and
        ``exploitability``. Deterministic; cheap enough to call once per resample."""


class Tally:
    """The answers of a probe run: by state, how often each action was named, and
    how many answers did not count."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {}
        self.invalid = 0

    def add(self, state: str, action: str | None) -> None:
        counts = self.counts.setdefault(state, Counter())
        if action is None:
            self.invalid += 1
        else:
            counts[action] += 1

    @property
    def answers(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())


def tally(episodes: Iterable[Episode]) -> Tally:
    """The answers recorded by a probe run's ok episodes (a failed episode's answer is
    the infrastructure's, not the model's: left out)."""
    found = Tally()
    for episode in episodes:
        if not episode.ok:
            continue
        for trace in episode.traces:
            probe = trace.info.get(PROBE)
            if isinstance(probe, dict) and isinstance(probe.get("state"), str):
                action = probe.get("action")
                found.add(probe["state"], action if isinstance(action, str) else None)
    return found


def empirical(counts: Mapping[str, Counter[str]]) -> dict[str, dict[str, float]]:
    """The empirical policy: each state's action frequencies (a state with no answer
    that counted is left out: it plays uniformly)."""
    policy = {}
    for state, actions in counts.items():
        total = sum(actions.values())
        if total:
            policy[state] = {a: n / total for a, n in sorted(actions.items())}
    return policy


def _resampled(counts: Mapping[str, Counter[str]], rng: random.Random) -> dict[str, Counter[str]]:
    out = {}
    for state in sorted(counts):
        answers = sorted(counts[state].elements())
        out[state] = Counter(rng.choices(answers, k=len(answers))) if answers else Counter()
    return out


def measure(
    probe: PolicyProbe, found: Tally, *, samples: int, resamples: int, seed: int
) -> dict[str, Any]:
    """The measures of the empirical policy, each with its bootstrap 95% interval
    (``resamples`` resamples seeded by ``seed``; none when 0), and what they rest on."""
    point = dict(probe.measure_policy(empirical(found.counts)))
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(resamples):
        again = probe.measure_policy(empirical(_resampled(found.counts, rng)))
        for k in draws:
            draws[k].append(float(again[k]))
    result: dict[str, Any] = {
        "samples": samples,
        "states": len(found.counts),
        "answers": found.answers,
        "invalid": found.invalid,
        "resamples": resamples,
        "seed": seed,
    }
    for k, value in point.items():
        result[k] = value
        if resamples:
            ordered = sorted(draws[k])
            result[f"{k}_ci95"] = [_quantile(ordered, 0.025), _quantile(ordered, 0.975)]
    return result


def _quantile(ordered: Sequence[float], q: float) -> float:
    at = q * (len(ordered) - 1)
    low, high = math.floor(at), math.ceil(at)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)
