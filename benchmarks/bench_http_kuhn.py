"""Kuhn self-play over HTTP: the engine's cost per model call against a bare httpx2
round-trip to the same server, measured in one run (issue 6, target 2).

(1) against ``taketurns serve`` (a separate process, so its CPU is not ours), the
    eval's cost per model call (slope between two run sizes, so start-up cancels)
    vs a bare httpx2 POST + JSON decode of the same request bodies:
    - sequential (c = 1): wall time per call, i.e. what a model call costs end to
      end through the engine vs a bare round-trip (the target's measure);
    - at ``--concurrency``: this process's CPU per call, the engine's work beside
      the HTTP client's (stricter: the server's share of a round-trip is left out).
(2) through the interception server with the ``program`` harness, a process per
    segment and (``persistent``) a pool of serving programs per seat, shared by its
    rollouts: this process's CPU per model call (the interception server, the
    harness, the episode; not the programs' own CPU, which RUSAGE_SELF excludes) vs a
    bare httpx2 round-trip to the same interception server (client and server both in
    this process). The pooled row is a whole run of ``--pooled`` episodes, its
    program starts (at most 2 seats x concurrency 4) and eval setup included. A
    process per segment is printed as a whole run of ``--programs`` episodes and as
    the slope from it to a run three times as long (the run's set-up cancels: what
    one more segment costs).

(3) where a program per segment's cost goes beside a pooled one's: the interception
    server's CPU per call (this process's; the client runs in a process of its own)
    when each call opens a connection of its own, as a program started per segment
    does, against calls on one kept-alive connection, as a pooled program makes them.

Run: ``python benchmarks/bench_http_kuhn.py`` (about two minutes).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import httpx2
import trio

from taketurns import Agent, AgentConfig, RunDir, Task, load_eval_config, read_episodes, run_eval
from taketurns._config.registry import envs
from taketurns.harness import Prompt, Rollout, ServedHarness
from taketurns.http import open_interception_server


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def eval_cost(num: int, concurrency: int, overrides: dict) -> tuple[float, float, int]:
    """(wall s, this process's CPU s, model calls) for one Kuhn eval of ``num``
    episodes."""
    data = {"env_id": "kuhn-poker", "num_tasks": num, "concurrency": concurrency, **overrides}
    config = load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)
    with tempfile.TemporaryDirectory() as tmp:
        wall, start = time.perf_counter(), own_cpu()
        result = trio.run(lambda: run_eval(config, RunDir(tmp), progress=False, report=False))
        wall, cpu = time.perf_counter() - wall, own_cpu() - start
    assert result.summary["failed"] == 0, result.summary
    calls = round(sum(a["turns_mean"] * a["traces"] for a in result.summary["agents"].values()))
    return wall, cpu, calls


def eval_cpu(num: int, concurrency: int, overrides: dict) -> tuple[float, int]:
    """(this process's CPU s, model calls) for one Kuhn eval of ``num`` episodes."""
    _, cpu, calls = eval_cost(num, concurrency, overrides)
    return cpu, calls


def slope(small: int, large: int, concurrency: int, overrides: dict) -> tuple[float, float]:
    """(wall us, CPU us) per model call: the slope between two run sizes."""
    w1, c1, t1 = eval_cost(small, concurrency, overrides)
    w2, c2, t2 = eval_cost(large, concurrency, overrides)
    return (w2 - w1) / (t2 - t1) * 1e6, (c2 - c1) / (t2 - t1) * 1e6


def kuhn_bodies(num: int = 40) -> list[dict]:
    """The request bodies a Kuhn eval sends (its recorded turns), so the bare
    round-trips carry the same workload as the eval."""
    data = {"env_id": "kuhn-poker", "num_tasks": num}
    config = load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(lambda: run_eval(config, RunDir(tmp), progress=False, report=False))
        episodes = list(read_episodes(RunDir(tmp).episodes_path))
    return [
        {"model": "builtin/bracket", "messages": turn["request"]}
        for e in episodes
        for t in e["traces"]
        for turn in t["turns"]
    ]


BODIES: list[dict] = []


async def bare_cpu(url: str, n: int, concurrency: int, headers: dict | None = None) -> float:
    """Client-side CPU us per bare httpx2 POST (+ JSON decode) of the Kuhn eval's own
    request bodies, ``concurrency`` at once."""
    return (await bare_cost(url, n, concurrency, headers))[1]


async def bare_cost(
    url: str, n: int, concurrency: int, headers: dict | None = None
) -> tuple[float, float]:
    """(wall us, client CPU us) per bare httpx2 POST (+ JSON decode) of the Kuhn eval's
    own request bodies, ``concurrency`` at once (wall: elapsed / calls)."""
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def worker(k: int) -> None:
            for i in range(k):
                response = await http.post(url, json=BODIES[i % len(BODIES)])
                response.json()

        async with trio.open_nursery() as nursery:  # warm-up
            for _ in range(concurrency):
                nursery.start_soon(worker, 2)
        wall, start = time.perf_counter(), own_cpu()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker, n // concurrency)
        calls = n // concurrency * concurrency
        return (
            (time.perf_counter() - wall) / calls * 1e6,
            (own_cpu() - start) / calls * 1e6,
        )


class Register(ServedHarness):
    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        self.endpoint(rollout)
        await trio.lowlevel.checkpoint()


async def interception_bare(n: int) -> float:
    async with open_interception_server(graceful_timeout=0.1) as server:
        agent = Agent("s", AgentConfig(), harness=Register(), services={"interception": server})
        async with agent.chat(Task(0, prompt="go")) as session:
            await session.turn()
            endpoint = session.rollout.state["endpoint"]
            headers = {"Authorization": f"Bearer {endpoint.secret}"}
            return await bare_cpu(f"{endpoint.base_url}/chat/completions", n, 1, headers)


# (3)'s client, a process of its own (its CPU is not this process's): ``n`` POSTs of
# the Kuhn bodies, each on a connection of its own (``fresh``: as a program started
# per segment opens one) or all on one kept-alive connection
CLIENT = """
import json, sys, httpx2
url, key, n, fresh = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
bodies = json.loads(sys.stdin.read())
headers = {"Authorization": "Bearer " + key}
with httpx2.Client() as kept:
    for i in range(n):
        body = bodies[i % len(bodies)]
        if fresh:
            with httpx2.Client() as once:
                once.post(url, json=body, headers=headers).json()
        else:
            kept.post(url, json=body, headers=headers).json()
"""


async def server_per_connection(n: int, rounds: int) -> tuple[float, float]:
    """(fresh, kept-alive): the interception server's CPU us per call (this process:
    the server, the rollout's boundary), the client in a process of its own."""
    import json

    bodies = json.dumps(BODIES).encode()
    out: dict[str, list[float]] = {"1": [], "0": []}
    async with open_interception_server(graceful_timeout=0.1) as server:
        agent = Agent("s", AgentConfig(), harness=Register(), services={"interception": server})
        async with agent.chat(Task(0, prompt="go")) as session:
            await session.turn()
            endpoint = session.rollout.state["endpoint"]
            url = f"{endpoint.base_url}/chat/completions"
            for _ in range(rounds):
                for fresh in ("1", "0"):  # alternated: drift hits both alike
                    async with server.open_segment(endpoint):
                        start = own_cpu()
                        argv = [sys.executable, "-c", CLIENT, url, endpoint.secret, str(n), fresh]
                        await trio.run_process(argv, stdin=bodies)
                        out[fresh].append((own_cpu() - start) / n * 1e6)
    return statistics.median(out["1"]), statistics.median(out["0"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=400)
    parser.add_argument("--programs", type=int, default=8, help="program-harness episodes")
    parser.add_argument("--pooled", type=int, default=200, help="pooled-program episodes")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    BODIES.extend(kuhn_bodies())
    with subprocess.Popen(
        [sys.executable, "-m", "taketurns", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        try:
            rows = {"seq": ([], []), "conc": ([], [])}  # (eval, bare) (wall, cpu) pairs
            endpoint = {"base_url": base_url, "model": "builtin/bracket"}
            url = f"{base_url}/chat/completions"
            for _ in range(args.repeats):  # interleaved, so drift hits both alike
                rows["seq"][0].append(slope(args.small, args.large, 1, endpoint))
                rows["seq"][1].append(trio.run(bare_cost, url, 1000, 1))
                rows["conc"][0].append(slope(args.small, args.large, args.concurrency, endpoint))
                rows["conc"][1].append(trio.run(bare_cost, url, 2000, args.concurrency))
        finally:
            server.terminate()

    def median(pairs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(p[i] for p in pairs)

    (se, sb), (ce, cb) = rows["seq"], rows["conc"]
    print(f"{'path':58} {'wall us/call':>12} {'cpu us/call':>12}")
    print("(1) Kuhn eval against taketurns serve, sequential (c = 1)")
    print(
        f"{'    eval (engine + client; the server in its own process)':58} "
        f"{median(se, 0):>12.0f} {median(se, 1):>12.0f}"
    )
    print(
        f"{'    bare httpx2 round-trip, same bodies, same server':58} "
        f"{median(sb, 0):>12.0f} {median(sb, 1):>12.0f}"
    )
    print(
        f"{'    ratio (target <= 1.2 on wall: cost of a call end to end)':58} "
        f"{median(se, 0) / median(sb, 0):>12.2f} {median(se, 1) / median(sb, 1):>12.2f}"
    )
    print(f"    at c = {args.concurrency}: CPU of this process per call")
    print(f"{'    eval':58} {'':>12} {median(ce, 1):>12.0f}")
    print(f"{'    bare':58} {'':>12} {median(cb, 1):>12.0f}")
    print(
        f"{'    ratio (the engine beside the HTTP client)':58} {'':>12} "
        f"{median(ce, 1) / median(cb, 1):>12.2f}"
    )
    p_bare = statistics.median(trio.run(interception_bare, 500) for _ in range(args.repeats))
    print(f"{'(2) bare httpx2 round-trip to the interception server':58} {p_bare:>12.0f}")
    modes = (
        ("a process per segment", args.programs, {}),
        ("pooled (persistent)", args.pooled, {"persistent": True}),
    )
    for label, episodes, options in modes:
        seat = {"harness": "program", "harness_options": options}
        program = {"env": {"player0": seat, "player1": seat}}
        whole, slopes = [], []
        for _ in range(args.repeats):
            cpu, calls = eval_cpu(episodes, 4, program)
            whole.append(cpu / calls * 1e6)
            if not options:  # per segment: also the slope to a run 3x as long
                cpu3, calls3 = eval_cpu(3 * episodes, 4, program)
                slopes.append((cpu3 - cpu) / (calls3 - calls) * 1e6)
        pe = statistics.median(whole)
        print(f"{f'    Kuhn, program harness, {label} (n={episodes})':58} {pe:>12.0f}")
        print(f"{'      ratio':58} {pe / p_bare:>12.2f}")
        if slopes:
            ps = statistics.median(slopes)
            slope_label = f"      per call, slope n={episodes} -> {3 * episodes} (set-up cancels)"
            print(f"{slope_label:58} {ps:>12.0f}")
            print(f"{'      ratio':58} {ps / p_bare:>12.2f}")
    fresh, kept = trio.run(server_per_connection, 300, args.repeats)
    print("(3) the interception server's CPU per call, the client in its own process")
    print(f"{'    a fresh connection per call (a program per segment)':58} {'':>12} {fresh:>12.0f}")
    print(f"{'    one kept-alive connection (a pooled program)':58} {'':>12} {kept:>12.0f}")
    print(f"{'    ratio':58} {'':>12} {fresh / kept:>12.2f}")


if __name__ == "__main__":
    main()
