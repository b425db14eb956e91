"""The bootstrap 95% interval of a mean, deterministic: the same numbers give the
same interval on every run and machine (numpy's PCG64 seeded with ``SEED``, never a
global generator; each resampled mean rounded to 12 significant digits, so a BLAS or
SIMD kernel summing in another order cannot move an end by an ulp).

The resampling unit is a task: a unit is ``(reward sum, trace count)`` over a task's
rollouts, and a resample's mean is ``Σ sums / Σ counts`` over ``len(units)`` units
drawn with replacement (rollouts of one task are correlated, so they move together).
The interval is the percentile one: the 2.5th and 97.5th percentiles of
``RESAMPLES`` resampled means (sorted, indices ``⌊0.025·B⌋`` and ``B-1-⌊0.025·B⌋``).

Why two ways to draw, both exact: ``n`` units drawn with replacement from ``k``
distinct units are a multinomial draw of how often each distinct unit comes up, so
when rewards take few values (a game's payoffs, pass/fail) a resample costs ``k``
binomial draws instead of ``n`` index draws: the cost is ``RESAMPLES · min(k, n)``,
not ``RESAMPLES · n``. Index draws go in blocks of ``_BLOCK`` elements (bounded
memory whatever ``n``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["RESAMPLES", "SEED", "interval"]

RESAMPLES = 2000
SEED = 0
_BLOCK = 1 << 21  # index draws per block: 16 MiB of int64 at most
# a binomial draw costs about as much as this many index draws (measured here)
_BINOMIAL_COST = 16


def interval(
    sums: Sequence[float], counts: Sequence[int] | None = None, *, resamples: int = RESAMPLES
) -> list[float] | None:
    """``[low, high]``, the bootstrap 95% interval of ``Σ sums / Σ counts`` (counts
    None: one trace per unit); None over no units (as a mean over nothing is)."""
    n = len(sums)
    if n == 0:
        return None
    values = np.asarray(sums, dtype=np.float64)
    weights = np.ones(n) if counts is None else np.asarray(counts, dtype=np.float64)
    # the distinct units in a canonical (sorted) order: the draws do not depend on the
    # order the units came in
    units, seen = _distinct(values, weights)
    rng = np.random.default_rng(SEED)
    if len(units) * _BINOMIAL_COST <= n:
        drawn = rng.multinomial(n, seen / n, size=resamples)
        means = (drawn @ units[:, 0]) / (drawn @ units[:, 1])
    else:
        means = _index_means(rng, units[:, 0].repeat(seen), units[:, 1].repeat(seen), resamples)
    means = np.sort([float(f"{m:.12g}") for m in means.tolist()])
    cut = int(0.025 * resamples)
    return [float(means[cut]), float(means[resamples - 1 - cut])]


def _distinct(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``(value, weight)`` units, sorted, and how often each occurs."""
    order = np.lexsort((weights, values))
    values, weights = values[order], weights[order]
    starts = np.flatnonzero(
        np.concatenate(([True], (values[1:] != values[:-1]) | (weights[1:] != weights[:-1])))
    )
    seen = np.diff(np.append(starts, len(values)))
    return np.column_stack((values[starts], weights[starts])), seen


def _index_means(
    rng: np.random.Generator, values: np.ndarray, weights: np.ndarray, resamples: int
) -> np.ndarray:
    """``resamples`` means of ``n`` units drawn by index, a block of rows at a time."""
    n = len(values)
    rows = max(1, _BLOCK // n)
    equal = bool((weights == weights[0]).all())
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        drawn = rng.integers(0, n, size=(min(rows, resamples - start), n), dtype=np.int32)
        totals = values[drawn].sum(axis=1)
        means[start : start + len(drawn)] = (
            totals / (n * weights[0]) if equal else totals / weights[drawn].sum(axis=1)
        )
    return means
