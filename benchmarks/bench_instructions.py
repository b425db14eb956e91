"""Engine cost per model call in CPU instructions, not seconds: Kuhn self-play on the
built-in model (latency 0) under ``valgrind --tool=callgrind``, the slope between two run
sizes (start-up cancels out). Instruction counts do not move with the machine's load,
so two versions of the code compare on a shared machine, where the µs figures of
``bench_exchange.py`` move by ±20%. Includes the built-in model's own compute.

Run: ``python benchmarks/bench_instructions.py [--small 100 --large 600 -c 32 --repeats 2]``
(about a minute of CPU per run; valgrind from Debian's package). To compare with
another checkout, run its copy of this script (or point ``PYTHONPATH`` at it).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

_CHILD = """
import sys, tempfile, trio
from taketurns import RunDir, load_eval_config, run_eval
from taketurns.env import env_registry
from taketurns._gc import tuned_gc
n, c = int(sys.argv[1]), int(sys.argv[2])
config = load_eval_config(env_registry.get("kuhn-poker").config_class,
    file_data={"env_id": "kuhn-poker", "num_tasks": n, "concurrency": c})
with tempfile.TemporaryDirectory() as tmp, tuned_gc():
    run = trio.run(lambda: run_eval(config, RunDir(tmp), progress=False, report=False))
agents = run.summary["agents"].values()
print("calls", round(sum(a["turns_mean"] * a["traces"] for a in agents)))
"""


def _count(num: int, concurrency: int) -> tuple[int, int]:
    """(instructions, model calls) of one eval of ``num`` episodes."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*valgrind, sys.executable, "-c", _CHILD, str(num), str(concurrency)],
        capture_output=True,
        text=True,
        check=True,
    )
    instructions = re.search(r"Collected : (\d+)", done.stderr)
    calls = re.search(r"calls (\d+)", done.stdout)
    if instructions is None or calls is None:
        raise RuntimeError(f"no count in valgrind's output: {done.stderr[-2000:]}")
    return int(instructions.group(1)), int(calls.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=600)
    parser.add_argument("-c", "--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    slopes = []
    for _ in range(args.repeats):
        small, calls_small = _count(args.small, args.concurrency)
        large, calls_large = _count(args.large, args.concurrency)
        slopes.append((large - small) / (calls_large - calls_small))
    print(
        f"c={args.concurrency}: {statistics.median(slopes) / 1000:.1f}k instructions per "
        f"model call (runs: {', '.join(f'{s / 1000:.1f}k' for s in slopes)})"
    )


if __name__ == "__main__":
    main()
