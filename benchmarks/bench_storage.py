"""Memory and storage (issue 14): what a run directory costs as runs get long.

(1) ``taketurns report DIR`` peak RSS at 50,000 and 500,000 Kuhn episodes (target:
    under 300 MB at 500,000). The run directory is made by a real eval of ``--seed-n``
    episodes whose lines are then repeated with fresh task indices up to the size
    (writing 500,000 episodes through the engine takes minutes; reading them is what
    is measured). Each measurement is a fresh process (``ru_maxrss``).
(2) ``taketurns eval`` driver peak RSS against ``-n`` (Kuhn, built-in model): the
    driver keeps running statistics, not records, so it should not grow with ``-n``.
(3) ``episodes.jsonl`` bytes per episode against the conversation's length (a chat of
    n turns, 1,000 characters per user message): record format 3 stores each turn's
    new messages only; the "full requests" column is what format 1 stored.

Run: ``python benchmarks/bench_storage.py [--sizes 50000,500000] [--eval-sizes 2000,20000]``
(a few minutes at the default sizes). Results: ``benchmarks/results/storage.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
import trio

from taketurns import Agent, AgentConfig, Task
from taketurns._eval.episode import Episode
from taketurns._output.records import episode_line
from taketurns.harness import to_wire

RESULTS = Path(__file__).parent / "results" / "storage.md"

_PEAK = (
    "import resource, sys\n"
    "from taketurns._cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)\n"
    "sys.exit(code)\n"
)


def peak_mb(argv: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall seconds of ``taketurns ARGV`` in a fresh process."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *argv], capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"taketurns {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    kb = next(int(x.split()[1]) for x in done.stdout.splitlines() if x.startswith("PEAK_KB"))
    return kb / 1024, wall


def grow(seed_dir: Path, out: Path, size: int) -> int:
    """``out/episodes.jsonl`` with ``size`` episodes: the seed run's lines repeated,
    each copy with fresh task indices (and ids). Returns its size in bytes."""
    out.mkdir(parents=True, exist_ok=True)
    seed = [orjson.loads(x) for x in (seed_dir / "episodes.jsonl").read_bytes().splitlines()]
    (out / "config.toml").write_bytes((seed_dir / "config.toml").read_bytes())
    with (out / "episodes.jsonl").open("wb") as f:
        for i in range(size):
            e = seed[i % len(seed)]
            e["task"]["idx"] = i
            e["id"] = f"kuhn-poker/{i}/0"
            for t in e["traces"]:
                t["episode"]["task_idx"], t["episode"]["id"] = i, e["id"]
            f.write(orjson.dumps(e) + b"\n")
    return (out / "episodes.jsonl").stat().st_size


def report_memory(sizes: list[int], seed_n: int) -> list[str]:
    rows = ["| episodes | episodes.jsonl | report peak RSS | wall |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        seed = Path(tmp) / "seed"
        peak_mb(["eval", "kuhn-poker", "-n", str(seed_n), "-o", str(seed), "--no-progress"])
        for size in sizes:
            out = Path(tmp) / f"n{size}"
            nbytes = grow(seed, out, size)
            mb, wall = peak_mb(["report", str(out)])
            rows.append(f"| {size:,} | {nbytes / 2**20:,.0f} MiB | {mb:,.0f} MiB | {wall:.1f} s |")
            print(rows[-1], flush=True)
            for path in out.iterdir():
                path.unlink()
    return rows


def eval_memory(sizes: list[int]) -> list[str]:
    rows = ["| -n | eval peak RSS | wall |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            out = Path(tmp) / f"eval{n}"
            argv = ["eval", "kuhn-poker", "-n", str(n), "-o", str(out), "--no-progress"]
            mb, wall = peak_mb(argv)
            rows.append(f"| {n:,} | {mb:,.0f} MiB | {wall:.1f} s |")
            print(rows[-1], flush=True)
    return rows


async def _chat(turns: int) -> Episode:
    episode = Episode("chat/0/0", "chat", Task(0, system_prompt="Be brief."))
    agent = Agent("a", AgentConfig(model="builtin/echo"), on_close=episode.traces.append)
    async with agent.chat(episode.task) as session:
        for i in range(turns):
            await session.turn(f"{i:04d} " + "x" * 1000)
    return episode


def storage(turn_counts: list[int]) -> list[str]:
    rows = [
        "| turns | record (format 3) | full requests (format 1) | conversation alone |",
        "|---|---|---|---|",
    ]
    for n in turn_counts:
        episode = trio.run(_chat, n)
        record = episode_line(episode)
        full = orjson.loads(record)
        trace = episode.traces[0]
        for turn, stored in zip(trace.turns, full["traces"][0]["turns"], strict=True):
            stored.pop("request_prefix")
            stored["request"] = [to_wire(m) for m in turn.request]
        conversation = orjson.dumps([to_wire(m) for m in trace.messages])
        rows.append(
            f"| {n} | {len(record) / 1024:,.0f} KiB | {len(orjson.dumps(full)) / 1024:,.0f} KiB "
            f"| {len(conversation) / 1024:,.0f} KiB |"
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="50000,500000", help="report sizes (episodes)")
    parser.add_argument("--seed-n", type=int, default=2000, help="episodes actually run")
    parser.add_argument("--eval-sizes", default="2000,20000", help="eval -n values")
    parser.add_argument("--turns", default="5,10,20,30,60", help="conversation lengths")
    args = parser.parse_args()
    parts = ["# Memory and storage (`python benchmarks/bench_storage.py`)", ""]
    parts += ["## `taketurns report` peak RSS (Kuhn)", ""]
    parts += report_memory([int(x) for x in args.sizes.split(",")], args.seed_n)
    parts += ["", "## `taketurns eval` driver peak RSS against -n (Kuhn, built-in model)", ""]
    parts += eval_memory([int(x) for x in args.eval_sizes.split(",")])
    parts += ["", "## episodes.jsonl bytes per episode against conversation length", ""]
    parts += storage([int(x) for x in args.turns.split(",")])
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(parts) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
