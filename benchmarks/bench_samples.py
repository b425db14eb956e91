"""The cost of what makes a sample trustworthy (issue 37): each turn's ``sampling``,
``stop_token`` and ``retokenized`` in ``episodes.jsonl``, and the per-turn and
per-sample fields of every export row (``turn_finish_reasons``, ``turn_truncated``,
``turn_stop_tokens``, ``truncated``, ``sampling``, ``final_divergence``).

Kuhn self-play on the built-in model (token data asked for), ``run_eval`` to a run
directory, then:

- ``record``: bytes of ``episodes.jsonl``, and the bytes the three new turn keys take
  (the same records re-encoded without them), per turn;
- ``export``: CPU time of building every row (``sample_rows``: the samples merged,
  the new fields included), and the JSONL bytes per row with and without the new
  columns.

Run: ``python benchmarks/bench_samples.py [-n 2000]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import orjson
import trio

from taketurns import EvalConfig, RunDir, Sampling, run_eval
from taketurns._train.export import run_groups, sample_rows
from taketurns.envs.kuhn import KuhnPoker

TURN_KEYS = ("sampling", "stop_token", "retokenized")
ROW_KEYS = (
    "turn_finish_reasons",
    "turn_truncated",
    "turn_stop_tokens",
    "truncated",
    "sampling",
    "final_divergence",
)


def record(path: Path) -> tuple[int, int, int]:
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


def export(run: Path) -> tuple[int, float, int, int]:
    """(rows, CPU s building them, JSONL bytes, bytes without the new columns)."""
    groups = run_groups(run)
    start = time.process_time()
    rows = list(sample_rows(groups))
    full = time.process_time() - start
    size = sum(len(orjson.dumps(r)) + 1 for r in rows)
    size_less = sum(
        len(orjson.dumps({k: v for k, v in r.items() if k not in ROW_KEYS})) + 1 for r in rows
    )
    return len(rows), full, size, size_less


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000)
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
        turns, total, without = record(run / "episodes.jsonl")
        rows, full, size, size_less = export(run)
    print(f"{args.n} Kuhn episodes, built-in model, {turns} turns, {rows} samples")
    print(
        f"record: {total / turns:.0f} B a turn, of which the new turn keys "
        f"{(total - without) / turns:.0f} B ({100 * (total - without) / total:.1f}%)"
    )
    print(
        f"export rows: {1e6 * full / rows:.1f} us CPU a row; JSONL {size / rows:.0f} B a row, "
        f"of which the "
        f"new columns {(size - size_less) / rows:.0f} B ({100 * (size - size_less) / size:.1f}%)"
    )


if __name__ == "__main__":
    main()
