"""Two runs compared task by task (``taketurns compare A B``): for each agent (by its
name, the role it plays), the paired difference of mean rewards over the tasks both
runs hold, with its bootstrap 95% interval (``_output.bootstrap``, resampling tasks).

A task is matched by its index and name; its value in a run is the mean reward of
the agent's ok traces over that run's rollouts of it (failed episodes, as in the
summary, are left out). The difference is ``B - A``: positive when B scores higher.
Streamed: memory grows with the number of tasks, not with the episodes' contents."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from taketurns._exchange.outcome import record_cause
from taketurns._output.bootstrap import interval

__all__ = ["compare", "render_comparison", "task_means"]

TaskKey = tuple[Any, Any]  # (task idx, task name)


def task_means(episodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[TaskKey, float]]:
    """Per scored agent name, per task, the mean reward of its ok traces. An agent
    none of whose traces has ``rewards`` (a modeled user) is not scored: left out."""
    sums: dict[str, dict[TaskKey, list[float]]] = defaultdict(dict)
    scored: set[str] = set()
    for e in episodes:
        if record_cause(e) is not None:
            continue
        task = e.get("task") or {}
        key = (task.get("idx"), task.get("name"))
        for t in e.get("traces") or []:
            name = str((t.get("agent") or {}).get("name", "?"))
            acc = sums[name].setdefault(key, [0.0, 0])
            acc[0] += float(t.get("reward") or 0.0)
            acc[1] += 1
            if t.get("rewards"):
                scored.add(name)
    return {
        name: {key: total / n for key, (total, n) in tasks.items()}
        for name, tasks in sums.items()
        if name in scored
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _pair(a: Mapping[TaskKey, float], b: Mapping[TaskKey, float]) -> dict[str, Any]:
    matched = sorted(a.keys() & b.keys(), key=repr)
    diffs = [b[k] - a[k] for k in matched]
    return {
        "tasks_a": len(a),
        "tasks_b": len(b),
        "matched": len(matched),
        "mean_a": _mean([a[k] for k in matched]),
        "mean_b": _mean([b[k] for k in matched]),
        "diff": _mean(diffs),
        # sorted: the interval does not depend on task order
        "diff_ci95": interval(sorted(diffs)),
        "b_higher": sum(d > 0 for d in diffs),
        "b_lower": sum(d < 0 for d in diffs),
        "tied": sum(d == 0 for d in diffs),
    }


def compare(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The comparison object (what ``taketurns compare --json`` prints): per agent,
    ``tasks_a``/``tasks_b`` (tasks with an ok trace of it), ``matched`` (in both),
    ``mean_a``/``mean_b`` over the matched tasks, ``diff`` (B - A, their paired mean
    difference) and ``diff_ci95``, and how many matched tasks B scored higher, lower
    or the same on. Over no matched task every mean and the interval are None."""
    means_a, means_b = task_means(a), task_means(b)
    agents = {
        name: _pair(means_a.get(name, {}), means_b.get(name, {}))
        for name in sorted(means_a.keys() | means_b.keys())
    }
    return {"agents": agents}


def render_comparison(result: Mapping[str, Any], *, a: str, b: str) -> Any:
    """The comparison as a rich table: one row per agent; ``matched`` is the number
    of tasks in both runs (each run's own count beside it)."""
    from rich.table import Table

    table = Table(title=f"B - A, paired by task (A: {a}, B: {b})")
    table.add_column("agent", no_wrap=True)
    table.add_column("matched (A, B)", justify="right")
    for column in ("A mean", "B mean", "B - A", "95% CI"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("B >/</= A", justify="right")
    for name, row in result["agents"].items():
        ci = row["diff_ci95"]
        table.add_row(
            name,
            f"{row['matched']} ({row['tasks_a']}, {row['tasks_b']})",
            _num(row["mean_a"]),
            _num(row["mean_b"]),
            _num(row["diff"]),
            "-" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]",
            f"{row['b_higher']}/{row['b_lower']}/{row['tied']}",
        )
    return table


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
