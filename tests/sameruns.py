"""Two runs of one config compared (a helper module): their records normalized by
stripping exactly what may differ between equal runs, ids and timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taketurns import read_episodes


def normalized(episode: dict[str, Any]) -> dict[str, Any]:
    """``episode`` without exactly its ids and its timing: the episode's ``id`` and
    ``timing``, each trace's ``episode.id`` and ``timing``, each turn's and each judge
    call's ``latency_s``. Everything else (task, seeds, turns, messages, rewards,
    info, stops, errors) must be equal."""
    out = {k: v for k, v in episode.items() if k not in ("id", "timing")}
    traces = []
    for trace in episode["traces"]:
        trace = {k: v for k, v in trace.items() if k != "timing"}
        trace["episode"] = {k: v for k, v in trace["episode"].items() if k != "id"}
        trace["turns"] = [_no_latency(turn) for turn in trace["turns"]]
        trace["judge_calls"] = [_no_latency(call) for call in trace["judge_calls"]]
        traces.append(trace)
    out["traces"] = traces
    return out


def _no_latency(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "latency_s"}


def runs(out: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The normalized records of a run directory, by (task idx, rollout)."""
    found = {(e["task"]["idx"], e["rollout"]): e for e in read_episodes(out / "episodes.jsonl")}
    return {key: normalized(e) for key, e in found.items()}


def assert_same_runs(a: Path, b: Path, count: int) -> None:
    ra, rb = runs(a), runs(b)
    assert len(ra) == count
    assert ra.keys() == rb.keys()
    for key, episode in ra.items():
        assert rb[key] == episode, key
        assert episode["ok"], key


def turn_seeds(out: Path) -> list[int | None]:
    return [
        turn["seed"]
        for e in read_episodes(out / "episodes.jsonl")
        for t in e["traces"]
        for turn in t["turns"]
    ]
