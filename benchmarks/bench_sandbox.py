"""What the rollout sandbox costs per segment (issue 22, item 7): bubblewrap and the
supervisor at process start, the socket bridge on every model call, beside
``sandbox = "none"``, in one run (one interception server on the built-in model;
the two settings alternate, so drift of a loaded machine hits both alike).

(1) start: ``true`` run by the process owner, sandboxed and not, beside a bare
    ``trio.run_process`` (what a segment paid before the owner existed);
(2) bridge: one HTTP request to the interception server from inside the process
    (``GET /health``, 20 per process, median), through the bridge or straight to the
    loopback port;
(3) ``program``: a whole segment of the reference program (``agent.run`` of a
    one-turn task: files, the program's Python start-up, one model call);
(4) ``codex`` (skipped when it is not installed): a whole ``codex exec`` segment.

Medians of wall time. Run: ``python benchmarks/bench_sandbox.py [--rounds N]``;
the table goes to stdout and ``benchmarks/results/sandbox.txt``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import trio

from taketurns import Agent, AgentConfig, Task
from taketurns._exchange.agent import make_harness
from taketurns.harness import Sandbox, run_owned
from taketurns.http import InterceptionServer, open_interception_server

RESULTS = Path(__file__).parent / "results" / "sandbox.txt"
SETTINGS = ("none", "bwrap")
PING = """\
import os, statistics, sys, time, urllib.request
url = sys.argv[1]
times = []
for _ in range(20):
    start = time.perf_counter()
    urllib.request.urlopen(url, timeout=10).read()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


async def alternate(rounds: int, step: Callable[[str], Awaitable[float]]) -> dict[str, list[float]]:
    """``step(setting)`` for each setting in turn, ``rounds`` times (after one warm-up
    round): the seconds each took."""
    out: dict[str, list[float]] = {s: [] for s in SETTINGS}
    for n in range(rounds + 1):
        for setting in SETTINGS if n % 2 else reversed(SETTINGS):
            took = await step(setting)
            if n:
                out[setting].append(took)
    return out


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def bench_start(server: InterceptionServer, rounds: int) -> dict[str, list[float]]:
    scratch = Path(tempfile.mkdtemp(prefix="taketurns-"))
    port = urlsplit(server.url).port
    env = {"PATH": "/usr/bin:/bin"}

    async def step(setting: str) -> float:
        return await timed(
            lambda: run_owned(
                ["true"],
                cwd=scratch,
                env=env,
                sandbox=Sandbox(setting),
                scratch=scratch,
                model_socket=server.unix_path,
                model_port=port,
            )
        )

    out = await alternate(rounds, step)
    bare = []
    for _ in range(rounds):
        start = time.perf_counter()
        await trio.run_process(["true"], capture_stdout=True)
        bare.append(time.perf_counter() - start)
    out["bare run_process"] = bare
    shutil.rmtree(scratch)
    return out


async def bench_bridge(server: InterceptionServer, rounds: int) -> dict[str, list[float]]:
    scratch = Path(tempfile.mkdtemp(prefix="taketurns-"))
    port = urlsplit(server.url).port

    async def step(setting: str) -> float:
        done = await run_owned(
            [sys.executable, "-c", PING, f"{server.url}/health"],
            cwd=scratch,
            env={"PATH": "/usr/bin:/bin"},
            sandbox=Sandbox(setting),
            scratch=scratch,
            model_socket=server.unix_path,
            model_port=port,
        )
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    out = await alternate(rounds, step)
    shutil.rmtree(scratch)
    return out


async def bench_segments(
    server: InterceptionServer, harness: str, rounds: int
) -> dict[str, list[float]]:
    agents = {
        setting: Agent(
            "agent",
            AgentConfig(model="builtin/echo", harness=harness, sandbox=setting),
            harness=make_harness(harness, {}, field="env.agent"),
            services={"interception": server},
        )
        for setting in SETTINGS
    }

    async def step(setting: str) -> float:
        start = time.perf_counter()
        trace = await agents[setting].run(Task(0, prompt="say hello"))
        took = time.perf_counter() - start
        assert trace.errors == [], trace.errors
        return took

    return await alternate(rounds, step)


def table(title: str, results: dict[str, list[float]], unit: str = "ms") -> list[str]:
    scale = 1000.0 if unit == "ms" else 1.0
    medians = {k: statistics.median(v) * scale for k, v in results.items()}
    lines = [f"{title}  (median of {len(next(iter(results.values())))}, {unit})"]
    for key, value in medians.items():
        lines.append(f"  {key:<18} {value:10.2f}")
    cost = medians["bwrap"] - medians["none"]
    lines.append(f"  {'bwrap - none':<18} {cost:10.2f}  ({cost / medians['none']:+.1%})")
    return lines


async def main(rounds: int) -> None:
    lines = [
        "rollout sandbox cost per segment (benchmarks/bench_sandbox.py), "
        f"{time.strftime('%Y-%m-%d')}, {rounds} rounds, settings alternated",
        "",
    ]
    async with open_interception_server(graceful_timeout=0.1) as server:
        started = await bench_start(server, rounds)
        lines += table("(1) process start: `true` through the owner", started)
        lines += [""]
        lines += table(
            "(2) one HTTP request to the endpoint (bridged / direct)",
            await bench_bridge(server, max(3, rounds // 4)),
        )
        lines += [""]
        lines += table("(3) program segment", await bench_segments(server, "program", rounds))
        if shutil.which("codex"):
            lines += [""]
            codex_rounds = max(3, rounds // 4)
            lines += table("(4) codex segment", await bench_segments(server, "codex", codex_rounds))
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    trio.run(main, parser.parse_args().rounds)
