"""Reading a run directory back in the backend tests (a helper module): the CLI, the
written episodes, and records stripped of what two equal runs may differ in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taketurns import read_episodes
from taketurns._cli.main import main

# wall-clock fields: the only ones two runs of the same pairs may differ in
CLOCK_FIELDS = ("timing", "latency_s", "wall_s", "episodes_per_s")


def eval_cli(*args: str) -> int:
    """``taketurns eval ARGS --no-progress``; its exit status."""
    return main(["eval", *args, "--no-progress"])


def records(out: Path) -> dict[str, dict[str, Any]]:
    """The episodes written to ``out``, by id."""
    return {e["id"]: e for e in read_episodes(out / "episodes.jsonl")}


def pairs(out: Path) -> list[tuple[int, int]]:
    """The (task idx, rollout) pairs written to ``out``, sorted."""
    return sorted((e["task"]["idx"], e["rollout"]) for e in read_episodes(out / "episodes.jsonl"))


def steady(value: Any) -> Any:
    """A record (or summary) without its wall-clock fields."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in CLOCK_FIELDS}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as one dict keyed by dotted paths (a list's items by
    index: ``pytest.approx`` compares no nested containers)."""
    if isinstance(value, dict):
        return {
            k: v for key, item in value.items() for k, v in flat(item, f"{prefix}.{key}").items()
        }
    if isinstance(value, list):
        return {
            k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}.{i}").items()
        }
    return {prefix: value}
