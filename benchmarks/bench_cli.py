"""The whole CLI per turn (issue 42 target: <= 150 µs): ``taketurns eval kuhn-poker -n
SMALL`` and ``-n LARGE`` at ``-c 256``, the slope per model call between the two (start-up
cancels out; the end of the run, summary and report, is included), as wall time and as
the CLI process's CPU (``RUSAGE_CHILDREN``: on a shared machine the wall time is the
load's, the CPU much less so).

``--trees`` compares checkouts in one run, alternated round by round (the machine's
drift hits each alike): each a virtualenv directory whose ``bin/taketurns`` runs that
checkout (``pip install --no-deps -e CHECKOUT`` into it); default, the ``taketurns``
beside this Python.

Run: ``python benchmarks/bench_cli.py [--small 200 --large 4200 --rounds 2 --trees V1 V2]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(taketurns: str, n: int) -> tuple[float, float, int]:
    """(wall s, CPU s, model calls) of one ``taketurns eval``."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        argv = ["eval", "kuhn-poker", "-n", str(n), "-c", "256", "--no-progress", "-o", tmp]
        subprocess.run([taketurns, *argv], check=True, capture_output=True)
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    calls = round(sum(a["turns_mean"] * a["traces"] for a in summary["agents"].values()))
    return wall, cpu, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=4200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trees", nargs="*", default=[str(Path(sys.executable).parent.parent)])
    args = parser.parse_args()
    for r in range(1, args.rounds + 1):
        for tree in args.trees:
            taketurns = str(Path(tree) / "bin" / "taketurns")
            w1, c1, t1 = run(taketurns, args.small)
            w2, c2, t2 = run(taketurns, args.large)
            load = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"round {r} {tree}: wall {(w2 - w1) / (t2 - t1) * 1e6:.0f} us/turn, "
                f"cpu {(c2 - c1) / (t2 - t1) * 1e6:.0f} us/turn (walls {w1:.1f}/{w2:.1f} s, "
                f"{t1}/{t2} turns, load {load})",
                flush=True,
            )


if __name__ == "__main__":
    main()
