"""``telecom-lite``'s part of the report: the one ordered, attributed log of every
action of both seats, per episode, and the tool calls of each seat over the run.

The log is trace info ``log`` (the same list on both traces): one row per tool call,
in the order the calls ran, with the seat that made it, the tool, its arguments and
what it answered. The section lists the ``LOG_EPISODES`` first episodes by task and
rollout (failed ones too: their log is what happened before they failed), the first
one opened; the figure counts each seat's actions per ok episode.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from taketurns.report import EpisodeView, Figure, Section, bar_chart, details, histogram, table

__all__ = ["LOG_EPISODES", "action_log", "actions_per_episode", "log_of"]

LOG_EPISODES = 50
SEATS = ("assistant", "user")  # in the order of the agents' colours elsewhere


def log_of(episode: EpisodeView) -> list[dict[str, Any]]:
    """The episode's attributed log (from whichever trace holds it), or []."""
    for trace in episode.traces:
        log = trace.info.get("log")
        if isinstance(log, list):
            return [e for e in log if isinstance(e, dict)]
    return []


def _rows(log: list[dict[str, Any]]) -> list[tuple[object, ...]]:
    return [
        (
            n,
            str(e.get("seat", "?")),
            str(e.get("tool", "?")),
            json.dumps(e.get("arguments") or {}, sort_keys=True),
            str(e.get("result", "")),
        )
        for n, e in enumerate(log, 1)
    ]


def _headline(episode: EpisodeView, log: list[dict[str, Any]]) -> str:
    seats = Counter(str(e.get("seat")) for e in log)
    calls = ", ".join(f"{seats[s]} by the {s}" for s in SEATS if seats[s])
    rewards = {t.agent.name: t.rewards.get("resolved") for t in episode.traces}
    resolved = rewards.get("assistant", rewards.get("user"))
    ended = next((t.info.get("ended_by") for t in episode.traces if "ended_by" in t.info), None)
    state = "failed" if not episode.ok else f"resolved {resolved}" if resolved is not None else ""
    parts = [episode.id, f"{len(log)} actions" + (f" ({calls})" if calls else "")]
    parts += [p for p in (state, f"ended by {ended}" if ended else "") if p]
    return " · ".join(parts)


def action_log(episodes: Iterable[EpisodeView]) -> Section:
    """The attributed log of the first ``LOG_EPISODES`` episodes, one box each."""
    kept: list[tuple[tuple[int, int, str], int, EpisodeView]] = []
    total = 0
    for n, episode in enumerate(episodes):
        total += 1
        item = ((-episode.task.idx, -episode.rollout, episode.id), n, episode)
        if len(kept) < LOG_EPISODES:
            heapq.heappush(kept, item)
        elif item > kept[0]:
            heapq.heapreplace(kept, item)
    shown = [e for _, _, e in sorted(kept, reverse=True)]
    boxes = []
    for i, episode in enumerate(shown):
        log = log_of(episode)
        body = table(
            ["#", "seat", "tool", "arguments", "result"],
            _rows(log),
            tag_column=1,
            tags=SEATS,
            mono=[3],
        )
        boxes.append(details(_headline(episode, log), body, open=i == 0))
    more = (
        f'<p class="muted">the first {len(shown)} of {total} episodes, by task and rollout</p>'
        if total > len(shown)
        else ""
    )
    intro = (
        '<p class="muted">Every tool call of both seats on the one shared world, in the '
        "order the calls ran (trace info <code>log</code>).</p>"
    )
    return Section("Action log: both seats, in order", intro + "".join(boxes) + more, "action-log")


def actions_per_episode(episodes: Iterable[EpisodeView]) -> Figure:
    """How many actions each seat took in an episode: a histogram over the ok
    episodes, one bar per seat; the tooltip of a bar names the tools called."""
    counts: dict[str, Counter[float]] = {seat: Counter() for seat in SEATS}
    tools: dict[str, Counter[str]] = {seat: Counter() for seat in SEATS}
    ok = 0
    for episode in episodes:
        if not episode.ok:
            continue
        ok += 1
        log = log_of(episode)
        for seat in SEATS:
            mine = [str(e.get("tool")) for e in log if e.get("seat") == seat]
            counts[seat][float(len(mine))] += 1
            tools[seat].update(mine)
    cats, series = histogram(counts, integer=True)
    svg = bar_chart(
        "plot-telecom-actions",
        cats,
        series,
        x_label="actions in the episode",
        y_label="episodes",
        integer=True,
        values_on_bars=True,
    )
    note = "; ".join(
        f"{seat}: " + ", ".join(f"{tool} {n}" for tool, n in tools[seat].most_common())
        for seat in SEATS
        if tools[seat]
    )
    return Figure(
        "Actions per episode, by seat", svg, f"calls over {ok} ok episodes: {note}" if ok else ""
    )
