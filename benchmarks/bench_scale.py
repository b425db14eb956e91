"""Scale: 10,000 concurrent Kuhn episodes in process, and 1,000 over HTTP (issue 6,
targets 3 and 4).

(a) **In process** (target 3). Kuhn self-play through ``run_eval`` at ``-c 10000``
    (20,000 open chat sessions) on ``builtin/bracket?latency_ms=1000``.

    *The ideal.* A Kuhn hand is 2 or 3 model calls made strictly one after another
    (the seats take turns), so an open episode has at most one call in flight and,
    with no engine cost at all, exactly one. With ``c`` episodes admitted the physical
    limit is therefore ``c`` calls in flight, i.e. ``c / latency`` model calls per
    second (10,000/s here), which is ``c / (calls per episode x latency)`` episodes
    per second. Two ratios against it, both from this one run:

    - **steady calls/s / (c/L)** (the target): model calls per second while the
      runner holds all ``c`` slots, i.e. between the start of the ``c``-th episode
      (ramp-up done) and the start of the last one (the tail begins), over ``c / L``.
      Every call is timed at the model (start, end); the rate is Little's law, mean
      calls in flight / mean call duration, so it falls when episodes sit between
      calls (engine work, waiting for the CPU) and when calls last longer than ``L``
      (a sleep that wakes late: a busy event loop). Needs ``-n`` well above ``-c``.
    - **whole run / ideal schedule**: the makespan of the zero-cost schedule of the
      same episodes (same per-episode call counts, ``c`` slots, FIFO admission, every
      call exactly ``L``) over the measured wall time. Ramp-up and tail are in both, so
      this charges the engine only for its own cost (ramp-up is CPU).

    Also: CPU seconds, of which the cyclic garbage collector (``gc.callbacks``), the
    time this process waited for a CPU that other processes held (a shared machine;
    ``/proc/thread-self/schedstat``), the ramp-up (first to ``c``-th episode start),
    engine CPU per model call (CPU / calls: when the process sits at ~100% of one core
    the run is CPU-bound and ``calls / CPU s`` is its ceiling),
    the mean duration of a call (a 1 s sleep that wakes late means a busy event loop),
    peak RSS (``ru_maxrss`` of the process that ran only this phase) and
    ``(peak RSS - RSS before) / open sessions``.

    *One process and worker processes.* ``--workers`` lists the runs, side by side in
    one table: ``0`` is ``--backend local`` (this one process), ``W`` is ``--backend
    processes --workers W`` (W worker processes, each with ``c / W`` of the episodes,
    and this process as the driver writing what they send); default ``0,2``. A worker
    runs the model in its own process, so ``time_calls`` cannot time its calls. For a
    worker run the calls are rebuilt from the episode records (``episodes.jsonl``)
    and go through the same Little's-law window: each turn records its call's
    ``latency_s``, an episode's calls are strictly sequential, and they are placed back
    to back from the episode's ``started_at``: a Kuhn episode makes its first call as
    it starts and each seat answers the other at once, while the episode's own engine
    time (closing the sessions, scoring, writing) comes after its last call. Placing
    that time evenly between the calls instead reads 2% high at c = 10,000; back to
    back agrees with the per-call timing within 0.3% at c = 1,000 and 10,000 (it is
    the same engine code in a worker). The one-process run reports both, so the
    method is checked in the same table on every run. CPU is this process's plus
    its reaped children's (``RUSAGE_CHILDREN``: every worker, exact); peak RSS is the
    sum of each process's own peak (``ru_maxrss`` here, ``VmHWM`` of each worker read
    from ``/proc`` every 0.25 s while it runs: a sum of peaks, an upper bound on the
    peak of the sum); the time waited for a CPU adds the workers' (their
    ``/proc/PID/schedstat``, sampled likewise). The cyclic GC is timed in this process
    only (for a worker run: the driver's).

    *Memory per idle open session.* A Kuhn variant holds each episode open after both
    seats have answered once (one turn each, the real system prompts), all of them
    waiting on one ``trio.Event``: ``--sessions`` (20,000) sessions held by
    ``--sessions / 2`` episodes, each in its own task, inside ``run_eval``. The RSS
    delta (``/proc/self/statm``) and, in a separate process, the tracemalloc delta
    between before the eval and all sessions open, divided by the number of sessions.
    Both include everything an open session costs in an eval: its episode's share, the
    agents, tasks, cancel scopes, the trace with its turn.

(b) **Over HTTP** (target 4). The same Kuhn eval at ``--http-c 1000`` against
    ``taketurns serve --latency-ms 1000`` over loopback (``--base-url``), alternated
    with bare httpx2 loads against the same server: ``--http-c`` workers each POSTing a
    Kuhn-sized request in a loop, started over one latency (as an eval's episodes are
    out of step). The server's ceiling is the bare load spread over ``--bare-pools``
    (10) httpx2 clients: one client's pool does work proportional to its open
    connections on every request (httpcore2 ``_assign_requests_to_connections``), so a
    single 1000-connection pool measures the client, not the server; the single-pool
    bare load (the engine's own configuration) is shown beside it. Ideal = min(c / L,
    ceiling); engine steady calls/s (as in (a)) over it. The bare rates are measured
    the same way (Little's law) after a warm-up of max(2 s, 2 L).

    Errors, all expected to be 0: failed attempts the client retried (its
    ``taketurns._models.openai`` debug log), errors recorded on traces or episodes, and bare-load
    exceptions. ``--request-timeout`` (default 30 s, not the eval default 600 s) bounds
    the wait for a pooled connection, so pool starvation would show up as errors. Also
    shown: the kernel's ``ListenOverflows`` count during each run (connections dropped
    because the server's accept queue was full; these surface as resets and retries).
    CPU per call of this process and of the server process.

    *Which server placement is honest.* By default the server is a separate process
    (``python -m taketurns serve --port 0``), as a real inference server is: it runs
    on the other core instead of sharing the eval's event loop (one GIL, one core). On
    this 2-core machine the two processes still compete with each other (and with
    whatever else runs), which the bare load suffers equally, so the ratio stays fair.
    ``--server in-process`` starts ``taketurns._http.server.serve`` in the eval's own nursery:
    server CPU then counts against the engine's loop and caps both runs at one core.

Results are printed and written to ``benchmarks/results/scale.md`` (and ``.json``).
Each phase runs in a fresh child process of this script, so peak RSS and RSS deltas
belong to that phase alone. ``--profile`` runs only the throughput part of (a) under
pyinstrument and writes ``benchmarks/results/scale_profile.txt`` (its numbers, skewed
by the profiler, are not kept). Numbers on a shared machine are noisy;
ratios are taken within one run.

Run: ``python benchmarks/bench_scale.py`` (a few minutes); quick check:
``python benchmarks/bench_scale.py -c 1000 -n 3000 --sessions 2000 --http-c 100
--http-n 300 --bare-seconds 4 --repeats 1``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson
import trio

from taketurns import RunDir, load_eval_config, run_eval
from taketurns._eval.plan import Plan
from taketurns.envs import kuhn_rules as rules
from taketurns.envs.kuhn import KuhnPoker, ask_text, rules_prompt

RESULTS = Path(__file__).resolve().parent / "results"
RESULT_TAG = "RESULT "
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


# --- measuring ----------------------------------------------------------------------


def rss_bytes(pid: int | str = "self") -> int:
    """Current resident set size of a process."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def run_delay_s() -> float:
    """Seconds this (main) thread has spent runnable but waiting for a CPU: on a shared
    machine, the time other processes took from this one."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


class GcTimer:
    """Time spent in the cyclic garbage collector, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._start
            self.counts[info["generation"]] += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listening socket's accept
    queue was full (``ListenOverflows``, all sockets of this network namespace)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            return int(values.split()[names.split().index("ListenOverflows")])
    return 0


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by another process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def kuhn_config(n: int, c: int, model: str, **extra: Any) -> Any:
    from taketurns._config.registry import envs

    data = {"env_id": "kuhn-poker", "num_tasks": n, "concurrency": c, "model": model, **extra}
    return load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)


def time_calls(plan: Plan, calls: list[tuple[float, float]]) -> None:
    """Record (start, end) wall-clock times of every model call the plan's clients make
    (an instance attribute shadows ``complete``: the clients stay what they are)."""
    for client in plan.clients.values():
        inner = client.complete

        async def complete(request: Any, _inner: Callable[..., Any] = inner) -> Any:
            start = time.time()
            try:
                return await _inner(request)
            finally:
                calls.append((start, time.time()))

        client.complete = complete  # type: ignore[method-assign]


@attrs.frozen
class EpisodeRow:
    idx: int
    started_at: float
    ended_at: float
    wall_s: float
    calls: int
    latencies: tuple[float, ...]  # its calls' latency_s, turn by turn, seats in turn
    errors: tuple[str, ...]


def read_rows(path: Path) -> list[EpisodeRow]:
    rows = []
    with path.open("rb") as f:
        for line in f:
            e = orjson.loads(line)
            errors = [err.get("message", "") for err in e["errors"]]
            for t in e["traces"]:
                errors += [err.get("message", "") for err in t["errors"]]
                errors += [turn["error"] for turn in t["turns"] if turn.get("error")]
            timing = e["timing"]
            rows.append(
                EpisodeRow(
                    e["task"]["idx"],
                    timing["started_at"],
                    timing["ended_at"],
                    timing["wall_s"],
                    sum(len(t["turns"]) for t in e["traces"]),
                    call_latencies(e["traces"]),
                    tuple(errors),
                )
            )
    return rows


def call_latencies(traces: list[dict[str, Any]]) -> tuple[float, ...]:
    """The episode's calls' ``latency_s`` in the order the seats take turns."""
    longest = max((len(t["turns"]) for t in traces), default=0)
    return tuple(
        t["turns"][k]["latency_s"] or 0.0
        for k in range(longest)
        for t in traces
        if k < len(t["turns"])
    )


def calls_from_episodes(rows: list[EpisodeRow]) -> list[tuple[float, float]]:
    """(start, end) of every model call rebuilt from the episode records: back to back
    from the episode's start (the module docstring says why and how well it holds)."""
    calls = []
    for r in rows:
        t = r.started_at
        for latency in r.latencies:
            calls.append((t, t + latency))
            t += latency
    return calls


def ideal_makespan(counts: Sequence[int], concurrency: int, latency: float) -> float:
    """Makespan of the zero-cost schedule: episodes admitted in order into
    ``concurrency`` slots, episode i holding its slot for ``counts[i] * latency``."""
    free = [0.0] * min(concurrency, len(counts))
    end = 0.0
    for k in counts:
        start = heapq.heappop(free)
        heapq.heappush(free, start + k * latency)
        end = max(end, start + k * latency)
    return end


def analyse(
    rows: list[EpisodeRow],
    calls: list[tuple[float, float]],
    concurrency: int,
    latency: float,
    wall: float,
) -> dict[str, Any]:
    """Throughput against the ideals described in the module docstring. Without
    ``calls`` (timed at the model) the steady rate comes from the episode records."""
    counts = [r.calls for r in sorted(rows, key=lambda r: r.idx)]
    total = sum(counts)
    rebuilt = calls_from_episodes(rows)
    method = "calls" if calls else "episodes"
    calls = calls or rebuilt
    out: dict[str, Any] = {
        "episodes": len(rows),
        "calls": total,
        "calls_per_episode": total / max(len(rows), 1),
        "wall_s": wall,
        "episodes_per_s": len(rows) / wall,
        "calls_per_s": total / wall,
        "ideal_calls_per_s": concurrency / latency,
        "mean_call_s": statistics.fmean(e - s for s, e in calls) if calls else 0.0,
        "episode_overhead_ms_p50": statistics.median(r.wall_s - r.calls * latency for r in rows)
        * 1e3,
    }
    ideal = ideal_makespan(counts, concurrency, latency)
    out["ideal_makespan_s"] = ideal
    out["vs_ideal_schedule"] = ideal / wall
    starts = sorted(r.started_at for r in rows)
    out["ramp_up_s"] = starts[min(concurrency, len(starts)) - 1] - starts[0]
    if len(starts) > concurrency:
        w0, w1 = starts[concurrency - 1], starts[-1]
        out["steady_method"] = method
        out.update(steady_window(calls, w0, w1))
        by_episodes = steady_window(rebuilt, w0, w1)["steady_calls_per_s"]
        out["episodes_steady_calls_per_s"] = by_episodes
        episodes = [(r.started_at, r.ended_at) for r in rows]
        out["steady_open_episodes"] = steady_window(episodes, w0, w1)["steady_in_flight"]
        out["steady_ratio"] = out["steady_calls_per_s"] / out["ideal_calls_per_s"]
    return out


def steady_window(calls: list[tuple[float, float]], w0: float, w1: float) -> dict[str, float]:
    """Model calls per second within [w0, w1] by Little's law: mean calls in flight
    over the window / mean duration of the calls that started in it. (Counting the
    completions inside the window is exact in the limit but, with every call lasting
    the same ``L`` and the episodes moving in waves, off by up to a whole wave at the
    window's edges; both are kept.)"""
    span = w1 - w0
    if span <= 0:
        return {"steady_window_s": 0.0, "steady_calls_per_s": 0.0, "steady_in_flight": 0.0}
    busy = sum(max(0.0, min(e, w1) - max(s, w0)) for s, e in calls)
    inside = [e - s for s, e in calls if w0 <= s <= w1]
    ends = sorted(e for _, e in calls)
    done = bisect_right(ends, w1) - bisect_left(ends, w0)
    in_flight = busy / span
    return {
        "steady_window_s": span,
        "steady_in_flight": in_flight,
        "steady_mean_call_s": statistics.fmean(inside) if inside else 0.0,
        "steady_calls_per_s": in_flight / statistics.fmean(inside) if inside else 0.0,
        "steady_completed_per_s": done / span,
    }


# --- phase (a): throughput and peak RSS at -c 10000 ----------------------------------


class Workers:
    """This process's children (the worker processes of ``--backend processes``), each
    one's last-read peak RSS (``VmHWM``) and time waited for a CPU, read from /proc
    every ``every`` seconds while the eval runs."""

    def __init__(self, expected: int, every: float = 0.25) -> None:
        self.expected = expected
        self.every = every
        self.peak: dict[int, int] = {}
        self.delay: dict[int, float] = {}

    def _find(self) -> None:
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in self.peak:
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    continue
                if ppid == me:
                    self.peak[int(entry)], self.delay[int(entry)] = 0, 0.0

    def _read(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/status") as f:
                hwm = next(line for line in f if line.startswith("VmHWM:"))
            with open(f"/proc/{pid}/schedstat") as f:
                self.delay[pid] = int(f.read().split()[1]) / 1e9
        except (OSError, StopIteration):
            return  # it exited (and is being reaped)
        self.peak[pid] = max(self.peak[pid], int(hwm.split()[1]) * 1024)

    async def run(self) -> None:
        while True:
            if len(self.peak) < self.expected:
                self._find()
            for pid in self.peak:
                self._read(pid)
            await trio.sleep(self.every)


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def phase_scale(args: argparse.Namespace) -> dict[str, Any]:
    latency = args.latency_ms / 1000
    workers = args.run_workers
    backend = {"backend": "processes", "workers": workers} if workers else {}
    model = f"builtin/bracket?latency_ms={args.latency_ms:g}"
    config = kuhn_config(args.n, args.c, model, **backend)
    env = KuhnPoker(config.env)
    plan = Plan(config, env)
    calls: list[tuple[float, float]] = []
    if not workers:  # the model runs in this process: time each call at its client
        time_calls(plan, calls)
    sampler = Workers(workers)
    gc.collect()
    base_rss = rss_bytes()
    profiler = None
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="disabled")
        profiler.start()

    async def run(run_dir: RunDir) -> None:
        async with trio.open_nursery() as nursery:
            if workers:
                nursery.start_soon(sampler.run)
            await run_eval(config, run_dir, env=env, plan=plan, progress=False, report=False)
            nursery.cancel_scope.cancel()

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDir(tmp)
        wall, cpu, delay = time.perf_counter(), time.process_time(), run_delay_s()
        worker_cpu = children_cpu_s()
        with GcTimer() as gc_time:
            trio.run(run, run_dir)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        worker_cpu = children_cpu_s() - worker_cpu
        delay = run_delay_s() - delay
        if profiler is not None:
            profiler.stop()
            RESULTS.mkdir(exist_ok=True)
            text = profiler.output_text(unicode=False, color=False, show_all=False)
            (RESULTS / "scale_profile.txt").write_text(text)
        rows = read_rows(run_dir.episodes_path)
    out = analyse(rows, calls, args.c, latency, wall)
    total_cpu = cpu + worker_cpu
    out.update(
        workers=workers,
        label=f"{workers} worker processes" if workers else "1 process",
        concurrency=args.c,
        latency_s=latency,
        cpu_s=total_cpu,
        driver_cpu_s=cpu,
        worker_cpu_s=worker_cpu,
        cpu_util=total_cpu / wall,
        run_delay_s=delay + sum(sampler.delay.values()),
        gc_s=gc_time.seconds,
        gc_counts=gc_time.counts,
        cpu_us_per_call=total_cpu / max(out["calls"], 1) * 1e6,
        cpu_ceiling_calls_per_s=out["calls"] / total_cpu,
        errors=sum(len(r.errors) for r in rows),
        base_rss=base_rss,
        peak_rss=peak_rss_bytes() + sum(sampler.peak.values()),
        worker_peak_rss=sorted(sampler.peak.values()),
        sessions=2 * min(args.c, args.n),
    )
    # each worker taken to start where this process stood before the run
    out["peak_per_session"] = (out["peak_rss"] - (1 + workers) * base_rss) / out["sessions"]
    return out


# --- phase (a): memory per idle open session ----------------------------------------


class HeldKuhn(KuhnPoker):
    """Kuhn seats that each answer once, then stay open until ``release`` is set."""

    id = "kuhn-poker-held"

    def __init__(self, config: Any, expected: int) -> None:
        super().__init__(config)
        self.expected = expected
        self.opened = 0
        self.all_open = trio.Event()
        self.release = trio.Event()

    async def run(self, task: Any, agents: Any) -> None:
        cards = rules.deal(task.info["seed"])
        retries = self.config.invalid_retries
        seat0, seat1 = (
            attrs.evolve(task, system_prompt=rules_prompt(s, cards[s], retries, task.idx))
            for s in (0, 1)
        )
        async with agents.player0.chat(seat0) as s0, agents.player1.chat(seat1) as s1:
            for session in (s0, s1):
                await session.turn(ask_text([]))
            self.opened += 2
            if self.opened >= self.expected:
                self.all_open.set()
            await self.release.wait()


def phase_memory(args: argparse.Namespace) -> dict[str, Any]:
    episodes = args.sessions // 2
    config = kuhn_config(episodes, episodes, "builtin/bracket")
    env = HeldKuhn(config.env, 2 * episodes)
    plan = Plan(config, env)
    traced = args.phase == "memory-tracemalloc"
    result: dict[str, Any] = {"sessions": 2 * episodes}

    async def main(run_dir: RunDir) -> None:
        async with trio.open_nursery() as nursery:
            gc.collect()
            if traced:
                tracemalloc.start()
                before = tracemalloc.get_traced_memory()[0]
            else:
                before = rss_bytes()
                objects = len(gc.get_objects())
            nursery.start_soon(
                lambda: run_eval(config, run_dir, env=env, plan=plan, progress=False, report=False)
            )
            await env.all_open.wait()
            gc.collect()
            during = tracemalloc.get_traced_memory()[0] if traced else rss_bytes()
            if traced:
                tracemalloc.stop()
            else:  # what each full (generation 2) collection has to walk
                tracked = len(gc.get_objects()) - objects
                result["gc_objects_per_session"] = tracked / result["sessions"]
            result["per_session"] = (during - before) / result["sessions"]
            env.release.set()

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, RunDir(tmp))
    return result


# --- phase (b): HTTP at scale --------------------------------------------------------


class RetryCounter(logging.Handler):
    """Counts the failed attempts ``OpenAIClient`` retried (its debug log)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.kinds: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "did not answer within" in text:
            self.kinds["timeout"] += 1
        elif "could not reach" in text:
            self.kinds["connection"] += 1
        else:
            self.kinds["other"] += 1


def kuhn_body() -> dict[str, Any]:
    """A request the size of a Kuhn seat's first call."""
    return {
        "model": "builtin/bracket",
        "messages": [
            {"role": "system", "content": rules_prompt(0, "K", 1)},
            {"role": "user", "content": ask_text([])},
        ],
    }


async def bare_load(
    base_url: str,
    concurrency: int,
    seconds: float,
    warm: float,
    request_timeout: float,
    stagger: float,
    pools: int = 1,
) -> dict[str, Any]:
    """``concurrency`` workers POSTing in a loop for ``seconds``, their starts spread
    over ``stagger`` seconds (in step, they would queue at the server in bursts that
    a running eval, its episodes out of step, never makes): calls per second after the
    first ``warm`` seconds. ``pools`` > 1 splits the workers over that many clients
    (httpx2's pool does work proportional to its connections on every request)."""
    url = f"{base_url}/chat/completions"
    body = kuhn_body()
    calls: list[tuple[float, float]] = []
    errors: Counter[str] = Counter()
    failures: list[tuple[float, str]] = []
    size = -(-concurrency // pools)
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    timeout = httpx2.Timeout(request_timeout, pool=request_timeout)
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx2.AsyncClient(timeout=timeout, limits=limits))
            for _ in range(pools)
        ]
        t0 = time.time()
        stop = trio.current_time() + seconds

        async def worker(http: httpx2.AsyncClient, offset: float) -> None:
            await trio.sleep(offset)
            while trio.current_time() < stop:
                try:
                    start = time.time()
                    response = await http.post(url, json=body)
                    response.raise_for_status()
                    response.json()
                    calls.append((start, time.time()))
                except httpx2.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    failures.append((time.time() - t0, repr(exc)[:200]))

        async with trio.open_nursery() as nursery:
            for i in range(concurrency):  # staggered over one latency, as episodes are
                nursery.start_soon(worker, clients[i % pools], i * stagger / concurrency)
    return {
        "calls": len(calls),
        **steady_window(calls, t0 + warm, t0 + seconds),
        "errors": dict(errors),
        "failures": failures[:5] + failures[-5:] if len(failures) > 10 else failures,
    }


async def engine_http(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    latency = args.latency_ms / 1000
    config = kuhn_config(
        args.http_n,
        args.http_c,
        "builtin/bracket",
        base_url=base_url,
        request_timeout_s=args.request_timeout,
    )
    env = KuhnPoker(config.env)
    plan = Plan(config, env)
    calls: list[tuple[float, float]] = []
    time_calls(plan, calls)
    counter = RetryCounter()
    client_log = logging.getLogger("taketurns._models.openai")
    client_log.addHandler(counter)
    client_log.setLevel(logging.DEBUG)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = RunDir(tmp)
            wall = time.perf_counter()
            await run_eval(config, run_dir, env=env, plan=plan, progress=False, report=False)
            wall = time.perf_counter() - wall
            rows = read_rows(run_dir.episodes_path)
    finally:
        client_log.removeHandler(counter)
    out = analyse(rows, calls, args.http_c, latency, wall)
    kinds: Counter[str] = Counter()
    for r in rows:
        for message in r.errors:
            kinds["timeout" if "did not answer within" in message else "other"] += 1
    out["trace_errors"] = dict(kinds)
    out["retried"] = dict(counter.kinds)
    return out


def phase_http(args: argparse.Namespace) -> dict[str, Any]:
    latency = args.latency_ms / 1000
    warm = max(2.0, 2 * latency)
    runs = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if args.base_url:
                base_url, pid = args.base_url, args.server_pid
            else:
                from taketurns._http.server import serve
                from taketurns._models.builtin import BuiltinModel

                model = BuiltinModel("bracket", latency=latency)
                base_url, pid = await nursery.start(serve, model), None
            for _ in range(args.repeats):
                run: dict[str, Any] = {}
                for name in ("bare", "bare_1pool", "engine"):
                    server_cpu = proc_cpu_s(pid) if pid else 0.0
                    cpu, overflows = time.process_time(), listen_overflows()
                    if name == "engine":
                        r = await engine_http(args, base_url)
                    else:
                        r = await bare_load(
                            base_url,
                            args.http_c,
                            args.bare_seconds,
                            warm,
                            args.request_timeout,
                            stagger=latency,
                            pools=args.bare_pools if name == "bare" else 1,
                        )
                    calls = max(r["calls"], 1)
                    r["client_cpu_us_per_call"] = (time.process_time() - cpu) / calls * 1e6
                    r["listen_overflows"] = listen_overflows() - overflows
                    if pid:
                        r["server_cpu_us_per_call"] = (proc_cpu_s(pid) - server_cpu) / calls * 1e6
                    run[name] = r
                runs.append(run)
            nursery.cancel_scope.cancel()

    trio.run(main)
    return {"runs": runs, "concurrency": args.http_c, "latency_s": latency}


# --- orchestration -------------------------------------------------------------------


def child(phase: str, argv: list[str], extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run one phase in a fresh process; its last ``RESULT`` line is the result."""
    cmd = [sys.executable, __file__, "--phase", phase, *argv, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
        raise SystemExit(f"phase {phase} failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_TAG) :])
    return result


def start_server(latency_ms: float, log: Any) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "taketurns", "serve", "--latency-ms", f"{latency_ms:g}"]
    server = subprocess.Popen([*cmd, "--port", "0"], stdout=subprocess.PIPE, stderr=log, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    if not url.startswith("http"):
        server.kill()
        raise SystemExit(f"taketurns serve did not start (printed {url!r}); see its stderr")
    return server, url


def run_http(argv: list[str], args: argparse.Namespace) -> dict[str, Any]:
    if args.server == "in-process":
        return child("http", argv)
    with tempfile.TemporaryFile("w+") as log:
        server, url = start_server(args.latency_ms, log)
        try:
            return child("http", argv, ["--base-url", url, "--server-pid", str(server.pid)])
        finally:
            server.terminate()
            server.wait(timeout=10)
            log.seek(0)
            errors = log.read()
            if "Traceback" in errors:
                sys.stderr.write(f"server stderr:\n{errors[-3000:]}")


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def report_scale(
    runs: list[dict[str, Any]], mem_rss: dict[str, Any], mem_tm: dict[str, Any]
) -> list[str]:
    """Phase (a): the throughput runs side by side, then memory per idle session."""
    kib, mib = 1024, 2**20
    a = runs[0]

    def row(measure: str, cell: Callable[[dict[str, Any]], str], target: str = "", met: Any = None):
        marks = " / ".join(_mark(met(r)) for r in runs) if met else ""
        return f"| {measure} | {' | '.join(cell(r) for r in runs)} | {target} | {marks} |"

    def steady(r: dict[str, Any]) -> str:
        how = "timed per call" if r["steady_method"] == "calls" else "from episode records"
        return (
            f"{r['steady_calls_per_s']:.0f} / {r['ideal_calls_per_s']:.0f} = "
            f"**{r['steady_ratio']:.0%}** ({how}; window {r['steady_window_s']:.1f} s, "
            f"{r['steady_in_flight']:.0f} calls in flight)"
        )

    def gc_cell(r: dict[str, Any]) -> str:
        who = " (driver)" if r.get("workers") else ""
        return f"{sum(r['gc_s']):.1f} s{who} ({'/'.join(str(n) for n in r['gc_counts'])})"

    def cpu_cell(r: dict[str, Any]) -> str:
        split = ""
        if r.get("workers"):
            split = f" (driver {r['driver_cpu_s']:.1f} s, workers {r['worker_cpu_s']:.1f} s)"
        return f"{r['cpu_s']:.1f} s / {r['cpu_util']:.0%}{split}"

    def rss_cell(r: dict[str, Any]) -> str:
        parts = ""
        if r.get("worker_peak_rss"):
            each = " + ".join(f"{b / mib:.0f}" for b in r["worker_peak_rss"])
            parts = f" = driver {(r['peak_rss'] - sum(r['worker_peak_rss'])) / mib:.0f} + {each}"
        return (
            f"{r['peak_rss'] / mib:.0f} MiB{parts} (before the run {r['base_rss'] / mib:.0f} MiB)"
        )

    lines = [
        f"## (a) {a['concurrency']} concurrent Kuhn episodes, built-in model at "
        f"{a['latency_s'] * 1e3:g} ms",
        "",
        f"| measure | {' | '.join(r.get('label', '1 process') for r in runs)} | target | met |",
        f"|---|{'---|' * len(runs)}---|---|",
        row(
            "episodes / model calls",
            lambda r: f"{r['episodes']} / {r['calls']} ({r['calls_per_episode']:.2f} per episode)",
        ),
        row("wall / episodes per s", lambda r: f"{r['wall_s']:.1f} s / {r['episodes_per_s']:.0f}"),
    ]
    if all("steady_ratio" in r for r in runs):
        lines += [
            row(
                "steady model calls/s vs c/L",
                steady,
                ">= 90%",
                lambda r: r["steady_ratio"] >= 0.9,
            ),
            row(
                "the same from the episode records (the method check)",
                lambda r: f"{r.get('episodes_steady_calls_per_s', 0):.0f}",
            ),
            row(
                f"mean open episodes in that window (c = {a['concurrency']})",
                lambda r: f"{r['steady_open_episodes']:.0f}",
            ),
        ]
    lines += [
        row(
            "whole run vs ideal schedule",
            lambda r: (
                f"{r['ideal_makespan_s']:.1f} s / {r['wall_s']:.1f} s = "
                f"{r['vs_ideal_schedule']:.0%}"
            ),
        ),
        row(
            f"ramp-up: first to {a['concurrency']}th episode start",
            lambda r: f"{r['ramp_up_s']:.1f} s",
        ),
        row(f"mean model call (sleep {a['latency_s']:g} s)", lambda r: f"{r['mean_call_s']:.3f} s"),
        row(
            "median episode time beyond its calls",
            lambda r: f"{r['episode_overhead_ms_p50']:.0f} ms",
        ),
        row("CPU, all processes / share of one core", cpu_cell),
        row("of which cyclic GC (gen 0/1/2 collections)", gc_cell),
        row(
            "waited for a CPU (taken by other processes)",
            lambda r: f"{r['run_delay_s']:.1f} s ({r['run_delay_s'] / r['wall_s']:.0%} of wall)",
        ),
        row(
            "engine CPU per model call (all-in, all processes)",
            lambda r: (
                f"**{r['cpu_us_per_call']:.0f} us** "
                f"({r['cpu_ceiling_calls_per_s']:.0f} calls per CPU-second)"
            ),
        ),
        row(
            "errors on episodes/traces", lambda r: str(r["errors"]), "0", lambda r: r["errors"] == 0
        ),
        row("peak RSS (sum over the processes)", rss_cell, "reported"),
        row(
            f"(peak - before) / {a['sessions']} busy sessions",
            lambda r: f"{r['peak_per_session'] / kib:.1f} KiB",
        ),
        "",
        "| idle open sessions (one process) | value | target | met |",
        "|---|---|---|---|",
        f"| idle open session, RSS ({mem_rss['sessions']} sessions) | "
        f"**{mem_rss['per_session'] / kib:.1f} KiB** | <= 20 KiB | "
        f"{_mark(mem_rss['per_session'] <= 20 * kib)} |",
        f"| GC-tracked objects per idle open session | "
        f"{mem_rss['gc_objects_per_session']:.0f} | | |",
        f"| idle open session, tracemalloc | {mem_tm['per_session'] / kib:.1f} KiB | "
        f"<= 20 KiB | {_mark(mem_tm['per_session'] <= 20 * kib)} |",
    ]
    return lines


def report_http(b: dict[str, Any], placement: str, pools: int) -> list[str]:
    c, latency = b["concurrency"], b["latency_s"]
    lines = [
        f"## (b) {c} concurrent Kuhn episodes against taketurns serve ({placement}), "
        f"{latency * 1e3:g} ms",
        "",
        f"| run | bare httpx2 calls/s, {pools} pools (1 pool) | c/L | ceiling | "
        "engine calls/s | ratio | engine errors (retried / on traces) | bare errors | "
        "listen overflows bare / engine | client CPU us per call, bare / engine | "
        "server CPU us per call |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios, errors = [], 0
    for i, run in enumerate(b["runs"], 1):
        bare, single, eng = run["bare"], run["bare_1pool"], run["engine"]
        ceiling = min(c / latency, bare["steady_calls_per_s"])
        rate = eng.get("steady_calls_per_s", eng["calls_per_s"])
        ratios.append(rate / ceiling)
        n_err = sum(eng["retried"].values()) + sum(eng["trace_errors"].values())
        bare_errors = {
            k: bare["errors"].get(k, 0) + single["errors"].get(k, 0)
            for k in {*bare["errors"], *single["errors"]}
        }
        errors += n_err + sum(bare_errors.values())
        server = "-"
        if "server_cpu_us_per_call" in eng:
            server = "/".join(f"{r['server_cpu_us_per_call']:.0f}" for r in (bare, single, eng))
        lines.append(
            f"| {i} | {bare['steady_calls_per_s']:.0f} ({single['steady_calls_per_s']:.0f}) | "
            f"{c / latency:.0f} | {ceiling:.0f} | {rate:.0f} | {rate / ceiling:.0%} | "
            f"{eng['retried'] or 0} / {eng['trace_errors'] or 0} | {bare_errors or 0} | "
            f"{bare['listen_overflows'] + single['listen_overflows']} / "
            f"{eng['listen_overflows']} | {bare['client_cpu_us_per_call']:.0f} "
            f"({single['client_cpu_us_per_call']:.0f}) / {eng['client_cpu_us_per_call']:.0f} | "
            f"{server} |"
        )
    ratio = statistics.median(ratios)
    lines += [
        "",
        f"median ratio **{ratio:.0%}** (target >= 90%: {_mark(ratio >= 0.9)}); "
        f"errors of any kind: **{errors}** (target 0: {_mark(errors == 0)})",
    ]
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", type=int, default=10_000, help="(a) concurrent episodes")
    parser.add_argument("-n", type=int, default=None, help="(a) episodes (default 3 x -c)")
    parser.add_argument("--latency-ms", type=float, default=1000.0)
    parser.add_argument("--sessions", type=int, default=20_000, help="(a) idle open sessions")
    parser.add_argument(
        "--workers",
        default="0,2",
        help="(a) the throughput runs, comma-separated: 0 = one process (--backend local), "
        "W = --backend processes --workers W (default 0,2)",
    )
    parser.add_argument("--http-c", type=int, default=1000, help="(b) concurrent episodes")
    parser.add_argument("--http-n", type=int, default=None, help="(b) episodes (3 x)")
    parser.add_argument("--bare-seconds", type=float, default=10.0, help="(b) bare load time")
    parser.add_argument(
        "--bare-pools", type=int, default=10, help="(b) httpx2 clients the bare load uses"
    )
    parser.add_argument("--request-timeout", type=float, default=30.0, help="(b) seconds")
    parser.add_argument("--repeats", type=int, default=3, help="(b) bare/engine pairs")
    parser.add_argument("--server", choices=["subprocess", "in-process"], default="subprocess")
    parser.add_argument("--only", choices=["a", "b"], default=None, help="run one part")
    parser.add_argument("--profile", action="store_true", help="only profile (a)'s throughput run")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--run-workers", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.n = args.n or 3 * args.c
    args.workers = [int(w) for w in args.workers.split(",")]
    args.http_n = args.http_n or 3 * args.http_c
    return args


def main() -> None:
    args = parse_args()
    phases = {
        "scale": phase_scale,
        "memory-rss": phase_memory,
        "memory-tracemalloc": phase_memory,
        "http": phase_http,
    }
    if args.phase:
        print(RESULT_TAG + json.dumps(phases[args.phase](args)), flush=True)
        return
    argv = [a for a in sys.argv[1:] if a != "--profile"]
    if args.profile:  # profiler overhead skews the numbers: keep them out of the results
        child("scale", argv, ["--profile"])
        print(f"wrote {RESULTS / 'scale_profile.txt'}")
        return
    stored = RESULTS / "scale.json"
    # --only re-runs one part and keeps the other's last results in the files
    data = json.loads(stored.read_text()) if args.only and stored.exists() else {}
    note = (
        f"{time.strftime('%Y-%m-%d %H:%M')}; command: "
        f"`python benchmarks/bench_scale.py {' '.join(sys.argv[1:])}`".rstrip()
    )
    if args.only in (None, "a"):
        data["a"] = {
            "runs": [child("scale", argv, ["--run-workers", str(w)]) for w in args.workers],
            "memory_rss": child("memory-rss", argv),
            "memory_tracemalloc": child("memory-tracemalloc", argv),
        }
        data["a"]["note"] = f"{note}; load average {os.getloadavg()[0]:.1f} at the end"
    if args.only in (None, "b"):
        data["b"] = {"http": run_http(argv, args), "server": args.server}
        data["b"]["pools"] = args.bare_pools
        data["b"]["note"] = f"{note}; load average {os.getloadavg()[0]:.1f} at the end"
    RESULTS.mkdir(exist_ok=True)
    stored.write_text(json.dumps(data, indent=2) + "\n")
    lines = []
    if "a" in data:
        a = data["a"]
        runs = a.get("runs") or [a["scale"]]  # results stored before --workers
        lines += report_scale(runs, a["memory_rss"], a["memory_tracemalloc"])
        lines += ["", a["note"], ""]
    if "b" in data:
        b = data["b"]
        lines += report_http(b["http"], b["server"], b["pools"])
        lines += ["", b["note"]]
    print("\n".join(lines))
    (RESULTS / "scale.md").write_text("# bench_scale\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
