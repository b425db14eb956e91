"""Per-model-call cost of each path to the model, measured in one run.

(a) the in-process ``null`` harness on the built-in model (``agent.run``, no HTTP);
(b) the HTTP path alone: ``OpenAIClient.complete`` -> the built-in model server
    (``taketurns._http.server.serve``) over loopback;
(c) a bare httpx2 POST (+ JSON decode) to the same server;
(d) the ``program`` harness: ``agent.run`` spawning the reference program, which calls
    the model through the interception server;
(d') the ``program`` harness with ``persistent = true``: ``agent.run`` on a warm
    pooled reference program (``--serve``), which serves one rollout after another;
(e) for reference, the interception hop alone: a bare httpx2 POST to a rollout's
    endpoint on the interception server (the in-process built-in model behind it);
(f) throughput at ``--concurrency`` (32, the eval's default): a whole Kuhn eval over
    HTTP against ``taketurns serve`` (the mock, in its own process) beside a bare
    httpx2 loop of as many concurrent workers POSTing the eval's own request bodies
    to the same server, alternated ``--repeats`` times in this run; model calls per
    second of wall time (the eval's as the slope between two run sizes, so its
    start-up and end cancel out). The target: the eval >= 0.8 of the bare loop.

Calls are sequential (concurrency 1), so wall time is latency. CPU is this process
plus its finished children (the program's processes), so (d) includes the program's
own start-up; for (d') plus the CPU the pooled program used meanwhile (read from
/proc, as it is not finished). Each figure is the median of ``--repeats`` runs after
a warm-up.
Run: ``python benchmarks/bench_http.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx2
import trio

from taketurns import Agent, AgentConfig, Task, UserMessage
from taketurns._http.server import serve
from taketurns.env import ModelRequest
from taketurns.harness import Prompt, Rollout, ServedHarness
from taketurns.harnesses.program import ProgramHarness
from taketurns.http import OpenAIClient, open_interception_server
from taketurns.testing import BuiltinModel

MESSAGES = [{"role": "user", "content": "Pick one: [check] [bet]"}]


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pool_cpu_s(harness: ProgramHarness) -> float:
    """CPU seconds of the harness's pooled programs so far (live: from /proc)."""
    total = 0
    for program in harness.pool.programs if harness.pool is not None else ():
        with open(f"/proc/{program.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


async def measure(
    call: Callable[[int], Awaitable[None]],
    n: int,
    repeats: int,
    cpu_of: Callable[[], float] = cpu_s,
) -> tuple[float, float]:
    """(wall us, cpu us) per call: medians over ``repeats`` batches of ``n`` calls."""
    for i in range(max(2, n // 10)):  # warm-up: connections, imports, caches
        await call(i)
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), cpu_of()
        for i in range(n):
            await call(i)
        walls.append((time.perf_counter() - wall) / n * 1e6)
        cpus.append((cpu_of() - cpu) / n * 1e6)
    return statistics.median(walls), statistics.median(cpus)


class Register(ServedHarness):
    """Registers its rollout and yields: the benchmark then plays the program."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        self.endpoint(rollout)
        await trio.lowlevel.checkpoint()


async def run_all(args: argparse.Namespace) -> dict[str, tuple[float, float, int]]:
    results: dict[str, tuple[float, float, int]] = {}
    n_fast, n_http, n_proc, repeats = args.fast, args.http, args.programs, args.repeats

    null = Agent("a", AgentConfig(model="builtin/bracket"))

    async def in_process(i: int) -> None:
        await null.run(Task(i, prompt="Pick one: [check] [bet]"))

    results["(a) in-process null harness"] = (*await measure(in_process, n_fast, repeats), n_fast)

    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(serve, BuiltinModel("bracket"))
        request = ModelRequest("builtin/bracket", (UserMessage(MESSAGES[0]["content"]),))
        async with OpenAIClient(base_url, concurrency=4) as client:

            async def http_path(i: int) -> None:
                await client.complete(request)

            results["(b) OpenAIClient -> model server"] = (
                *await measure(http_path, n_http, repeats),
                n_http,
            )
        async with httpx2.AsyncClient(timeout=30) as http:
            body = {"model": "builtin/bracket", "messages": MESSAGES}
            url = f"{base_url}/chat/completions"

            async def bare(i: int) -> None:
                response = await http.post(url, json=body)
                response.json()

            results["(c) bare httpx2 -> model server"] = (
                *await measure(bare, n_http, repeats),
                n_http,
            )
        nursery.cancel_scope.cancel()

    async with open_interception_server(graceful_timeout=0.1) as server:
        services = {"interception": server}
        program = Agent(
            "p",
            AgentConfig(model="builtin/bracket", harness="program"),
            harness=ProgramHarness(),
            services=services,
        )

        async def program_harness(i: int) -> None:
            trace = await program.run(Task(i, prompt="Pick one: [check] [bet]"))
            assert not trace.errors, trace.errors

        results["(d) program harness (subprocess)"] = (
            *await measure(program_harness, n_proc, repeats),
            n_proc,
        )

        pooled_harness = ProgramHarness(persistent=True)
        pooled = Agent(
            "q",
            AgentConfig(model="builtin/bracket", harness="program"),
            harness=pooled_harness,
            services=services,
        )

        async def pooled_run(i: int) -> None:
            trace = await pooled.run(Task(i, prompt="Pick one: [check] [bet]"))
            assert not trace.errors, trace.errors

        try:
            results["(d') program harness, pooled"] = (
                *await measure(
                    pooled_run, n_http, repeats, lambda: cpu_s() + pool_cpu_s(pooled_harness)
                ),
                n_http,
            )
        finally:
            await pooled_harness.shutdown()

        served = Agent(
            "s", AgentConfig(model="builtin/bracket"), harness=Register(), services=services
        )
        async with (
            served.chat(Task(0, prompt="go")) as session,
            httpx2.AsyncClient(timeout=30) as http,
        ):
            await session.turn()
            endpoint = session.rollout.state["endpoint"]
            headers = {"Authorization": f"Bearer {endpoint.secret}"}
            url = f"{endpoint.base_url}/chat/completions"

            async def hop(i: int) -> None:
                response = await http.post(url, json={"messages": MESSAGES}, headers=headers)
                response.json()

            results["(e) bare httpx2 -> interception"] = (
                *await measure(hop, n_http, repeats),
                n_http,
            )
    return results


def throughput(args: argparse.Namespace) -> list[tuple[float, float]]:
    """(f): (eval calls/s, bare calls/s) per round, alternated in this run."""
    from bench_http_kuhn import BODIES, bare_cost, eval_cost, kuhn_bodies

    BODIES.extend(kuhn_bodies())
    rounds = []
    with subprocess.Popen(
        [sys.executable, "-m", "taketurns", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        endpoint = {"base_url": base_url, "model": "builtin/bracket"}
        try:
            for _ in range(args.repeats):
                w1, _, t1 = eval_cost(args.small, args.concurrency, endpoint)
                w2, _, t2 = eval_cost(args.large, args.concurrency, endpoint)
                bare_us, _ = trio.run(
                    bare_cost, f"{base_url}/chat/completions", t2 - t1, args.concurrency
                )
                rounds.append(((t2 - t1) / (w2 - w1), 1e6 / bare_us))
        finally:
            server.terminate()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", type=int, default=2000, help="calls per batch for (a)")
    parser.add_argument("--http", type=int, default=300, help="calls per batch, (b) (c) (d') (e)")
    parser.add_argument("--programs", type=int, default=15, help="calls per batch for (d)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="for (f)")
    parser.add_argument("--small", type=int, default=200, help="(f): the smaller eval")
    parser.add_argument("--large", type=int, default=1000, help="(f): the larger eval")
    parser.add_argument("--only-f", action="store_true", help="only (f), the throughput")
    args = parser.parse_args()
    if not args.only_f:
        _paths(args)
    rounds = throughput(args)
    print(f"(f) c = {args.concurrency}, Kuhn eval vs bare httpx2 against taketurns serve:")
    for i, (ours, bare) in enumerate(rounds, 1):
        print(
            f"    round {i}: eval {ours:>7.0f} calls/s, bare {bare:>7.0f} calls/s, "
            f"{ours / bare:.2f}"
        )
    ratio = statistics.median(ours / bare for ours, bare in rounds)
    print(f"    median ratio {ratio:.2f} (target >= 0.8)")


def _paths(args: argparse.Namespace) -> None:
    results = trio.run(run_all, args)
    base_wall, base_cpu, _ = results["(a) in-process null harness"]
    head = f"{'path':36} {'calls':>6} {'wall us':>10} {'cpu us':>10} {'wall x(a)':>10}"
    print(f"{head} {'cpu x(a)':>10}")
    for name, (wall, cpu, n) in results.items():
        row = f"{name:36} {n:>6} {wall:>10.0f} {cpu:>10.0f} {wall / base_wall:>10.1f}"
        print(f"{row} {cpu / base_cpu:>10.1f}")
    b_wall, b_cpu, _ = results["(b) OpenAIClient -> model server"]
    c_wall, c_cpu, _ = results["(c) bare httpx2 -> model server"]
    print(f"(b)/(c): wall {b_wall / c_wall:.2f}, cpu {b_cpu / c_cpu:.2f}")


if __name__ == "__main__":
    main()
