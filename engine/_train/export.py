"""Export a run directory's training samples as a dataset: ``taketurns export DIR``.

Episodes in ``DIR/episodes.jsonl`` are grouped by task (all rollouts of a task are one
group; episodes ``open_rollouts`` recorded, by their streamed group), advantages
computed as for streamed groups (ok episodes, trainable agents), and every sample
becomes one row: JSON Lines (always) or Parquet (``pyarrow``, the
``taketurns[train]`` extra). Both load with ``datasets.load_dataset("json" |
"parquet", data_files=...)``. Row columns (``ROW_COLUMNS``): provenance (``env``,
``episode_id``, ``agent``, ``task_idx``, ``task_name``, ``rollout``, ``turns``), the
sequence (``prompt_ids``, ``completion_ids``, ``completion_mask``,
``completion_logprobs``, possibly null), ``reward``, ``advantage``, ``reason`` (why
a sample split off, else null), ``policy_versions``, ``divergence`` (where a prompt
stopped extending the sequence before it: ``turn``, ``previous``, ``position``,
``kind``, ``within``, ``expected`` and ``got`` token runs; else null), and the
per-turn rewards lined up with ``turns``: ``turn_rewards`` (what the env paid on each
turn, 0.0 for none) and ``turn_ends`` (where in ``completion_ids`` each turn's own
tokens end); what each turn can be trusted for, lined up with ``turns`` too:
``turn_finish_reasons``, ``turn_truncated``, ``turn_stop_tokens`` (``sampled``,
``dropped`` or null), ``turn_token_gaps`` (what a turn's token data lacks, else
null), with ``truncated`` (any turn cut at ``max_tokens``),
``sampling`` (the request fields the turns were sent; a JSON string in Parquet)
and ``final_divergence`` (the last completion re-tokenizes differently; shaped as
``divergence``) — see ``taketurns._train.samples``.

A run whose turns carry no token ids (the default eval: nothing asked the endpoint
for them) exports message-level rows instead (``level="auto"``; or ask for a level:
``tokens``, ``messages``), for trainers that tokenize themselves: one row per
trainable trace of an ok episode (``MESSAGE_COLUMNS``): provenance, ``messages`` (the
conversation in OpenAI wire shape; a JSON string in Parquet), ``message_mask`` (1 on
the model's own turns), ``reward``, ``advantage``, ``policy_versions``,
``turn_rewards`` (``{turn, name, value, message}``: ``message`` indexes ``messages``;
a JSON string in Parquet).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import orjson

from taketurns._errors import ConfigError
from taketurns._eval.episode import Episode
from taketurns._exchange.divergence import Divergence
from taketurns._output.records import read_episodes, record
from taketurns._train.conversations import group_conversations
from taketurns._train.groups import Group, make_group

__all__ = [
    "FORMATS",
    "LEVELS",
    "MESSAGE_COLUMNS",
    "ROW_COLUMNS",
    "Export",
    "export_samples",
    "message_rows",
    "run_groups",
    "sample_rows",
]

FORMATS = ("jsonl", "parquet")
LEVELS = ("auto", "tokens", "messages")
MESSAGE_COLUMNS = (
    "env",
    "episode_id",
    "agent",
    "task_idx",
    "task_name",
    "rollout",
    "messages",
    "message_mask",
    "reward",
    "advantage",
    "policy_versions",
    "turn_rewards",
)
ROW_COLUMNS = (
    "env",
    "episode_id",
    "agent",
    "task_idx",
    "task_name",
    "rollout",
    "turns",
    "prompt_ids",
    "completion_ids",
    "completion_mask",
    "completion_logprobs",
    "reward",
    "advantage",
    "reason",
    "policy_versions",
    "divergence",
    "turn_rewards",
    "turn_ends",
    "turn_finish_reasons",
    "turn_truncated",
    "turn_stop_tokens",
    "truncated",
    "sampling",
    "final_divergence",
    "turn_token_gaps",
)


@attrs.frozen
class Export:
    """What ``export_samples`` wrote: ``rows`` samples of ``groups`` groups
    (``episodes`` episodes, ``failed`` of them not ok) to ``path``, at ``level``
    (``tokens`` or ``messages``)."""

    path: Path
    rows: int
    groups: int
    episodes: int
    failed: int
    level: str = "tokens"


def run_groups(run_dir: Path, *, scale: bool = False) -> list[Group]:
    """The run's episodes grouped by task idx (in task order; episodes streamed by
    ``open_rollouts`` by their group), advantages computed.
    Raises ``ConfigError`` when ``run_dir`` holds no ``episodes.jsonl``."""
    path = Path(run_dir) / "episodes.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no episodes.jsonl here; pass a run directory (-o DIR)")
    by_group: dict[tuple[int, int], list[Episode]] = {}
    for raw in read_episodes(path):
        episode = record.structure(raw, Episode)
        group = episode.info.get("group")  # a streamed group's number (open_rollouts)
        key = (episode.task.idx, group if isinstance(group, int) else -1)
        by_group.setdefault(key, []).append(episode)
    return [
        make_group(episodes[0].task, episodes, scale=scale)
        for _, episodes in sorted(by_group.items())
    ]


def sample_rows(groups: Iterable[Group]) -> Iterator[dict[str, Any]]:
    """One row (``ROW_COLUMNS``) per sample of each group."""
    for group in groups:
        env = group.episodes[0].env if group.episodes else ""
        for s in group.samples():
            yield {
                "env": env,
                "episode_id": s.episode_id,
                "agent": s.agent,
                "task_idx": s.task_idx,
                "task_name": group.task.name,
                "rollout": s.rollout,
                "turns": list(s.turns),
                "prompt_ids": s.prompt_ids,
                "completion_ids": s.completion_ids,
                "completion_mask": s.completion_mask,
                "completion_logprobs": s.completion_logprobs,
                "reward": s.reward,
                "advantage": s.advantage,
                "reason": s.reason,
                "policy_versions": list(s.policy_versions),
                "divergence": _divergence(s.divergence),
                "turn_rewards": list(s.turn_rewards),
                "turn_ends": list(s.turn_ends),
                "turn_finish_reasons": list(s.turn_finish_reasons),
                "turn_truncated": list(s.turn_truncated),
                "turn_stop_tokens": list(s.turn_stop_tokens),
                "truncated": s.truncated,
                "sampling": s.sampling,
                "final_divergence": _divergence(s.final_divergence),
                "turn_token_gaps": list(s.turn_token_gaps),
            }


def _divergence(found: Divergence | None) -> dict[str, Any] | None:
    return found.to_json() if found is not None else None


def message_rows(groups: Iterable[Group]) -> Iterator[dict[str, Any]]:
    """One row (``MESSAGE_COLUMNS``) per trainable trace of each group's ok episodes."""
    for group in groups:
        env = group.episodes[0].env if group.episodes else ""
        for c in group_conversations(group):
            yield {
                "env": env,
                "episode_id": c.episode_id,
                "agent": c.agent,
                "task_idx": c.task_idx,
                "task_name": group.task.name,
                "rollout": c.rollout,
                "messages": c.messages,
                "message_mask": c.message_mask,
                "reward": c.reward,
                "advantage": c.advantage,
                "policy_versions": list(c.policy_versions),
                "turn_rewards": list(c.turn_rewards),
            }


def export_samples(
    run_dir: Path,
    out: Path | None = None,
    *,
    format: str = "jsonl",
    scale: bool = False,
    level: str = "auto",
) -> Export:
    """Write the samples of ``run_dir`` to ``out`` (default ``run_dir/samples.<format>``):
    token-level rows, or message-level ones (``level="messages"``, or ``"auto"`` when no
    turn carried token ids); nothing is written when there is no row. Raises
    ``ConfigError`` for an unknown format or level, a missing run, or Parquet without
    ``pyarrow``. Synchronous (file I/O): from trio, call it in ``trio.to_thread``."""
    if format not in FORMATS:
        raise ConfigError(f"--format {format!r}: choose one of {', '.join(FORMATS)}")
    if level not in LEVELS:
        raise ConfigError(f"--level {level!r}: choose one of {', '.join(LEVELS)}")
    groups = run_groups(run_dir, scale=scale)
    target = Path(out) if out is not None else Path(run_dir) / f"samples.{format}"
    rows = list(sample_rows(groups)) if level != "messages" else []
    used = "tokens"
    if level == "messages" or (level == "auto" and not rows):
        rows, used = list(message_rows(groups)), "messages"
    if not rows:
        pass  # nothing to write: no empty file stands in for a dataset
    elif format == "jsonl":
        with target.open("wb") as f:
            for row in rows:
                f.write(orjson.dumps(row) + b"\n")
    elif used == "messages":
        _write_parquet_messages(rows, target)
    else:
        _write_parquet(rows, target)
    episodes = sum(len(g.episodes) for g in groups)
    failed = sum(g.failed for g in groups)
    return Export(target, len(rows), len(groups), episodes, failed, used)


def _write_parquet_messages(rows: list[dict[str, Any]], target: Path) -> None:
    """Message-level rows as Parquet: ``messages`` as JSON text (a message's content
    is a string or a list of parts, which one Arrow type cannot hold)."""
    pa, pq = _pyarrow()
    columns = {name: [row[name] for row in rows] for name in MESSAGE_COLUMNS}
    for name in ("messages", "turn_rewards"):
        columns[name] = [orjson.dumps(m).decode() for m in columns[name]]
    schema = pa.schema(
        [
            *_provenance(pa),
            ("messages", pa.string()),
            ("message_mask", pa.list_(pa.int8())),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("policy_versions", pa.list_(pa.string())),
            ("turn_rewards", pa.string()),
        ]
    )
    pq.write_table(pa.table(columns, schema=schema), target)


def _provenance(pa: Any) -> list[tuple[str, Any]]:
    """The Parquet types of the columns every row starts with (both levels)."""
    return [
        ("env", pa.string()),
        ("episode_id", pa.string()),
        ("agent", pa.string()),
        ("task_idx", pa.int64()),
        ("task_name", pa.string()),
        ("rollout", pa.int64()),
    ]


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "--format parquet needs pyarrow: pip install 'taketurns[train]' (or use jsonl)"
        ) from None
    return pa, pq


def _divergence_type(pa: Any) -> Any:
    return pa.struct(
        [
            ("turn", pa.int64()),
            ("previous", pa.int64()),
            ("position", pa.int64()),
            ("kind", pa.string()),
            ("within", pa.int64()),
            ("expected", pa.list_(pa.int64())),
            ("got", pa.list_(pa.int64())),
        ]
    )


def _write_parquet(rows: list[dict[str, Any]], target: Path) -> None:
    """Token-level rows as Parquet: ``sampling`` as JSON text (its fields vary by
    server)."""
    pa, pq = _pyarrow()
    columns = {name: [row[name] for row in rows] for name in ROW_COLUMNS}
    columns["sampling"] = [
        None if v is None else orjson.dumps(v).decode() for v in columns["sampling"]
    ]
    schema = pa.schema(
        [
            *_provenance(pa),
            ("turns", pa.list_(pa.int64())),
            ("prompt_ids", pa.list_(pa.int64())),
            ("completion_ids", pa.list_(pa.int64())),
            ("completion_mask", pa.list_(pa.int8())),
            ("completion_logprobs", pa.list_(pa.float64())),
            ("reward", pa.float64()),
            ("advantage", pa.float64()),
            ("reason", pa.string()),
            ("policy_versions", pa.list_(pa.string())),
            ("divergence", _divergence_type(pa)),
            ("turn_rewards", pa.list_(pa.float64())),
            ("turn_ends", pa.list_(pa.int64())),
            ("turn_finish_reasons", pa.list_(pa.string())),
            ("turn_truncated", pa.list_(pa.bool_())),
            ("turn_stop_tokens", pa.list_(pa.string())),
            ("truncated", pa.bool_()),
            ("sampling", pa.string()),
            ("final_divergence", _divergence_type(pa)),
            ("turn_token_gaps", pa.list_(pa.string())),
        ]
    )
    pq.write_table(pa.table(columns, schema=schema), target)
