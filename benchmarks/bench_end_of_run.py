"""The end of a big run: ``summary.json`` and ``report.html`` of 500,000 Kuhn episodes
(issue 42 target: under 10 s and 300 MB).

The run directory is synthesized: a real eval of ``--seed-n`` episodes, its lines
repeated with fresh task indices up to ``--size`` (``bench_storage.grow``; writing
500,000 episodes through the engine takes minutes, and what is measured here is only
what comes after them). A child process then does what the eval does once its last
episode is written, each step timed apart: the summary from the run's running
statistics (``Summarizer.result``, its bootstrap intervals included, then
``write_summary``) and the report (``ReportFeed.write`` with the env the eval ran:
the page, its scan and the env's own figure drawn from what it was fed). Both are
fed every record first, as an eval feeds them each episode as it writes it: that
part is the run's, timed apart and printed as CPU per episode. Peak RSS is the
child's ``ru_maxrss`` (the feed included).

Run: ``python benchmarks/bench_end_of_run.py [--size 500000] [--seed-n 2000]``
(about 4 GB of scratch space in ``--dir``, default a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from taketurns import RunDir, load_eval_config, run_eval
from taketurns.env import env_registry

sys.path.insert(0, str(Path(__file__).parent))
from bench_storage import grow

_CHILD = """
import json, resource, sys, time, tomllib
from pathlib import Path
from taketurns import RunDir, load_eval_config
from taketurns._eval.plan import make_env
from taketurns._output.records import read_episodes
from taketurns._output.summary import Summarizer
from taketurns._report.feed import ReportFeed
from taketurns.env import env_registry

path = Path(sys.argv[1])
run_dir = RunDir(path)
config = tomllib.loads((path / "config.toml").read_text())
config.pop("output_dir", None)
env = make_env(load_eval_config(env_registry.get(config["env_id"]).config_class, file_data=config))
finished = Summarizer(rollouts=1)
report = ReportFeed(path, env=env, rollouts=1)
clock = time.process_time
stats = fed = 0.0
loop = clock()
for raw in read_episodes(path / "episodes.jsonl"):
    t0 = clock()
    finished.add(raw)
    t1 = clock()
    report.add(raw)
    t2 = clock()
    stats += t1 - t0
    fed += t2 - t1
parsed = clock() - loop - stats - fed
start, cpu = time.perf_counter(), time.process_time()
summary = finished.result(wall_s=0.0)
run_dir.write_summary(summary)
summary_s, summary_cpu = time.perf_counter() - start, time.process_time() - cpu
start, cpu = time.perf_counter(), time.process_time()
report.write()
report_s, report_cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({
    "episodes": summary["episodes"], "stats_cpu": stats, "fed_cpu": fed, "parse_cpu": parsed,
    "summary_s": summary_s, "summary_cpu": summary_cpu,
    "report_s": report_s, "report_cpu": report_cpu,
    "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def seed_run(out: Path, n: int) -> None:
    config = load_eval_config(
        env_registry.get("kuhn-poker").config_class,
        file_data={"env_id": "kuhn-poker", "num_tasks": n},
    )
    trio.run(lambda: run_eval(config, RunDir(out), progress=False, report=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--seed-n", type=int, default=2000)
    parser.add_argument("--dir", default=None, help="scratch directory (about 4 GB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        seed, big = Path(tmp) / "seed", Path(tmp) / "big"
        seed_run(seed, args.seed_n)
        start = time.perf_counter()
        size = grow(seed, big, args.size)
        made = time.perf_counter() - start
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(big)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        r = json.loads(done.stdout.strip().splitlines()[-1])
    total = r["summary_s"] + r["report_s"]
    print(
        f"{r['episodes']:,} episodes, episodes.jsonl {size / 2**20:,.0f} MiB (made in {made:.0f} s)"
    )
    per = 1e6 / max(r["episodes"], 1)
    print("  during the run (an eval feeds each record as it writes it), CPU:")
    for label, key in (
        ("the statistics (Summarizer.add)", "stats_cpu"),
        ("the report (ReportFeed.add)", "fed_cpu"),
        ("parsing each line (parse_record; read here from the file)", "parse_cpu"),
    ):
        print(f"    {label}: {r[key]:.1f} s, {r[key] * per:.1f} us/episode")
    print("  after the last episode:")
    for label, key in (("summary (result + write)", "summary"), ("report (write)", "report")):
        print(f"    {label}: {r[f'{key}_s']:.2f} s wall, {r[f'{key}_cpu']:.2f} s CPU")
    print(f"  end of run: {total:.1f} s (target < 10 s); peak RSS {r['peak_mib']:.0f} MiB (< 300)")


if __name__ == "__main__":
    main()
