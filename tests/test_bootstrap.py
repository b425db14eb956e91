"""The bootstrap interval, pass^k and per-task spread (issue 26, item 4): exact
values on small hand-made record sets, the same interval whatever the order episodes
finished in, and how the terminal table and the report show them."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from rich.console import Console

from taketurns._output.bootstrap import interval
from taketurns._output.summary import pass_at_k, pass_hat_k, render, summarize


def _episode(task: int, reward: float, *, cause: str | None = None) -> dict[str, Any]:
    return {
        "stop": "completed",
        "cause": cause,
        "traces": [
            {
                "agent": {"name": "a"},
                "episode": {"task_idx": task},
                "reward": reward,
                "rewards": {"r": reward},
            }
        ],
    }


def test_interval_exact_values() -> None:
    """Worked out by hand: two units 0 and 1 resample to means 0, 0.5 or 1 (a quarter,
    half, quarter of 2000 draws), so the 2.5th and 97.5th percentiles are 0 and 1;
    units (sum 0, 1 trace) and (sum 3, 2 traces) resample to 0, 3/3 or 6/4."""
    assert interval([]) is None
    assert interval([0.5] * 7) == [0.5, 0.5]
    assert interval([0.0, 1.0]) == [0.0, 1.0]
    assert interval([0.0, 3.0], [1, 2]) == [0.0, 1.5]
    # equal counts: the same draws as one value per unit (each unit's mean)
    assert interval([2.0, 0.0, 4.0], [2, 2, 2]) == interval([1.0, 0.0, 2.0])
    # the fixed seed's interval (a normal approximation gives [2.72, 6.28])
    assert interval([float(i) for i in range(10)]) == [2.7, 6.3]


def _reference(sums: list[float], counts: list[int], resamples: int) -> list[float]:
    """The textbook bootstrap, one index draw at a time (the interval taketurns printed
    before it drew with numpy): the check that the fast one estimates the same thing."""
    rng = random.Random(7)
    n = len(sums)
    means = []
    for _ in range(resamples):
        drawn = rng.choices(range(n), k=n)
        means.append(sum(sums[i] for i in drawn) / sum(counts[i] for i in drawn))
    means.sort()
    cut = int(0.025 * resamples)
    return [means[cut], means[resamples - 1 - cut]]


@pytest.mark.parametrize(
    "kind", ["payoffs", "pass-fail", "continuous", "rollouts", "failed-rollouts"]
)
def test_interval_within_monte_carlo_error_of_the_textbook_bootstrap(kind: str) -> None:
    """Both ways numpy draws (multinomial over few distinct units, index draws over
    many) estimate the textbook percentile interval: each end lies within 4 standard
    errors of the difference of two percentile estimates (the ends' Monte-Carlo error:
    sqrt(p(1-p)/B) / density, the density from the normal the means follow)."""
    r = random.Random(kind)
    n = 400
    if kind == "payoffs":
        sums, counts = [r.choice([-2.0, -1.0, 1.0, 2.0]) for _ in range(n)], [1] * n
    elif kind == "pass-fail":
        sums, counts = [float(r.random() < 0.3) for _ in range(n)], [1] * n
    elif kind == "continuous":
        sums, counts = [r.gauss(0.2, 1.0) for _ in range(n)], [1] * n
    else:
        counts = [3 if kind == "rollouts" else r.choice([1, 2, 3]) for _ in range(n)]
        sums = [float(sum(r.random() < 0.5 for _ in range(c))) for c in counts]
    resamples = 4000
    low, high = interval(sums, counts, resamples=resamples)
    ref_low, ref_high = _reference(sums, counts, resamples)
    sd = (ref_high - ref_low) / (2 * 1.96)
    density = math.exp(-(1.96**2) / 2) / (math.sqrt(2 * math.pi) * sd)
    se = math.sqrt(0.025 * 0.975 / resamples) / density
    assert abs(low - ref_low) <= 4 * math.sqrt(2) * se
    assert abs(high - ref_high) <= 4 * math.sqrt(2) * se


def test_interval_does_not_depend_on_unit_order() -> None:
    r = random.Random(3)
    sums = [r.choice([0.0, 1.0, 2.0]) for _ in range(300)]
    counts = [r.choice([1, 2]) for _ in range(300)]
    pairs = list(zip(sums, counts, strict=True))
    first = interval(sums, counts)
    r.shuffle(pairs)
    assert interval([p[0] for p in pairs], [p[1] for p in pairs]) == first


def test_interval_does_not_touch_the_global_random() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    interval([float(i) for i in range(10)])
    assert random.random() == expected


@pytest.mark.parametrize("rollouts", [1, 2])
def test_the_summary_interval_does_not_depend_on_episode_order(rollouts: int) -> None:
    values = random.Random(5)
    episodes = [
        _episode(task, values.uniform(-2, 2)) for task in range(12) for _ in range(rollouts)
    ]
    first = summarize(episodes, rollouts=rollouts)["agents"]["a"]["reward_ci95"]
    random.Random(1).shuffle(episodes)
    assert summarize(episodes, rollouts=rollouts)["agents"]["a"]["reward_ci95"] == first
    low, high = first
    mean = summarize(episodes, rollouts=rollouts)["agents"]["a"]["reward_mean"]
    assert low < mean < high


def test_the_summary_interval_resamples_tasks() -> None:
    """At -r 2 a task's rollouts move together: tasks 0 and 1 score (0, 0) and (1, 1),
    so the interval is that of two units 0 and 1 (traces resampled one by one would
    give the same ends here; tasks (0, 1) and (0, 1) show the difference: one value)."""
    together = [_episode(0, 0.0), _episode(0, 0.0), _episode(1, 1.0), _episode(1, 1.0)]
    assert summarize(together, rollouts=2)["agents"]["a"]["reward_ci95"] == [0.0, 1.0]
    within = [_episode(0, 0.0), _episode(0, 1.0), _episode(1, 0.0), _episode(1, 1.0)]
    assert summarize(within, rollouts=2)["agents"]["a"]["reward_ci95"] == [0.5, 0.5]
    # at -r 1 each trace is its own unit
    assert summarize(within, rollouts=1)["agents"]["a"]["reward_ci95"] == [0.0, 1.0]


def test_pass_hat_k_against_pass_at_k_on_constructed_rollouts() -> None:
    """Task 0: 2 of 3 rollouts pass; task 1: 3 of 3; task 2: 0 of 3. pass@k (some
    pass) grows with k, pass^k (all pass) falls: pass^2 of task 0 is C(2,2)/C(3,2)."""
    rewards = {0: [1.0, 1.0, 0.0], 1: [0.5, 2.0, 1.0], 2: [0.0, -1.0, 0.0]}
    episodes = [_episode(t, r) for t, rs in rewards.items() for r in rs]
    a = summarize(episodes, rollouts=3)["agents"]["a"]
    assert a["pass_at_k"] == pytest.approx({"1": (2 / 3 + 1) / 3, "2": 2 / 3, "3": 2 / 3})
    assert a["pass_hat_k"] == pytest.approx(
        {"1": (2 / 3 + 1) / 3, "2": (1 / 3 + 1) / 3, "3": 1 / 3}
    )
    assert (pass_at_k(3, 2, 2), pass_hat_k(3, 2, 2), pass_hat_k(3, 2, 3)) == (1.0, 1 / 3, 0.0)
    # a task with fewer ok rollouts than k (an episode failed) is left out at that k
    episodes[-1] = _episode(2, 5.0, cause="model")
    a = summarize(episodes, rollouts=3)["agents"]["a"]
    assert a["pass_hat_k"]["3"] == pytest.approx(1 / 2)
    assert a["pass_at_k"]["3"] == pytest.approx(1.0)


def test_pass_hat_k_at_every_k_as_tau2_reports_it() -> None:
    """At -r 4, pass^k for k = 1..4 (tau2-bench's table), each the mean over tasks of
    C(c, k) / C(4, k): task 0 passes 3 of 4, task 1 all 4."""
    episodes = [_episode(0, r) for r in (1.0, 1.0, 1.0, 0.0)]
    episodes += [_episode(1, 1.0) for _ in range(4)]
    a = summarize(episodes, rollouts=4)["agents"]["a"]
    assert a["pass_hat_k"] == pytest.approx(
        {str(k): (math.comb(3, k) / math.comb(4, k) + 1.0) / 2 for k in range(1, 5)}
    )
    assert set(a["pass_at_k"]) == {"1", "2", "4"}


def test_task_spread_across_rollouts() -> None:
    """Task 0 scores 1 and -1 (sd √2, mixed), task 1 scores 2 and 2 (sd 0); task 2 has
    one ok rollout (its other episode failed) and no spread."""
    episodes = [_episode(0, 1.0), _episode(0, -1.0), _episode(1, 2.0), _episode(1, 2.0)]
    episodes += [_episode(2, 1.0), _episode(2, 0.0, cause="env")]
    spread = summarize(episodes, rollouts=2)["agents"]["a"]["task_spread"]
    assert spread == pytest.approx(
        {"tasks": 2, "sd_mean": math.sqrt(2) / 2, "sd_max": math.sqrt(2), "mixed": 1}
    )
    assert "task_spread" not in summarize(episodes, rollouts=1)["agents"]["a"]


def test_no_ok_trace_no_interval() -> None:
    summary = summarize([_episode(0, 1.0, cause="model")] * 2, rollouts=2)
    a = json.loads(json.dumps(summary))["agents"]["a"]
    assert a["reward_ci95"] is None
    assert a["pass_hat_k"] == {"1": None, "2": None}
    assert a["task_spread"] == {"tasks": 0, "sd_mean": None, "sd_max": None, "mixed": 0}


def _table(summary: dict[str, Any]) -> dict[str, str]:
    console = Console(width=80, record=True)
    console.print(render(summary))
    rows = {}
    for line in console.export_text().splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_the_terminal_table_shows_interval_pass_hat_k_and_spread() -> None:
    episodes = [_episode(0, 1.0), _episode(0, -1.0), _episode(1, 2.0), _episode(1, 2.0)]
    rows = _table(summarize(episodes, rollouts=2))
    assert rows["bootstrap 95% CI"] == "[+0.000, +2.000]"
    assert (rows["pass@1"], rows["pass@2"]) == ("0.75", "1.00")
    assert (rows["pass^1"], rows["pass^2"]) == ("0.75", "0.50")
    assert rows["task reward sd (mean)"] == "0.707"
    assert rows["tasks mixed pass/fail"] == "1 of 2"
    rows = _table(summarize(episodes, rollouts=1))
    assert "pass^1" not in rows
    # each trace its own unit: all four draws are a 2 with chance 1/16 > 2.5%
    assert rows["bootstrap 95% CI"] == "[-0.250, +2.000]"
    rows = _table(summarize([_episode(0, 1.0, cause="model")], rollouts=1))
    assert rows["bootstrap 95% CI"] == "-"
