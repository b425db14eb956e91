"""``rescore``: a run's recorded traces scored again with the env's current rubric,
into a new run directory, without a single agent model call.

Each episode of the source ``episodes.jsonl`` is read back (``loads_episode``), and
every trace of an episode that was ok or failed only in scoring (cause ``scoring``:
a reward raised, which a fixed rubric may now score) has its ``rewards``, ``reward``,
``metrics``, judge calls and scoring errors cleared and is scored by
``env.rubric(role).score_within(task, trace, scoring_s)``, bounded by the role's
``timeouts.scoring_s`` as the eval's close bounds it (a scorer the eval cut off is
cut off again, and a hanging one does not hang the rescore); then the episode's
outcome is settled again (``Episode.settle``: a scorer that raises now fails it with
cause ``scoring``).
Episodes that failed otherwise (the model, the harness, the env) are copied as they
are. The env is built from the run's ``config.toml`` (plus overrides), set up and its
services held open as in an eval, so judges call the run's endpoints; no agent
session is ever opened. A rubric that reads ``trace.state`` (never recorded) sees it
empty.

Provenance: each written record's ``info.rescored`` names the source run directory
and episode id, and each trace's ``info.rescored_from`` holds its old ``reward``,
``rewards`` and ``metrics``; ``summary.json``'s ``rescored_from`` names the source
run and each agent's mean before and after."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from taketurns._config.options import EvalConfig, Timeouts
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._output.recorded import recorded_episodes
from taketurns._output.records import episode_line
from taketurns._output.rundir import RunDir
from taketurns._output.summary import Summarizer, digest

__all__ = ["RESCORED", "render_change", "rescore_run"]

RESCORED = ("scoring",)  # failure causes a rescore scores again (besides ok episodes)


async def rescore_run(
    source: Path,
    out: RunDir,
    config: EvalConfig,
    env: Env,
    *,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Rescore ``source/episodes.jsonl`` (``source`` resolved: the records name it)
    into ``out`` (prepared, locked and opened by
    the caller); returns the new summary, with ``rescored_from``. Damaged lines are
    skipped (``notify`` hears how many)."""
    before = Summarizer(rollouts=None)
    after = Summarizer(rollouts=None)
    damaged = rollouts = 0
    for judge in env.judges():  # a judge's requests follow the run's options
        judge.take_request_options(config)
        await judge.preflight()  # the only endpoints a rescore calls
    try:
        await env.setup()
        async with env.services():
            try:
                skipped: list[int] = []
                for episode in recorded_episodes(source / "episodes.jsonl", skipped):
                    rollouts = max(rollouts, episode.rollout + 1)
                    before.add(digest(episode))
                    await _rescore(episode, env, source)
                    after.add(digest(episode))
                    out.append_lines([episode_line(episode)])
                damaged = len(skipped)
            finally:
                for judge in env.judges():
                    await judge.aclose()  # shielded, idempotent
    finally:
        with trio.CancelScope(shield=True):
            await env.finalize()
    if damaged and notify is not None:
        notify(f"{source / 'episodes.jsonl'}: skipped {damaged} damaged lines")
    before.rollouts = after.rollouts = max(config.rollouts, rollouts)
    summary = after.result()
    old = before.result()["agents"]
    summary["rescored_from"] = {
        "run": str(source),
        "agents": {
            name: {
                "reward_mean_before": (old.get(name) or {}).get("reward_mean"),
                "reward_mean_after": stats.get("reward_mean"),
            }
            for name, stats in summary["agents"].items()
        },
    }
    return summary


async def _rescore(episode: Episode, env: Env, source: Path) -> None:
    """Score ``episode``'s traces again (when it was ok or failed in scoring)."""
    episode.info["rescored"] = {"from": str(source), "episode": episode.id}
    if episode.cause is not None and episode.cause not in RESCORED:
        return
    for trace in episode.traces:
        trace.info["rescored_from"] = {
            "reward": trace.reward,
            "rewards": dict(trace.rewards),
            "metrics": dict(trace.metrics),
        }
        trace.rewards, trace.reward, trace.metrics = {}, 0.0, {}
        trace.judge_calls = []
        trace.errors = [e for e in trace.errors if e.kind != "scoring"]
        role = env.roles.get(trace.agent.name)
        scoring_s = (role.timeouts if role is not None else Timeouts()).scoring_s
        await env.rubric(trace.agent.name).score_within(episode.task, trace, scoring_s)
    episode.settle()


def render_change(summary: dict[str, Any]) -> Any:
    """The rescore's old and new means, one row per agent (a rich table)."""
    from rich.table import Table

    source = summary["rescored_from"]
    table = Table(title=f"rescored from {source['run']}")
    table.add_column("agent", no_wrap=True)
    for column in ("mean before", "mean after", "change"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, row in source["agents"].items():
        old, new = row["reward_mean_before"], row["reward_mean_after"]
        change = None if old is None or new is None else new - old
        table.add_row(name, *(_num(v) for v in (old, new, change)))
    return table


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
