"""Scaling curve (issue 6, target 5): Kuhn self-play through ``run_eval`` on the
in-process built-in model, at c = 1, 4, 16, 64, 256, 1024, 4096 and model latency 0
and 50 ms.

Per point: episodes/s (episodes / wall time of ``run_eval``), p50 and p99 episode
latency (each episode's ``timing.wall_s`` in ``episodes.jsonl``), engine CPU per model
call (process CPU / calls), the share of wall time the process was busy on the CPU and
the share it waited for a CPU held by other processes (a shared machine), and, with a
latency, the ideal: ``c / (calls per episode x L)`` episodes/s in steady state, and
"% of ideal" = the makespan of the zero-cost schedule of the same episodes (``c``
slots, FIFO, every call exactly ``L``) over the measured wall time, so ramp-up and tail
do not count against the engine. At latency 0 there is no ideal: the run is CPU-bound
and episodes/s is the engine's own ceiling.

``-n`` per point is chosen so each point takes about ``--seconds`` (and is at least
3 x c): a pilot run measures the CPU-bound episode rate ``R``; a point's expected rate
is min(R, c / (calls per episode x L)).

Writes ``benchmarks/results/curve.md`` (the table), ``curve.json`` and ``curve.png``
(matplotlib, ``pip install -e .[bench]``) and prints the table. Numbers on a shared
machine are noisy; ``--repeats`` takes the median episodes/s of several runs per point.

Run: ``python benchmarks/bench_curve.py`` (about 2 minutes); quick check:
``python benchmarks/bench_curve.py --c-values 1,16,256 --seconds 1``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import trio

from taketurns import RunDir, load_eval_config, run_eval
from taketurns._config.registry import envs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import ideal_makespan, run_delay_s  # a sibling script, not a package

RESULTS = Path(__file__).resolve().parent / "results"


def run_point(n: int, c: int, latency_ms: float) -> dict[str, Any]:
    """One eval of ``n`` Kuhn episodes at concurrency ``c``."""
    model = "builtin/bracket" + (f"?latency_ms={latency_ms:g}" if latency_ms else "")
    data = {"env_id": "kuhn-poker", "num_tasks": n, "concurrency": c, "model": model}
    config = load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)
    gc.collect()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDir(tmp)
        wall, cpu, delay = time.perf_counter(), time.process_time(), run_delay_s()
        trio.run(lambda: run_eval(config, run_dir, progress=False, report=False))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        delay = run_delay_s() - delay
        episodes = [orjson.loads(line) for line in run_dir.episodes_path.open("rb")]
    episodes.sort(key=lambda e: e["task"]["idx"])
    lat = sorted(e["timing"]["wall_s"] for e in episodes)
    counts = [sum(len(t["turns"]) for t in e["traces"]) for e in episodes]
    calls = sum(counts)
    latency = latency_ms / 1000
    point = {
        "c": c,
        "latency_ms": latency_ms,
        "n": n,
        "wall_s": wall,
        "episodes_per_s": n / wall,
        "calls_per_episode": calls / n,
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        "cpu_us_per_call": cpu / calls * 1e6,
        "cpu_util": cpu / wall,
        "cpu_wait_share": delay / wall,
        "failed": sum(1 for e in episodes if not e["ok"]),
    }
    if latency:
        point["ideal_episodes_per_s"] = c / (point["calls_per_episode"] * latency)
        point["vs_ideal"] = ideal_makespan(counts, c, latency) / wall
    return point


def size_for(c: int, latency_ms: float, cpu_rate: float, k: float, args: Any) -> int:
    rate = cpu_rate if not latency_ms else min(cpu_rate, c / (k * latency_ms / 1000))
    return max(3 * c, 20, min(args.max_n, round(rate * args.seconds)))


def table(points: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| latency | c | episodes | episodes/s | ideal episodes/s | % of ideal | "
        "p50 ms | p99 ms | CPU us/call | CPU busy | CPU taken by others |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        ideal = f"{p['ideal_episodes_per_s']:.0f}" if "ideal_episodes_per_s" in p else "-"
        share = f"{p['vs_ideal']:.0%}" if "vs_ideal" in p else "-"
        lines.append(
            f"| {p['latency_ms']:g} ms | {p['c']} | {p['n']} | {p['episodes_per_s']:.0f} | "
            f"{ideal} | {share} | {p['p50_ms']:.1f} | {p['p99_ms']:.1f} | "
            f"{p['cpu_us_per_call']:.0f} | {p['cpu_util']:.0%} | {p['cpu_wait_share']:.0%} |"
        )
    return lines


def plot(points: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for latency in sorted({p["latency_ms"] for p in points}):
        row = [p for p in points if p["latency_ms"] == latency]
        cs = [p["c"] for p in row]
        label = f"latency {latency:g} ms"
        (line,) = rate_ax.plot(cs, [p["episodes_per_s"] for p in row], "o-", label=label)
        if latency:
            rate_ax.plot(
                cs,
                [p["ideal_episodes_per_s"] for p in row],
                "--",
                color=line.get_color(),
                alpha=0.6,
                label=f"ideal c/(calls x L), {latency:g} ms",
            )
        lat_ax.plot(
            cs, [p["p50_ms"] for p in row], "o-", color=line.get_color(), label=f"p50, {label}"
        )
        lat_ax.plot(
            cs, [p["p99_ms"] for p in row], "s:", color=line.get_color(), label=f"p99, {label}"
        )
    rate_ax.set(xscale="log", yscale="log", xlabel="concurrent episodes (c)", ylabel="episodes / s")
    rate_ax.set_title("Kuhn self-play, in-process built-in model")
    lat_ax.set(xscale="log", yscale="log", xlabel="concurrent episodes (c)", ylabel="ms")
    lat_ax.set_title("episode latency")
    for ax in (rate_ax, lat_ax):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--c-values", default="1,4,16,64,256,1024,4096")
    parser.add_argument("--latencies-ms", default="0,50")
    parser.add_argument("--seconds", type=float, default=3.0, help="target time per point")
    parser.add_argument("--max-n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per point (median)")
    args = parser.parse_args()
    c_values = [int(v) for v in args.c_values.split(",")]
    latencies = [float(v) for v in args.latencies_ms.split(",")]

    run_point(100, 16, 0)  # warm-up: imports, caches
    pilot = run_point(1000, 16, 0)
    cpu_rate, k = pilot["episodes_per_s"], pilot["calls_per_episode"]
    points = []
    for latency in latencies:
        for c in c_values:
            n = size_for(c, latency, cpu_rate, k, args)
            runs = [run_point(n, c, latency) for _ in range(args.repeats)]
            point = sorted(runs, key=lambda p: p["episodes_per_s"])[len(runs) // 2]
            point["episodes_per_s_runs"] = [p["episodes_per_s"] for p in runs]
            points.append(point)
            print(
                f"  latency {latency:g} ms, c {c}: n {n}, {point['episodes_per_s']:.0f} "
                f"episodes/s, p99 {point['p99_ms']:.0f} ms",
                file=sys.stderr,
                flush=True,
            )
    lines = table(points)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    note = (
        f"{stamp}, load average {os.getloadavg()[0]:.1f} at the end; pilot CPU-bound rate "
        f"{cpu_rate:.0f} episodes/s; command: `python benchmarks/bench_curve.py "
        f"{' '.join(sys.argv[1:])}`".rstrip()
    )
    print("\n".join(lines))
    print(note)
    failed = sum(p["failed"] for p in points)
    if failed:
        print(f"WARNING: {failed} episodes failed")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "curve.md").write_text(
        "# bench_curve: Kuhn self-play, in-process built-in model\n\n"
        + "\n".join(lines)
        + f"\n\n{note}\n\n![curve](curve.png)\n"
    )
    (RESULTS / "curve.json").write_text(json.dumps(points, indent=2) + "\n")
    plot(points, RESULTS / "curve.png")


if __name__ == "__main__":
    main()
