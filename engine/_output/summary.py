"""Results: per-agent statistics over episode records (the raw JSONL objects), so the
same numbers come from a live run, a resumed one, or a directory on disk."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taketurns._eval.episode import Episode

__all__ = ["digest", "pass_at_k", "render", "summarize"]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stderr(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with ``c`` of ``n`` rollouts passing."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def digest(episode: Episode) -> dict[str, Any]:
    """What ``summarize`` reads of an episode, taken from the live record (so a run
    need not read its own output back)."""
    return {
        "ok": episode.ok,
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
            }
            for t in episode.traces
        ],
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) else len(value or [])


def _agent_stats(traces: list[Mapping[str, Any]], rollouts: int) -> dict[str, Any]:
    rewards = [float(t.get("reward", 0.0)) for t in traces]
    named: dict[str, list[float]] = defaultdict(list)
    metrics: dict[str, list[float]] = defaultdict(list)
    for t in traces:
        for k, v in (t.get("rewards") or {}).items():
            named[k].append(float(v))
        for k, v in (t.get("metrics") or {}).items():
            metrics[k].append(float(v))
    turns = [_count(t.get("turns")) for t in traces]
    tokens = [int((t.get("usage") or {}).get("total_tokens", 0)) for t in traces]
    stats: dict[str, Any] = {
        "traces": len(traces),
        "reward_mean": _mean(rewards),
        "reward_stderr": _stderr(rewards),
        "rewards": {k: _mean(v) for k, v in sorted(named.items())},
        "metrics": {k: _mean(v) for k, v in sorted(metrics.items())},
        "stop_conditions": dict(Counter(str(t.get("stop_condition")) for t in traces)),
        "errors": sum(1 for t in traces if _count(t.get("errors"))),
        "turns_mean": _mean(turns),
        "tokens_mean": _mean(tokens),
        "tokens_total": sum(tokens),
    }
    if rollouts > 1:
        by_task: dict[Any, list[float]] = defaultdict(list)
        for t in traces:
            by_task[(t.get("episode") or {}).get("task_idx")].append(float(t.get("reward", 0)))
        stats["pass_at_k"] = {
            str(k): _mean([pass_at_k(len(v), sum(r > 0 for r in v), k) for v in by_task.values()])
            for k in sorted({1, rollouts} | ({2} if rollouts > 2 else set()))
        }
    return stats


def summarize(
    episodes: Iterable[Mapping[str, Any]], *, rollouts: int = 1, wall_s: float | None = None
) -> dict[str, Any]:
    """The ``summary.json`` object."""
    episodes = list(episodes)
    by_agent: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in episodes:
        for t in e.get("traces") or []:
            by_agent[(t.get("agent") or {}).get("name", "?")].append(t)
    summary: dict[str, Any] = {
        "episodes": len(episodes),
        "ok": sum(1 for e in episodes if e.get("ok")),
        "failed": sum(1 for e in episodes if not e.get("ok")),
        "episode_stops": dict(Counter(str(e.get("stop")) for e in episodes)),
        "agents": {name: _agent_stats(ts, rollouts) for name, ts in sorted(by_agent.items())},
    }
    if wall_s is not None:
        summary["wall_s"] = wall_s
        summary["episodes_per_s"] = len(episodes) / wall_s if wall_s > 0 else 0.0
    return summary


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
    rows += [
        (f"pass@{k}", [_cell((a.get("pass_at_k") or {}).get(k), ".2f") for a in stats], False)
        for k in sorted({k for a in stats for k in a.get("pass_at_k") or {}}, key=int)
    ]
    rows[-1] = (*rows[-1][:2], True)
    rows += keyed("rewards", "+.3f", "{}")
    rows += keyed("metrics", ".3f", "{} (metric)")
    rows += keyed("stop_conditions", "d", "stop: {}")
    rows.append(("turns (mean)", [f"{a['turns_mean']:.1f}" for a in stats], False))
    rows.append(
        ("tokens", [f"{a['tokens_mean']:,.0f} (Σ {a['tokens_total']:,})" for a in stats], False)
    )
    return rows


def _reward(stats: Mapping[str, Any]) -> str:
    """Mean ± standard error; ``-`` for an agent that is not scored (no rewards)."""
    if not stats.get("rewards"):
        return "-"
    return f"{stats['reward_mean']:+.3f} ± {stats['reward_stderr']:.3f}"


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
