"""The cost of what makes a sample trustworthy (issue 37): each turn's ``sampling``,
``stop_token``, ``retokenized`` and ``token_gap`` in ``episodes.jsonl``, and the
per-turn and per-sample fields of every export row (``turn_finish_reasons``,
``turn_truncated``, ``turn_stop_tokens``, ``turn_token_gaps``, ``truncated``,
``sampling``, ``final_divergence``).

Kuhn self-play on the built-in model (token data asked for), ``run_eval`` to a run
directory, then, with and without the new fields, in this one run:

- ``record``: bytes of ``episodes.jsonl`` per turn, and the time to write the records
  (``record.unstructure`` + orjson, as the run writes them) with the turns as
  recorded vs the same turns without the new fields;
- ``export``: the time to merge the traces into samples and write every row as
  JSONL (``sample_rows`` + orjson, what ``taketurns export`` does) with the turns as
  recorded vs without the new turn fields and without the new columns, and the JSONL
  bytes per row with and without them.

Times are this process's CPU time (on a shared machine wall time mostly measures the
other sessions), the best of ``--repeat`` rounds, the two variants interleaved (which
goes first alternating), the garbage collector run before and paused during each; the
ratio is with / without. The "without" variant merges and writes the same episodes
with the new turn fields cleared and leaves the new columns out.

Run: ``python benchmarks/bench_samples.py [-n 1000] [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from taketurns import EvalConfig, RunDir, Sampling, run_eval
from taketurns._eval.episode import Episode
from taketurns._output.records import record
from taketurns._train.export import ROW_COLUMNS, run_groups, sample_rows
from taketurns._train.groups import Group, make_group
from taketurns.envs.kuhn import KuhnPoker

TURN_KEYS = ("sampling", "stop_token", "retokenized", "token_gap")
ROW_KEYS = (
    "turn_finish_reasons",
    "turn_truncated",
    "turn_stop_tokens",
    "turn_token_gaps",
    "truncated",
    "sampling",
    "final_divergence",
)
OLD_COLUMNS = tuple(c for c in ROW_COLUMNS if c not in ROW_KEYS)


def record_bytes(path: Path) -> tuple[int, int, int]:
    """(turns, bytes, bytes without the new turn keys) of ``episodes.jsonl``."""
    turns = total = without = 0
    for line in path.read_bytes().splitlines():
        total += len(line) + 1
        episode = orjson.loads(line)
        for trace in episode["traces"]:
            for turn in trace["turns"]:
                turns += 1
                for key in TURN_KEYS:
                    turn.pop(key, None)
        without += len(orjson.dumps(episode)) + 1
    return turns, total, without


def stripped(groups: list[Group]) -> list[Group]:
    """``groups`` with every turn's new fields cleared (as a run before them)."""
    blank = {key: None for key in TURN_KEYS}
    out = []
    for group in groups:
        episodes = []
        for episode in group.episodes:
            for trace in episode.traces:
                trace.turns = [attrs.evolve(t, **blank) for t in trace.turns]
            episodes.append(episode)
        out.append(make_group(group.task, episodes))
    return out


def write_records(episodes: list[Episode]) -> int:
    return sum(len(orjson.dumps(record.unstructure(e))) for e in episodes)


def write_rows(groups: list[Group], columns: tuple[str, ...]) -> int:
    """Bytes of every sample row (``columns`` only) as JSONL, as export writes them."""
    size = 0
    for row in sample_rows(groups):
        size += len(orjson.dumps({k: row[k] for k in columns})) + 1
    return size


def best_pair(a: Callable[[], Any], b: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """The best CPU time of ``a`` and of ``b`` over ``repeat`` interleaved rounds
    (which goes first alternates; a collection before each, none during)."""
    ta: list[float] = []
    tb: list[float] = []
    pairs = [(a, ta), (b, tb)]
    for i in range(repeat):
        for fn, out in pairs if i % 2 == 0 else pairs[::-1]:
            gc.collect()
            gc.disable()
            start = time.process_time()
            fn()
            out.append(time.process_time() - start)
            gc.enable()
    return min(ta), min(tb)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        config = EvalConfig(
            env_id="kuhn-poker",
            num_tasks=args.n,
            concurrency=32,
            sampling=Sampling(logprobs=True, temperature=1.0, top_p=1.0),
        )
        run_dir = RunDir(run)
        run_dir.prepare(resume=False, overwrite=False)
        trio.run(lambda: run_eval(config, run_dir, env=KuhnPoker(), progress=False, report=False))
        turns, total, without = record_bytes(run / "episodes.jsonl")
        groups = run_groups(run)
        old = stripped(run_groups(run))
    episodes = [e for g in groups for e in g.episodes]
    old_episodes = [e for g in old for e in g.episodes]
    rows = sum(1 for _ in sample_rows(groups))
    size = write_rows(groups, ROW_COLUMNS)
    size_less = write_rows(old, OLD_COLUMNS)
    rec_with, rec_without = best_pair(
        lambda: write_records(episodes), lambda: write_records(old_episodes), args.repeat
    )
    exp_with, exp_without = best_pair(
        lambda: write_rows(groups, ROW_COLUMNS), lambda: write_rows(old, OLD_COLUMNS), args.repeat
    )
    print(f"{args.n} Kuhn episodes, built-in model, {turns} turns, {rows} samples")
    print(
        f"record: {total / turns:.0f} B a turn, of which the new turn keys "
        f"{(total - without) / turns:.0f} B ({100 * (total - without) / total:.1f}%); "
        f"writing it {1e6 * rec_with / turns:.1f} us a turn with them, "
        f"{1e6 * rec_without / turns:.1f} without: ratio {rec_with / rec_without:.3f}"
    )
    print(
        f"export: JSONL {size / rows:.0f} B a row, of which the new columns "
        f"{(size - size_less) / rows:.0f} B ({100 * (size - size_less) / size:.1f}%); "
        f"merging and writing {1e6 * exp_with / rows:.1f} us a row with them, "
        f"{1e6 * exp_without / rows:.1f} without: ratio {exp_with / exp_without:.3f}"
    )


if __name__ == "__main__":
    main()
