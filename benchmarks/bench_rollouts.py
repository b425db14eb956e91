"""Samples/s for a trainer: the streaming API beside the CLI path, Kuhn self-play on
the built-in model at latency 0 (so the numbers are the engine's own cost).

- ``stream``: ``open_rollouts`` in this trio loop, ``groups(tasks, per_task=k)``, each
  group's samples built (token ids, mask, advantages) as the consumer takes it;
- ``stream, no tokens``: the same without asking for token ids (no samples: the cost
  of the token data);
- ``eval + export``: ``run_eval`` to a run directory (asking for tokens), then
  ``export_samples`` to JSON Lines, as ``taketurns eval`` + ``taketurns export`` do.

Run: ``python benchmarks/bench_rollouts.py [--tasks 256] [--per-task 4] [-c 32]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

from taketurns import EvalConfig, RunDir, Sampling, open_rollouts, run_eval
from taketurns.envs.kuhn import KuhnPoker
from taketurns.train import export_samples


async def stream(tasks: int, per_task: int, concurrency: int, tokens: bool) -> tuple[int, int]:
    """(episodes, samples) streamed."""
    env = KuhnPoker()
    config = EvalConfig(env_id="kuhn-poker", concurrency=concurrency)
    episodes = samples = 0
    async with open_rollouts(env, config, tokens=tokens, max_waiting=4) as source:
        async for group in source.groups(env.tasks(tasks), per_task=per_task):
            episodes += len(group.episodes)
            samples += len(group.samples())
    return episodes, samples


def eval_and_export(tasks: int, per_task: int, concurrency: int) -> tuple[int, int]:
    config = EvalConfig(
        env_id="kuhn-poker",
        num_tasks=tasks,
        rollouts=per_task,
        concurrency=concurrency,
        sampling=Sampling(logprobs=True),
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDir(Path(tmp) / "run")
        run_dir.prepare(resume=False, overwrite=False)
        trio.run(lambda: run_eval(config, run_dir, progress=False, report=False))
        done = export_samples(run_dir.path)
    return done.episodes, done.rows


def measure(label: str, fn: object, *args: object) -> str:
    start, cpu = time.perf_counter(), time.process_time()
    episodes, samples = fn(*args)  # type: ignore[operator]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return (
        f"{label:<20} {episodes:>8} {samples:>8} {wall:>7.2f} {cpu:>7.2f} "
        f"{episodes / wall:>10.0f} {samples / wall:>10.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--per-task", type=int, default=4)
    parser.add_argument("-c", "--concurrency", type=int, default=32)
    args = parser.parse_args()
    n, k, c = args.tasks, args.per_task, args.concurrency
    print(f"kuhn-poker, builtin/bracket at latency 0: {n} tasks x {k} rollouts, c={c}")
    print(
        f"{'path':<20} {'episodes':>8} {'samples':>8} {'wall s':>7} {'cpu s':>7} "
        f"{'episodes/s':>10} {'samples/s':>10}"
    )
    print(measure("stream", lambda *a: trio.run(stream, *a, True), n, k, c))
    print(measure("stream, no tokens", lambda *a: trio.run(stream, *a, False), n, k, c))
    print(measure("eval + export", eval_and_export, n, k, c))


if __name__ == "__main__":
    main()
