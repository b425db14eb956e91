"""Results: per-agent statistics over episode records (the raw JSONL objects), so the
same numbers come from a live run, a resumed one, or a directory on disk. Streamed:
memory grows with the number of tasks (a reward sum per task, for the bootstrap
interval, pass@k and pass^k), not with the turns or messages of an episode. Failed
episodes (infrastructure failures, ``_exchange.outcome``) are counted by cause and kept
out of the means.

A trace *passes* when its reward is > 0 (``PASSED``): pass@k (at least one of k
rollouts passes, the unbiased estimator) and pass^k (all k pass, tau-bench's
reliability metric) both count passes this way.

Traces whose turns carry token ids are checked token for token
(``_exchange.divergence``): each agent's ``token_divergences`` counts the turns
checked against the sequence before them, those whose prompt did not extend it, the
rate, the count by kind, and ``final_retokenized``: the traces whose last completion
re-tokenizes differently once rendered into a next prompt."""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from taketurns._exchange.divergence import check_trace_tokens
from taketurns._exchange.outcome import record_cause
from taketurns._output.bootstrap import interval
from taketurns._output.failures import FailureKinds, first_failure

if TYPE_CHECKING:
    from taketurns._eval.episode import Episode

__all__ = [
    "Summarizer",
    "digest",
    "pass_at_k",
    "pass_hat_k",
    "passed",
    "render",
    "scored",
    "summarize",
]


def _mean(values: Sequence[float]) -> float | None:
    """The mean; None (``null`` in ``summary.json``) over no values, never 0.0."""
    return sum(values) / len(values) if values else None


def scored(t: Mapping[str, Any]) -> bool:
    """Whether a trace (as written) has a reward that was computed: its ``rewards``
    are not empty. A seat no rubric scores (a modeled user) and a reward whose scorer
    failed have none: they are absent from every mean, never a 0.0."""
    return bool(t.get("rewards"))


def passed(reward: float) -> bool:
    """Whether a trace passes, for pass@k and pass^k: its reward is > 0."""
    return reward > 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with ``c`` of ``n >= k`` rollouts passing: the
    chance that at least one of ``k`` rollouts drawn without replacement passes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task with ``c`` of ``n >= k`` rollouts passing: the chance that
    all of ``k`` rollouts drawn without replacement pass, ``C(c, k) / C(n, k)``."""
    return math.comb(c, k) / math.comb(n, k)


def _over_tasks(tasks: Sequence[Sequence[float]], k: int, fn: Any) -> float | None:
    """The mean of ``fn(n, c, k)`` over the tasks with at least ``k`` ok rollouts
    (a task some of whose episodes failed may have fewer); None over none."""
    return _mean([fn(int(t[0]), int(t[1]), k) for t in tasks if t[0] >= k])


def _spread(tasks: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Per-task spread across rollouts, over the tasks with at least 2 ok rollouts:
    the mean and largest sample standard deviation of a task's rewards, and how many
    tasks are ``mixed`` (some rollouts pass, some do not)."""
    sds, mixed = [], 0
    for n, c, total, squares in tasks:
        if n < 2:
            continue
        mean = total / n
        sds.append(math.sqrt(max(squares - n * mean * mean, 0.0) / (n - 1)))
        mixed += 0 < c < n
    return {
        "tasks": len(sds),
        "sd_mean": _mean(sds),
        "sd_max": max(sds) if sds else None,
        "mixed": mixed,
    }


def digest(episode: Episode) -> dict[str, Any]:
    """What ``summarize`` reads of an episode, taken from the live record (so a run
    need not read its own output back). ``failure``: the error that made it fail
    (``failures.first_failure``), None when it did not."""
    return {
        "ok": episode.ok,
        "failure": first_failure(episode),
        "cause": episode.cause,
        "stop": episode.stop,
        "traces": [
            {
                "agent": {"name": t.agent.name, "trainable": t.agent.trainable},
                "episode": {"task_idx": t.episode.task_idx},
                "reward": t.reward,
                "rewards": t.rewards,
                "metrics": t.metrics,
                "stop_condition": t.stop_condition,
                "errors": len(t.errors),
                "turns": len(t.turns),
                "usage": {"total_tokens": t.usage.total_tokens},
                "token_check": check_trace_tokens(
                    (u.index, u.prompt_token_ids, u.token_ids, u.retokenized) for u in t.turns
                ),
            }
            for t in episode.traces
        ],
    }


def _token_check(t: Mapping[str, Any]) -> dict[str, Any]:
    """A trace's token check: from its digest, or worked out from its record."""
    check = t.get("token_check")
    if isinstance(check, dict):
        return check
    turns = t.get("turns")
    if not isinstance(turns, list):
        return {}
    return check_trace_tokens(
        (
            u.get("index", i),
            u.get("prompt_token_ids"),
            u.get("token_ids"),
            u.get("retokenized"),
        )
        for i, u in enumerate(turns)
        if isinstance(u, dict)
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) else len(value or [])


class _Means:
    """Running means by key: constant memory per key, whatever the number of values."""

    __slots__ = ("n", "sums")

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)

    def add(self, values: Mapping[str, Any]) -> None:
        sums, n = self.sums, self.n
        for k, v in values.items():
            sums[k] += float(v)
            n[k] += 1

    def means(self) -> dict[str, float]:
        return {k: self.sums[k] / self.n[k] for k in sorted(self.sums)}


class _AgentStats:
    """One agent's statistics, accumulated trace by trace (memory grows with the
    number of tasks: per task, ``[rollouts, passed, reward sum, sum of squares]``; at
    one rollout a task is its trace, and only its reward is kept, 8 bytes).

    The reward's mean and variance use Welford's update (numerically stable)."""

    def __init__(self, *, per_task: bool = True) -> None:
        self.per_task = per_task  # pass@k, pass^k, spread need rollouts per task
        self.traces = 0
        self.scored = 0  # traces with a reward computed (``scored``); the mean is over them
        self.mean = 0.0
        self.m2 = 0.0
        self.rewards = _Means()
        self.metrics = _Means()
        self.stops: Counter[str] = Counter()
        self.errors = 0
        self.turns = 0
        self.tokens = 0
        self.token_checks: Counter[str] = Counter()
        self.divergence_kinds: Counter[str] = Counter()
        self.by_task: dict[Any, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
        self.units = array("d")  # not per_task: each trace's reward (one task each)

    def add(self, t: Mapping[str, Any]) -> None:
        self.traces += 1
        rewards, metrics = t.get("rewards"), t.get("metrics")
        if rewards:  # ``scored``: a reward was computed
            self._add_reward(t, float(t.get("reward", 0.0)))
            self.rewards.add(rewards)
        if metrics:
            self.metrics.add(metrics)
        self.stops[str(t.get("stop_condition"))] += 1
        self.errors += 1 if _count(t.get("errors")) else 0
        self.turns += _count(t.get("turns"))
        self.tokens += int((t.get("usage") or {}).get("total_tokens", 0))
        check = _token_check(t)
        if check.get("turns"):
            for key in ("turns", "checked", "divergent", "final_retokenized"):
                self.token_checks[key] += int(check.get(key, 0))
            self.divergence_kinds.update(check.get("kinds") or {})

    def _add_reward(self, t: Mapping[str, Any], reward: float) -> None:
        self.scored += 1
        delta = reward - self.mean
        self.mean += delta / self.scored
        self.m2 += delta * (reward - self.mean)
        if self.per_task:
            task = self.by_task[(t.get("episode") or {}).get("task_idx")]
            task[0] += 1
            task[1] += passed(reward)
            task[2] += reward
            task[3] += reward * reward
        else:
            self.units.append(reward)

    def stats(self, rollouts: int) -> dict[str, Any]:
        """The agent's statistics; a mean over no (ok) traces is None, not 0.0, and
        so is its interval. ``reward_ci95``: the bootstrap 95% interval of the mean
        over tasks (``_output.bootstrap``); at ``rollouts > 1`` also ``pass_at_k``,
        ``pass_hat_k`` (pass@k at k = 1, 2, rollouts; pass^k at every k from 1 to
        rollouts, the reliability table of tau-bench) and ``task_spread`` (``_spread``)."""
        n, k = self.traces, self.scored
        stderr = math.sqrt(self.m2 / (k - 1) / k) if k >= 2 else 0.0
        stats: dict[str, Any] = {
            "traces": n,
            "reward_mean": self.mean if k else None,
            "reward_stderr": stderr if k else None,
            "reward_ci95": self._interval() if k else None,
            "rewards": self.rewards.means(),
            "metrics": self.metrics.means(),
            "stop_conditions": dict(self.stops),
            "errors": self.errors,
            "turns_mean": self.turns / n if n else None,
            "tokens_mean": self.tokens / n if n else None,
            "tokens_total": self.tokens,
        }
        if self.token_checks["turns"]:
            checked, divergent = self.token_checks["checked"], self.token_checks["divergent"]
            stats["token_divergences"] = {
                "turns_with_ids": self.token_checks["turns"],
                "checked": checked,
                "divergent": divergent,
                "rate": divergent / checked if checked else 0.0,
                "kinds": dict(self.divergence_kinds),
                "final_retokenized": self.token_checks["final_retokenized"],
            }
        if rollouts > 1:
            tasks = list(self.by_task.values())
            ks = sorted({1, rollouts} | ({2} if rollouts > 2 else set()))
            stats["pass_at_k"] = {str(k): _over_tasks(tasks, k, pass_at_k) for k in ks}
            # every k: tau-bench reports pass^k as a curve over k
            every = range(1, rollouts + 1)
            stats["pass_hat_k"] = {str(k): _over_tasks(tasks, k, pass_hat_k) for k in every}
            stats["task_spread"] = _spread(tasks)
        return stats

    def _interval(self) -> list[float] | None:
        """Sorted units: the interval does not depend on the order episodes finished."""
        if not self.per_task:
            return interval(sorted(self.units))
        units = sorted((t[2], int(t[0])) for t in self.by_task.values())
        return interval([u[0] for u in units], [u[1] for u in units])


class Summarizer:
    """``summarize`` one episode at a time: ``add`` each record or digest as it comes,
    ``result`` whenever the summary is wanted. Memory grows with the number of agents,
    metric names and tasks (for pass@k), never with the number of episodes."""

    def __init__(self, *, rollouts: int | None = 1) -> None:
        """``rollouts`` None: not known yet (set it before ``result``; pass@k data
        is kept meanwhile)."""
        self.rollouts = rollouts
        self.total = 0
        per_task = rollouts is None or rollouts > 1
        self.agents: dict[str, _AgentStats] = defaultdict(lambda: _AgentStats(per_task=per_task))
        self.failed_agents: dict[str, _Means] = defaultdict(_Means)
        self.failed_traces: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.stops: Counter[str] = Counter()
        self.failures = FailureKinds()

    def add(self, e: Mapping[str, Any]) -> None:
        self.total += 1
        self.failures.add(e.get("failure"))
        self.stops[str(e.get("stop"))] += 1
        cause = record_cause(e)
        if cause is not None:
            self.causes[cause] += 1
        for t in e.get("traces") or []:
            name = (t.get("agent") or {}).get("name", "?")
            if cause is None:
                self.agents[name].add(t)
            else:
                self.failed_traces[name] += 1
                if scored(t):
                    self.failed_agents[name].add({"reward": t.get("reward", 0.0)})

    def result(self, *, wall_s: float | None = None) -> dict[str, Any]:
        """The ``summary.json`` object (see ``summarize``)."""
        failed = sum(self.causes.values())
        summary: dict[str, Any] = {
            "episodes": self.total,
            "ok": self.total - failed,
            "failed": failed,
            "failed_by_cause": dict(self.causes.most_common()),
            "episode_stops": dict(self.stops),
            # the first failure of each kind (digests carry it; records read back do not)
            "failures": self.failures.result(),
            "agents": {},
        }
        for name in sorted(self.agents.keys() | self.failed_traces.keys()):
            stats = (self.agents.get(name) or _AgentStats()).stats(self.rollouts or 1)
            apart = self.failed_agents.get(name)
            stats["failed_traces"] = self.failed_traces[name]
            if apart:
                stats["failed_reward_mean"] = apart.means()["reward"]
            summary["agents"][name] = stats
        if wall_s is not None:
            summary["wall_s"] = wall_s
            summary["episodes_per_s"] = self.total / wall_s if wall_s > 0 else 0.0
        return summary


def summarize(
    episodes: Iterable[Mapping[str, Any]], *, rollouts: int = 1, wall_s: float | None = None
) -> dict[str, Any]:
    """The ``summary.json`` object, streamed over ``episodes`` (records or digests).

    Failed episodes (``_exchange.outcome``) are counted by cause (``failed_by_cause``)
    and their traces are left out of every agent statistic; each agent's failed
    traces are shown apart (``failed_traces``, ``failed_reward_mean``)."""
    summarizer = Summarizer(rollouts=rollouts)
    for e in episodes:
        summarizer.add(e)
    return summarizer.result(wall_s=wall_s)


def render(summary: Mapping[str, Any]) -> Any:
    """The end-of-eval table (a rich renderable): one column per agent, one row per
    statistic, so a name (a reward, a metric, a stop condition) is never cut however
    narrow the console: the first column does not wrap, the agents' columns fold."""
    from rich.table import Table

    agents: Mapping[str, Mapping[str, Any]] = summary["agents"]
    table = Table(title=f"{summary['episodes']} episodes, {summary['failed']} failed")
    table.add_column("", no_wrap=True, style="bold")
    for name in agents:
        table.add_column(name, overflow="fold", justify="right")
    for label, cells, section in _rows(agents):
        table.add_row(label, *cells, end_section=section)
    return table


def _rows(agents: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str], bool]]:
    """(label, one cell per agent, ends a section) for ``render``."""
    stats = list(agents.values())

    def keyed(key: str, fmt: str, label: str) -> list[tuple[str, list[str], bool]]:
        names = sorted({k for a in stats for k in a.get(key) or {}})
        rows = [
            (label.format(k), [_cell((a.get(key) or {}).get(k), fmt) for a in stats], False)
            for k in names
        ]
        return [*rows[:-1], (*rows[-1][:2], True)] if rows else []

    rows = [("reward", [_reward(a) for a in stats], False)]
    rows.append(("bootstrap 95% CI", [_interval(a) for a in stats], False))
    for key, mark in (("pass_at_k", "@"), ("pass_hat_k", "^")):
        rows += [
            (f"pass{mark}{k}", [_cell((a.get(key) or {}).get(k), ".2f") for a in stats], False)
            for k in sorted({k for a in stats for k in a.get(key) or {}}, key=int)
        ]
    if any(a.get("task_spread") for a in stats):
        spread = [a.get("task_spread") or {} for a in stats]
        rows.append(
            ("task reward sd (mean)", [_cell(t.get("sd_mean"), ".3f") for t in spread], False)
        )
        rows.append(("tasks mixed pass/fail", [_mixed(t) for t in spread], False))
    rows[-1] = (*rows[-1][:2], True)
    rows += keyed("rewards", "+.3f", "{}")
    rows += keyed("metrics", ".3f", "{} (metric)")
    rows += keyed("stop_conditions", "d", "stop: {}")
    rows.append(("turns (mean)", [_cell(a["turns_mean"], ".1f") for a in stats], False))
    rows.append(("tokens", [_tokens(a) for a in stats], False))
    if any(a.get("token_divergences") for a in stats):
        rows.append(("token divergences", [_divergences(a) for a in stats], False))
    return rows


def _divergences(stats: Mapping[str, Any]) -> str:
    """``2 of 32 checked`` turns whose prompt did not extend the sequence before it."""
    check = stats.get("token_divergences")
    return f"{check['divergent']} of {check['checked']} checked" if check else "-"


def _reward(stats: Mapping[str, Any]) -> str:
    """Mean ± standard error; ``-`` for an agent that is not scored (no rewards) or
    has no ok trace (no mean)."""
    if not stats.get("rewards") or stats.get("reward_mean") is None:
        return "-"
    return f"{stats['reward_mean']:+.3f} ± {stats['reward_stderr']:.3f}"


def _interval(stats: Mapping[str, Any]) -> str:
    """``[+0.100, +0.500]``; ``-`` as for the mean."""
    ci = stats.get("reward_ci95")
    if not stats.get("rewards") or not ci:
        return "-"
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _mixed(spread: Mapping[str, Any]) -> str:
    """``3 of 8`` tasks whose rollouts both pass and fail."""
    if not spread:
        return "-"
    return f"{spread['mixed']} of {spread['tasks']}"


def _tokens(stats: Mapping[str, Any]) -> str:
    return f"{_cell(stats['tokens_mean'], ',.0f')} (Σ {stats['tokens_total']:,})"


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
