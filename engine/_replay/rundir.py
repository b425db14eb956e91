"""A replay written as a run directory, and its report on the terminal.

Each replayed episode is written to the new ``episodes.jsonl`` as it ends, its
``info.replayed`` saying it is a replay: the source run directory (``from``), the
episode id, its ``status`` and ``divergence`` / ``differences`` / ``failure``
(``ReplayResult.to_json``). ``summary.json`` is the usual summary of the replayed
episodes plus ``replayed_from``: the source run, the count of each status, and one
line per episode that was not reproduced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import trio

from taketurns._output.records import episode_line
from taketurns._output.rundir import RunDir
from taketurns._output.summary import Summarizer, digest
from taketurns._replay.run import DIVERGED, FAILED, REPRODUCED, Replaying, ReplayResult
from taketurns._replay.run import replay_episodes as _replay_episodes

__all__ = ["render_replay", "replay_run"]

SHOWN = 20  # episodes not reproduced listed on the terminal


def replay_run(
    replaying: Replaying,
    out: RunDir,
    *,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``replaying``'s episodes into ``out`` (prepared, locked and opened by the
    caller) in a ``trio.run`` of its own; returns the summary, with ``replayed_from``.
    ``notify`` hears how many damaged source lines were skipped."""
    source = str(replaying.recorded.path)
    summarizer = Summarizer(rollouts=None)
    counts: Counter[str] = Counter({REPRODUCED: 0, DIVERGED: 0, FAILED: 0})
    lines: list[str] = []
    rollouts = 0

    def written(result: ReplayResult) -> None:
        nonlocal rollouts
        episode = result.episode
        episode.info["replayed"] = {"from": source, "episode": result.episode_id}
        episode.info["replayed"].update(result.to_json())
        summarizer.add(digest(episode))
        out.append_lines([episode_line(episode)])
        counts[result.status] += 1
        rollouts = max(rollouts, episode.rollout + 1)
        if result.status != REPRODUCED:
            lines.append(result.describe())

    if replaying.damaged and notify is not None:
        notify(
            f"{replaying.recorded.episodes_path}: skipped {replaying.damaged} damaged lines "
            "(not replayed)"
        )
    trio.run(_replay_episodes, replaying, written)
    summarizer.rollouts = max(replaying.recorded.config.rollouts, rollouts)
    summary = summarizer.result()
    summary["replayed_from"] = {"run": source, **counts, "not_reproduced": sorted(lines)}
    return summary


def render_replay(summary: dict[str, Any]) -> list[str]:
    """The replay's outcome as lines of text: the counts, then the episodes that
    were not reproduced (the first ``SHOWN``)."""
    source = summary["replayed_from"]
    total = sum(source[k] for k in (REPRODUCED, DIVERGED, FAILED))
    out = [
        f"replayed {total} episodes of {source['run']}: {source[REPRODUCED]} reproduced, "
        f"{source[DIVERGED]} diverged, {source[FAILED]} failed"
    ]
    shown = source["not_reproduced"]
    out += [f"  {line}" for line in shown[:SHOWN]]
    if len(shown) > SHOWN:
        out.append(f"  ... and {len(shown) - SHOWN} more (summary.json: replayed_from)")
    return out
