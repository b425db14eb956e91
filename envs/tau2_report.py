"""``tau2``'s part of the report: per task, tau2's reward and its breakdown over the
task's reward basis with the termination reasons; per episode, the attributed log of
both seats (every tool call with its requestor, every message passed) and, when the
database check failed, the diff between the episode's databases and the gold
actions' (``info["tau2"]["db_diff"]``).

Read from the assistant's trace: ``info["tau2"]`` (id, reward, reward_breakdown,
termination_reason, db_diff) and ``info["log"]``. The log section lists the
``LOG_EPISODES`` first episodes by task and rollout, the first one opened.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from taketurns.report import EpisodeView, Section, details, table

__all__ = ["LOG_EPISODES", "sections"]

LOG_EPISODES = 50
SEATS = ("assistant", "user")
PARTS = ("DB", "ENV_ASSERTION", "COMMUNICATE", "ACTION", "NL_ASSERTION")


def _facts(episode: EpisodeView) -> dict[str, Any] | None:
    for trace in episode.traces:
        if trace.agent.name == "assistant" and isinstance(trace.info.get("tau2"), dict):
            facts: dict[str, Any] = trace.info["tau2"]
            return facts
    return None


def _log(episode: EpisodeView) -> list[dict[str, Any]]:
    for trace in episode.traces:
        log = trace.info.get("log")
        if isinstance(log, list):
            return [e for e in log if isinstance(e, dict)]
    return []


def sections(episodes: Iterable[EpisodeView]) -> list[Section]:
    """The per-task breakdown and the action log (one pass over ``episodes``)."""
    per_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    shown: list[EpisodeView] = []
    for episode in episodes:
        facts = _facts(episode)
        if facts is not None and episode.ok:
            per_task[str(facts.get("id"))].append(facts)
        if len(shown) < LOG_EPISODES:
            shown.append(episode)
    shown.sort(key=lambda e: (e.task.idx, e.rollout))
    return [_breakdown(per_task), _actions(shown)]


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def _breakdown(per_task: dict[str, list[dict[str, Any]]]) -> Section:
    rows = []
    for task_id, runs in per_task.items():
        parts = [
            _mean(
                [
                    float(r["reward_breakdown"][p])
                    for r in runs
                    if p in (r.get("reward_breakdown") or {})
                ]
            )
            for p in PARTS
        ]
        ended = Counter(str(r.get("termination_reason")) for r in runs)
        rewards = [float(r.get("reward", 0.0)) for r in runs]
        endings = ", ".join(f"{k} {n}" for k, n in ended.most_common())
        rows.append((task_id, len(runs), _mean(rewards), *parts, endings))
    body = table(["task", "rollouts", "reward", *PARTS, "ended by"], rows, mono=[0])
    intro = (
        '<p class="muted">tau2\'s reward per task (ok episodes) and its breakdown over '
        "the task's reward basis (- where a part is not in it).</p>"
    )
    return Section("tau2: reward by task", intro + body, "tau2-tasks")


def _rows(log: list[dict[str, Any]]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for n, e in enumerate(log, 1):
        seat = str(e.get("seat", "?"))
        if "tool" in e:
            args = json.dumps(e.get("arguments") or {}, sort_keys=True)
            result = ("ERROR " if e.get("error") else "") + str(e.get("result", ""))
            rows.append((n, seat, str(e["tool"]), args, result))
        else:
            rows.append((n, seat, "(says)", "", str(e.get("said", ""))))
    return rows


def _actions(shown: list[EpisodeView]) -> Section:
    boxes = []
    for i, episode in enumerate(shown):
        facts = _facts(episode) or {}
        log = _log(episode)
        calls = Counter(str(e.get("seat")) for e in log if "tool" in e)
        head = [
            episode.id,
            str(facts.get("id", "")),
            f"reward {facts.get('reward', '-')}" if episode.ok else "failed",
            f"ended by {facts.get('termination_reason', '?')}",
            ", ".join(f"{calls[s]} calls by the {s}" for s in SEATS if calls[s]),
        ]
        body = table(
            ["#", "seat", "tool", "arguments", "result / text"],
            _rows(log),
            tag_column=1,
            tags=SEATS,
            mono=[3],
        )
        diff = facts.get("db_diff")
        if diff:
            rows = [
                (side, c.get("change"), c.get("path", c.get("count")), json.dumps(c.get("value")))
                for side, changes in diff.items()
                for c in changes
            ]
            body += "<p>Database diff (gold actions' → this episode's):</p>" + table(
                ["database", "change", "path", "value"], rows, mono=[2, 3]
            )
        boxes.append(details(" · ".join(p for p in head if p), body, open=i == 0))
    intro = (
        '<p class="muted">Every message and tool call of both seats on the episode\'s '
        "environment, in order (trace info <code>log</code>), the first "
        f"{LOG_EPISODES} episodes.</p>"
    )
    return Section("tau2: both seats, in order", intro + "".join(boxes), "tau2-log")
