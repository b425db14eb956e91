"""The bootstrap 95% interval of a mean, deterministic: the same numbers give the
same interval on every run and machine (a private ``random.Random(0)``, never the
global generator; no numpy).

The resampling unit is a task: a unit is ``(reward sum, trace count)`` over a task's
rollouts, and a resample's mean is ``Σ sums / Σ counts`` over ``len(units)`` units
drawn with replacement (rollouts of one task are correlated, so they move together).
The interval is the percentile one: the 2.5th and 97.5th percentiles of
``RESAMPLES`` resampled means (sorted, indices ``⌊0.025·B⌋`` and ``B-1-⌊0.025·B⌋``).
Cost: ``RESAMPLES`` draws per unit (about 0.2 s per 1,000 tasks)."""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["RESAMPLES", "SEED", "interval"]

RESAMPLES = 2000
SEED = 0


def interval(
    sums: Sequence[float], counts: Sequence[int] | None = None, *, resamples: int = RESAMPLES
) -> list[float] | None:
    """``[low, high]``, the bootstrap 95% interval of ``Σ sums / Σ counts`` (counts
    None: one value per unit); None over no units (as a mean over nothing is)."""
    n = len(sums)
    if n == 0:
        return None
    rng = random.Random(SEED)
    if counts is None or len(set(counts)) == 1:
        # equal counts: the mean of a resample is the mean of its sums / count; the
        # same draws as below (choices picks indices the same way whatever the values)
        per = counts[0] if counts else 1
        means = [sum(rng.choices(sums, k=n)) / (n * per) for _ in range(resamples)]
    else:
        units = range(n)
        means = []
        for _ in range(resamples):
            drawn = rng.choices(units, k=n)
            means.append(sum(sums[i] for i in drawn) / sum(counts[i] for i in drawn))
    means.sort()
    cut = int(0.025 * resamples)
    return [means[cut], means[resamples - 1 - cut]]
