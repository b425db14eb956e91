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
                "agent": {"name": t.agent.name},
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
    """The end-of-eval table (a rich renderable): one row per agent."""
    from rich.table import Table

    table = Table(title=f"{summary['episodes']} episodes, {summary['failed']} failed")
    for column in ("agent", "reward", "rewards", "metrics", "stops", "turns", "tokens"):
        table.add_column(column)
    for name, a in summary["agents"].items():
        passes = a.get("pass_at_k")
        reward = f"{a['reward_mean']:+.3f} ± {a['reward_stderr']:.3f}"
        if passes:
            reward += "\n" + " ".join(f"pass@{k} {v:.2f}" for k, v in passes.items())
        table.add_row(
            name,
            reward,
            "\n".join(f"{k} {v:+.3f}" for k, v in a["rewards"].items()),
            "\n".join(f"{k} {v:.3f}" for k, v in a["metrics"].items()),
            "\n".join(f"{k} {v}" for k, v in a["stop_conditions"].items()),
            f"{a['turns_mean']:.1f}",
            f"{a['tokens_mean']:.0f} (Σ {a['tokens_total']:,})",
        )
    return table
