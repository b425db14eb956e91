"""Kuhn self-play on the built-in model at latency 0: throughput and engine cost.

Prints episodes/s, turns/s and microseconds of CPU time per model call at c = 1, 16,
32 (the eval's default) and 256: the cost is the slope between two run sizes
(start-up cancels out), of the whole eval (episodes, JSONL writing, progress
accounting, the end of the run) and of the episodes alone: without the built-in
model's own compute (its policy, timed in the same run) and without the end of the
run, the engine's cost per call. The report's work is printed apart, in its two
parts: what the report is fed while the run goes on (each record as it is written:
``_Writer.report``, its CPU µs per episode) and the end of the run, after the last
episode (``summary.json`` and ``report.html``, timed around the runner's ``_finish``
and ``_write_report``: its CPU µs per episode, the slope, and its fixed part, ms: the
same end for an empty run). Also
the memory of one open idle session (10,000 sessions, each held by its own task, as
in an eval).
Run: ``python benchmarks/bench_exchange.py``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import tracemalloc
from typing import Any

import trio

import taketurns._runner as runner
from taketurns import Agent, AgentConfig, RunDir, Task, load_eval_config, run_eval
from taketurns._gc import tuned_gc
from taketurns.env import ModelRequest, ModelResponse, env_registry
from taketurns.testing import BuiltinModel

_MODEL_CPU = [0.0]
_respond = BuiltinModel.respond


def _timed_respond(self: BuiltinModel, request: ModelRequest) -> ModelResponse:
    # thread_time, not perf_counter: respond is pure computation (never blocks), but on
    # a loaded machine its wall time includes the time this process waited for a CPU
    # (which made the engine's share come out negative); the probe costs ~0.3 us
    start = time.thread_time()
    try:
        return _respond(self, request)
    finally:
        _MODEL_CPU[0] += time.thread_time() - start


BuiltinModel.respond = _timed_respond  # type: ignore[method-assign]  # benchmark probe

_END_CPU = [0.0]
_FEED_CPU = [0.0]


def _timed(fn: Any, into: list[float]) -> Any:
    """``fn`` (a part of the report's work), its CPU time added to ``into``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into[0] += time.process_time() - start

    return timed


# benchmark probes: the summary and the report at the end, the report fed during the run
runner._finish = _timed(runner._finish, _END_CPU)
runner._write_report = _timed(runner._write_report, _END_CPU)
runner._Writer.report = _timed(runner._Writer.report, _FEED_CPU)  # type: ignore[method-assign]


def _run(num: int, concurrency: int) -> tuple[float, float, float, float, float, int]:
    """(wall s, cpu s, the model's own cpu s, the end of the run's cpu s, the
    report's feed's cpu s, model calls) for one eval, its summary and report written
    as ``taketurns eval`` does."""
    config = load_eval_config(
        env_registry.get("kuhn-poker").config_class,
        file_data={"env_id": "kuhn-poker", "num_tasks": num, "concurrency": concurrency},
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDir(tmp)
        _MODEL_CPU[0] = _END_CPU[0] = _FEED_CPU[0] = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        with tuned_gc():  # as `taketurns eval` runs it (the CLI tunes its own process)
            result = trio.run(lambda: run_eval(config, run_dir, progress=False, report=True))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    agents = result.summary["agents"].values()
    calls = round(sum(a["turns_mean"] * a["traces"] for a in agents))
    return wall, cpu, _MODEL_CPU[0], _END_CPU[0], _FEED_CPU[0], calls


def throughput(concurrency: int, small: int, large: int, repeats: int) -> dict[str, float]:
    totals, engines, ends, fixed, rates, turn_rates, feeds = [], [], [], [], [], [], []
    for _ in range(repeats):
        _, c1, m1, e1, f1, t1 = _run(small, concurrency)
        w2, c2, m2, e2, f2, t2 = _run(large, concurrency)
        totals.append((c2 - c1) / (t2 - t1) * 1e6)
        engines.append(((c2 - m2 - e2 - f2) - (c1 - m1 - e1 - f1)) / (t2 - t1) * 1e6)
        feeds.append((f2 - f1) / (large - small) * 1e6)
        ends.append((e2 - e1) / (large - small) * 1e6)
        fixed.append((e1 - (e2 - e1) / (large - small) * small) * 1e3)
        rates.append(large / w2)  # the whole eval's rate, the end of the run included
        turn_rates.append(t2 / w2)
    return {
        "episodes_per_s": statistics.median(rates),
        "turns_per_s": statistics.median(turn_rates),
        "us_per_call": statistics.median(totals),
        "engine_us_per_call": statistics.median(engines),
        "feed_us_per_episode": statistics.median(feeds),
        "end_us_per_episode": statistics.median(ends),
        "end_fixed_ms": statistics.median(fixed),
    }


async def _idle_sessions(count: int) -> float:
    agent = Agent("a", AgentConfig(model="builtin/echo"))
    release = trio.Event()
    opened = trio.Semaphore(0)

    async def hold(i: int) -> None:
        async with agent.chat(Task(i)) as session:
            await session.turn("hello")
            opened.release()
            await release.wait()

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(hold, i)
        for _ in range(count):
            await opened.acquire()
        gc.collect()
        during = tracemalloc.get_traced_memory()[0]
        release.set()
    tracemalloc.stop()
    return (during - before) / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=600)
    parser.add_argument("--large", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 16, 32, 256])
    args = parser.parse_args()
    print(
        f"{'c':>5} {'episodes/s':>11} {'turns/s':>9} {'us/call all-in':>15} "
        f"{'engine us/call':>15} {'report fed us/episode':>22} "
        f"{'end-of-run us/episode':>22} {'+ fixed ms':>10}"
    )
    for c in args.concurrency:  # 32: the eval's default concurrency
        r = throughput(c, args.small, args.large, args.repeats)
        print(
            f"{c:>5} {r['episodes_per_s']:>11.0f} {r['turns_per_s']:>9.0f} "
            f"{r['us_per_call']:>15.1f} {r['engine_us_per_call']:>15.1f} "
            f"{r['feed_us_per_episode']:>22.1f} "
            f"{r['end_us_per_episode']:>22.1f} {r['end_fixed_ms']:>10.1f}"
        )
    per_session = trio.run(_idle_sessions, args.sessions)
    print(
        f"memory per open idle session ({args.sessions} sessions, each in its task): "
        f"{per_session / 1024:.1f} KiB"
    )


if __name__ == "__main__":
    main()
