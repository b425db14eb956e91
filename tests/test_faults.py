"""Fault injection: full evals against a real loopback endpoint that misbehaves on
command (tests/faultserver.py), programs that crash, hang or print garbage, envs and
rewards that break, timeouts, cancellation and SIGINT.

In every case the eval finishes (or exits cleanly on SIGINT), every planned episode is
on disk exactly once (ok, or with its error and stop condition), and every session the
env opened was closed and scored exactly once (``pairenv.check_run``). Real sockets, so
the real clock (docs/design.md "Testing") with generous ``fail_after`` bounds.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from faultserver import OK, Call, Fault, FaultyEndpoint, in_thread, start
from pairenv import Ledger, PairConfig, PairEnv, check_run, summary_of
from procs import children, marked, scratch_dirs

import taketurns._models.openai
from taketurns import (
    Agent,
    AgentConfig,
    Episode,
    EvalConfig,
    RunDir,
    Task,
    Timeouts,
    Trace,
    metric,
    read_episodes,
    run_eval,
)
from taketurns._cli.main import main
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker
from taketurns.http import OpenAIClient
from taketurns.testing import run_episode

LIMIT = 60


@pytest.fixture(autouse=True)
def scratch_root(private_tmpdir: Path) -> Path:
    """Where this test's rollouts make their scratch directories: the test's own
    ``TMPDIR`` (``tests/conftest.py``), short enough for the interception server's
    socket directory to be made there too (past 90 bytes it falls back to ``/tmp``,
    where a leftover fails no test)."""
    return private_tmpdir


def pairs(num_tasks: int, rollouts: int = 1) -> list[tuple[int, int]]:
    return [(i, r) for i in range(num_tasks) for r in range(rollouts)]


def traces_by_role(episode: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["agent"]["name"]: t for t in episode["traces"]}


class FastRetries(OpenAIClient):
    """The runner's endpoint client with tiny backoffs: a failing call gives up in
    milliseconds instead of seconds (``Retry-After`` is still honoured)."""

    def __init__(self, base_url: str, **options: Any) -> None:
        super().__init__(base_url, **{"backoff": 0.01, "max_backoff": 1.0, **options})


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taketurns._models.openai, "OpenAIClient", FastRetries)


async def pair_eval(
    endpoint: FaultyEndpoint,
    out: Path,
    *,
    num_tasks: int,
    rollouts: int = 1,
    concurrency: int = 4,
    modes: dict[int, str] | None = None,
    request_timeout: float = 10.0,
    episode_timeout: float | None = None,
    agent: AgentConfig | None = None,
    turns: int = 2,
    max_failures: int | str | None = None,
) -> Ledger:
    """Run ``faults-pair`` against ``endpoint`` through ``run_eval``; its ledger."""
    ledger = PairEnv.reset(modes)
    seat = agent or AgentConfig()
    config = EvalConfig(
        "faults-pair",
        num_tasks=num_tasks,
        rollouts=rollouts,
        concurrency=concurrency,
        model="faulty",
        base_url=endpoint.base_url,
        request_timeout_s=request_timeout,
        episode_timeout_s=episode_timeout,
        env=PairConfig(a=seat, b=seat, turns=turns),
        max_failures=max_failures,
    )
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=False)
    await run_eval(config, run_dir, env=PairEnv(config.env), progress=False, report=False)
    return ledger


# -- the model endpoint misbehaving -------------------------------------------------------

# kind -> (the fault, words the error of a call that keeps failing must hold)
ENDPOINT_FAULTS = {
    "500": (Fault("status", 500), ["HTTP 500", "injected 500"]),
    "503 with Retry-After": (Fault("status", 503, {"Retry-After": "0.2"}), ["HTTP 503"]),
    "429": (Fault("status", 429), ["HTTP 429", "rate-limiting"]),
    "429 with Retry-After": (Fault("status", 429, {"Retry-After": "0.2"}), ["HTTP 429"]),
    "malformed JSON": (Fault("malformed"), ["malformed body", "not JSON"]),
    "truncated body": (Fault("truncated"), ["connection", "broke"]),
    "stall past the timeout": (Fault("stall", delay=5.0), ["did not answer within"]),
}
RETRYABLE = {k for k in ENDPOINT_FAULTS if k != "malformed JSON"}


@pytest.mark.parametrize("kind", list(ENDPOINT_FAULTS))
@pytest.mark.usefixtures("fast_retries")
async def test_endpoint_faults_lose_nothing(kind: str, tmp_path: Path) -> None:
    """Task 0 fails on every call (its first seat ends with ``model_error``); every
    third first attempt of any other call fails once (retried, unless the fault is
    not retryable)."""
    fault, words = ENDPOINT_FAULTS[kind]

    def decide(call: Call) -> Fault:
        if call.task == 0 or (call.attempt == 0 and call.n % 3 == 1):
            return fault
        return OK

    out = tmp_path / "run"
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery, decide)
            ledger = await pair_eval(endpoint, out, num_tasks=4, rollouts=2, request_timeout=0.5)
            nursery.cancel_scope.cancel()
    episodes = check_run(out, pairs(4, 2), ledger)
    assert endpoint.injected.get(fault.kind, 0) >= (8 if kind in RETRYABLE else 2)
    print(f"FIGURES faults={endpoint.faults} episodes={len(episodes)}")
    for e in episodes:
        seats = traces_by_role(e)
        # a seat the endpoint failed fails its episode (not a result of the model's)
        ended_by_endpoint = any(t["stop_condition"] == "model_error" for t in seats.values())
        assert e["ok"] == (not ended_by_endpoint)
        assert e["ok"] == (e["task"]["idx"] != 0) or kind not in RETRYABLE
        if e["task"]["idx"] == 0:
            assert e["cause"] == "model"
            a = seats["a"]
            assert a["stop_condition"] == "model_error"
            assert len(a["turns"]) == 1  # one recorded turn: the client's retries inside it
            [error] = a["errors"]
            assert error["kind"] == "model"
            for word in words:
                assert word in error["message"]
            if kind in RETRYABLE:
                assert "gave up after 3 retries" in error["message"]
            assert seats["b"]["stop_condition"] == "user_closed"
            assert seats["b"]["turns"] == []
        elif kind in RETRYABLE:  # one failure per call at most: every retry succeeded
            for trace in seats.values():
                assert trace["stop_condition"] == "user_closed", trace["errors"]
                assert trace["errors"] == []
                assert len(trace["turns"]) == 3
    if "Retry-After" in kind:  # the server's wait is honoured between task 0's attempts
        attempts = collections.defaultdict(list)
        for call in endpoint.calls:
            if call.task == 0:
                attempts[json.dumps(call.body["messages"])].append(call.at)
        assert sorted(len(times) for times in attempts.values()) == [4, 4]  # per rollout
        for times in attempts.values():
            assert min(b - a for a, b in itertools.pairwise(times)) >= 0.18


@pytest.mark.usefixtures("fast_retries")
async def test_refusing_connections_mid_run(tmp_path: Path) -> None:
    """The endpoint goes away after 20 calls: with no failure limit (100%: the
    default would stop the run, tests/test_failfast.py) the rest of the eval fails
    fast, and every episode is still written, the late ones with ``model_error``
    seats."""
    out = tmp_path / "run"
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            plug: list[FaultyEndpoint] = []

            def decide(call: Call) -> Fault:
                if call.n == 20:
                    plug[0].stop()  # this call is cut off, later ones are refused
                return OK

            endpoint = await start(nursery, decide)
            plug.append(endpoint)
            ledger = await pair_eval(
                endpoint, out, num_tasks=16, concurrency=3, max_failures="100%"
            )
    episodes = check_run(out, pairs(16), ledger)
    stops = [t["stop_condition"] for e in episodes for t in e["traces"]]
    assert "model_error" in stops
    assert "user_closed" in stops
    refused = [err["message"] for e in episodes for t in e["traces"] for err in t["errors"]]
    assert any("could not reach" in m for m in refused)
    summary = summary_of(out)
    assert summary["episodes"] == 16
    failed = [e for e in episodes if not e["ok"]]
    assert failed
    assert {e["cause"] for e in failed} == {"model"}
    assert summary["failed"] == len(failed)
    assert summary["failed_by_cause"] == {"model": len(failed)}
    failed_calls = sum(
        1 for e in episodes for t in e["traces"] for turn in t["turns"] if turn["error"]
    )
    print(f"FIGURES faults={failed_calls} (calls after the outage) episodes=16")


def test_status_faults_through_the_cli(tmp_path: Path) -> None:
    """``taketurns eval --base-url`` with the default client: 500 and 429 with
    ``Retry-After: 0`` on two calls out of three, and task 2 always failing."""

    def decide(call: Call) -> Fault:
        if call.preflight:
            return OK
        if call.task == 2:
            return Fault("status", 503, {"Retry-After": "0"})
        if call.n % 3 == 1 and call.attempt == 0:
            return Fault("status", 500, {"Retry-After": "0"})
        if call.n % 3 == 2 and call.attempt == 0:
            return Fault("status", 429, {"Retry-After": "0"})
        return OK

    ledger = PairEnv.reset()
    out = tmp_path / "run"
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = [
            "eval", "faults-pair", "-n", "6", "-r", "2", "-c", "3", "--model", "faulty",
            "--base-url", endpoint.base_url, "-o", str(out), "--no-progress",
        ]  # fmt: skip
        assert main(argv) == 1  # task 2's episodes failed: everything written, then exit 1
    episodes = check_run(out, pairs(6, 2), ledger)
    print(f"FIGURES faults={endpoint.faults} episodes={len(episodes)}")
    for e in episodes:
        a = traces_by_role(e)["a"]
        if e["task"]["idx"] == 2:
            assert a["stop_condition"] == "model_error"
            assert "HTTP 503" in a["errors"][0]["message"]
        else:
            assert a["errors"] == []
    assert (out / "report.html").exists()
    summary = summary_of(out)
    assert summary["episodes"] == 12
    assert (summary["failed"], summary["failed_by_cause"]) == (2, {"model": 2})


# -- the harness program misbehaving --------------------------------------------------------

PROGRAM = """
import json, re, runpy, sys, time
modes, args = json.loads(sys.argv[1]), sys.argv[2:]
prompt = json.load(open(args[args.index("--prompt-file") + 1]))
out = args[args.index("--output-file") + 1]
found = re.search(r"task (\\d+)", json.dumps(prompt["messages"]))
mode = modes.get(found.group(1), "ok") if found else "ok"
if mode == "crash":
    print("about to crash"); sys.exit(7)
if mode == "hang":
    time.sleep(600)
if mode == "garbage":
    print("\\x00\\xff garbage"); open(out, "w").write("<<<not json>>>"); sys.exit(0)
if mode == "wrong_shape":
    json.dump({"messages": [{"role": "wizard", "content": "?"}]}, open(out, "w")); sys.exit(0)
sys.argv = [sys.argv[0], *args]
runpy.run_module("taketurns.harnesses.programs.chat", run_name="__main__")
"""

PROGRAM_MODES = {1: "crash", 2: "hang", 3: "garbage", 4: "wrong_shape"}


@pytest.mark.slow
async def test_programs_crashing_hanging_or_printing_garbage(
    tmp_path: Path, scratch_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"TAKETURNS_FAULTS_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "1")  # every program this test starts carries it
    before = children()
    command = [
        sys.executable,
        "-c",
        PROGRAM,
        json.dumps({str(k): v for k, v in PROGRAM_MODES.items()}),
    ]
    seat = AgentConfig(
        harness="program",
        harness_options={"command": command},
        timeouts=Timeouts(segment_s=12.0),  # a program starts in ~1.4 s on a loaded machine
    )
    out = tmp_path / "run"
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery)
            ledger = await pair_eval(endpoint, out, num_tasks=6, agent=seat, turns=1)
            nursery.cancel_scope.cancel()
    episodes = check_run(out, pairs(6), ledger)
    expected = {
        "crash": ("harness_error", "status 7"),
        "hang": ("segment_timeout", None),
        "garbage": ("harness_error", "output file is malformed"),
        "wrong_shape": ("harness_error", "wizard"),
    }
    for e in episodes:
        a, b = traces_by_role(e)["a"], traces_by_role(e)["b"]
        mode = PROGRAM_MODES.get(e["task"]["idx"])
        if mode is None:
            assert a["stop_condition"] == b["stop_condition"] == "user_closed"
            assert a["errors"] == b["errors"] == []
            assert len(a["turns"]) == len(b["turns"]) == 2
            continue
        stop, words = expected[mode]
        assert a["stop_condition"] == stop
        if words is None:
            assert a["errors"] == []
        else:
            assert words in a["errors"][0]["message"]
    print(f"FIGURES faults={len(PROGRAM_MODES)} episodes={len(episodes)}")
    assert children() == before
    assert marked(marker) == []
    assert scratch_dirs(scratch_root) == []


# -- the env and its rewards misbehaving ----------------------------------------------------


async def test_env_and_reward_failures(tmp_path: Path) -> None:
    modes = {1: "env_raises", 2: "reward_raises", 3: "reward_hangs", 5: "env_raises"}
    seat = AgentConfig(timeouts=Timeouts(scoring_s=0.5))
    out = tmp_path / "run"
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery, lambda call: Fault("stall", delay=0.05))
            ledger = await pair_eval(
                endpoint, out, num_tasks=6, rollouts=2, modes=modes, agent=seat
            )
            nursery.cancel_scope.cancel()
    episodes = check_run(out, pairs(6, 2), ledger)
    for e in episodes:
        mode = modes.get(e["task"]["idx"], "ok")
        seats = traces_by_role(e)
        if mode == "env_raises":
            assert (e["ok"], e["stop"]) == (False, "env_error")
            [error] = e["errors"]
            assert error["kind"] == "env"
            assert "mid-turn" in error["message"]
            assert {t["stop_condition"] for t in seats.values()} == {"env_error"}
            assert len(seats["b"]["turns"]) == 0  # its call was cancelled in flight
            continue
        # a reward that broke means the rewards were not measured: a failure
        assert (e["ok"], e["cause"]) == ((True, None) if mode == "ok" else (False, "scoring"))
        for trace in seats.values():
            assert trace["stop_condition"] == "user_closed"
            if mode == "ok":
                assert trace["errors"] == []
                assert trace["rewards"] == {"counted": 1.0, "fragile": 0.5}
                continue
            # issue 40 item 14: a reward that broke was never computed, so it is absent
            assert trace["rewards"] == {"counted": 1.0}
            [error] = trace["errors"]
            assert error["kind"] == "scoring"
            word = "the reward broke" if mode == "reward_raises" else "longer than 0.5s"
            assert word in error["message"]
    broken = sum(1 for e in episodes if e["stop"] == "env_error")
    scoring = sum(1 for e in episodes for t in e["traces"] for err in t["errors"])
    print(f"FIGURES faults={broken + scoring} episodes={len(episodes)}")


async def test_episode_timeout_cancels_mid_turn(tmp_path: Path) -> None:
    """Odd tasks stall on their second call until the episode's second is up."""

    seen: collections.Counter[int | None] = collections.Counter()

    def decide(call: Call) -> Fault:
        seen[call.task] += 1
        if call.task is not None and call.task % 2 == 1 and seen[call.task] >= 2:
            return Fault("stall", delay=30.0)
        return OK

    out = tmp_path / "run"
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery, decide)
            ledger = await pair_eval(endpoint, out, num_tasks=6, episode_timeout=1.0)
            nursery.cancel_scope.cancel()
    episodes = check_run(out, pairs(6), ledger)
    for e in episodes:
        if e["task"]["idx"] % 2:
            # the timeout caught b waiting on the endpoint: a model failure, not an
            # outcome (time on the endpoint is never held against the model)
            assert (e["ok"], e["cause"], e["stop"]) == (False, "model", "episode_timeout")
            assert [err["kind"] for err in e["errors"]] == ["timeout"]
            a, b = traces_by_role(e)["a"], traces_by_role(e)["b"]
            assert (a["stop_condition"], b["stop_condition"]) == ("episode_timeout", "model_error")
            assert len(a["turns"]) == 1  # the second call (b's) was cancelled mid-request
            assert b["turns"] == []
            assert "the episode_timeout fired" in b["errors"][0]["message"]
        else:
            assert e["ok"]
    timed_out = sum(1 for e in episodes if e["stop"] == "episode_timeout")
    print(f"FIGURES faults={timed_out} episodes={len(episodes)}")


# -- the whole eval cancelled, then resumed ---------------------------------------------------


async def test_cancelling_the_whole_eval_then_resuming(tmp_path: Path) -> None:
    out = tmp_path / "run"
    slow = lambda call: Fault("stall", delay=0.03)  # noqa: E731
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery, slow)
            with trio.CancelScope() as cancel:

                async def cancel_after_four() -> None:
                    while _lines(out / "episodes.jsonl") < 4:  # noqa: ASYNC110 - a file
                        await trio.sleep(0.005)
                    cancel.cancel()

                nursery.start_soon(cancel_after_four)
                await pair_eval(endpoint, out, num_tasks=20, concurrency=4)
            assert cancel.cancelled_caught
            # the cancelled run: what started is on disk once, closed and scored
            episodes = check_run(out, None, PairEnv.ledger)
            cancelled = [e for e in episodes if e["stop"] == "cancelled"]
            assert 4 <= len(episodes) < 20
            assert cancelled
            for e in cancelled:
                assert [err["kind"] for err in e["errors"]] == ["cancelled"]
                assert {t["stop_condition"] for t in e["traces"]} <= {"cancelled"}

            # resume: cancelled episodes set aside, the owed pairs run
            run_dir = RunDir(out)
            assert run_dir.set_aside_cancelled() == len(cancelled)
            ledger = PairEnv.reset()
            config = EvalConfig(
                "faults-pair", num_tasks=20, concurrency=4, model="faulty",
                base_url=endpoint.base_url, env=PairConfig(),
            )  # fmt: skip
            await run_eval(config, run_dir, env=PairEnv(config.env), progress=False, report=False)
            nursery.cancel_scope.cancel()
    resumed = check_run(out, pairs(20), None)
    assert all(e["ok"] for e in resumed)
    redone = {e["id"] for e in resumed} - {e["id"] for e in episodes if e["stop"] != "cancelled"}
    assert sorted(ledger.scored) == sorted((id_, role) for id_ in redone for role in "ab")
    assert set(ledger.scored.values()) == {1}
    assert len(list(read_episodes(out / "cancelled.jsonl"))) == len(cancelled)
    print("FIGURES faults=1 episodes=20")


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


# -- SIGINT to a real `taketurns eval` running program harnesses, then --resume ---------------


@pytest.mark.slow
def test_sigint_with_program_seats_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    marker = f"TAKETURNS_SIGINT_{uuid.uuid4().hex}"
    env = {**os.environ, "TMPDIR": str(scratch), marker: "1"}
    argv = [
        sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "40", "-c", "4",
        "--env.player0.harness=program", "--env.player1.harness=program",
        "-o", str(out), "--no-progress",
    ]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        deadline = time.monotonic() + LIMIT
        # signal while programs are running (the eval process itself is marked too)
        while time.monotonic() < deadline and (
            _lines(out / "episodes.jsonl") < 3 or len(marked(marker)) < 2
        ):
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=LIMIT)
    assert proc.returncode == 130, err
    assert marked(marker) == []  # every program the eval started is gone
    assert scratch_dirs(scratch) == []
    first = list(read_episodes(out / "episodes.jsonl"))
    assert 3 <= len(first) < 40  # 40: far from done when the signal lands
    cancelled = [e for e in first if e["stop"] == "cancelled"]
    assert cancelled
    for e in first:
        for trace in e["traces"]:
            assert trace["stop_condition"]
            assert set(trace["rewards"]) == {"payoff"}  # scored, even when cancelled
    for e in cancelled:
        # failed by the cancellation, so rerun by --resume (cancelled.jsonl below)
        assert (e["ok"], e["cause"]) == (False, "cancelled")
        # a seat cut by the signal is `cancelled`; one whose close had begun before it
        # (a hand that was over) keeps `user_closed`, and when the signal lands during
        # the last seat's close that is every seat: no `"cancelled" in stops` (it failed
        # once under load; the interleavings are
        # test_a_signal_during_the_closes_of_a_finished_hand_cancels_the_episode)
        stops = [t["stop_condition"] for t in e["traces"]]
        assert set(stops) <= {"cancelled", "user_closed"}
    assert summary_of(out)["interrupted"] is True

    resumed = subprocess.run(
        [*argv[:3], "eval", "-o", str(out), "--resume", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert sorted((e["task"]["idx"], e["rollout"]) for e in episodes) == pairs(40)
    assert all(e["ok"] for e in episodes)
    assert len(list(read_episodes(out / "cancelled.jsonl"))) == len(cancelled)
    assert marked(marker) == []
    assert scratch_dirs(scratch) == []
    print(f"FIGURES faults=1 episodes=40 cancelled={len(cancelled)}")


class KuhnWatched(KuhnPoker):
    """Kuhn poker whose seats' scoring calls ``at_close(role)``: it runs inside the
    seat's ``close()`` (shielded), after the hand and its payoff are settled."""

    def __init__(self, at_close: Any) -> None:
        super().__init__(
            KuhnConfig(
                player0=AgentConfig(model="builtin/bracket"),
                player1=AgentConfig(model="builtin/bracket"),
            )
        )
        self.at_close = at_close

    @metric
    async def closing(self, task: Task, trace: Trace) -> float:
        self.at_close(trace.agent.name)
        await trio.lowlevel.checkpoint()
        return 0.0


@pytest.mark.parametrize(
    ("signalled_in", "stops"),
    [
        # the hand is over; Kuhn's `async with s0, s1` closes player1 first: a Ctrl-C
        # then is raised when that close is done, and cuts player0's exit
        ("player1", {"player0": "cancelled", "player1": "user_closed"}),
        # ...or lands during player0's close, the last: both seats were closed by the
        # env itself and keep `user_closed`; the episode is still cancelled (env.run
        # had not returned), so it is rerun on --resume
        ("player0", {"player0": "user_closed", "player1": "user_closed"}),
    ],
)
async def test_a_signal_during_the_closes_of_a_finished_hand_cancels_the_episode(
    signalled_in: str, stops: dict[str, str], autojump_clock: Any
) -> None:
    with trio.CancelScope() as interrupt:  # what the runner's SIGINT watcher cancels

        def at_close(role: str) -> None:
            if role == signalled_in:
                interrupt.cancel()

        env = KuhnWatched(at_close)
        episode = Episode("kuhn-poker/0/0", env.id, env.tasks(1)[0])

        def make(role: str, config: AgentConfig, info: Any, on_close: Any) -> Agent:
            return Agent(role, config, episode=info, on_close=on_close, rubric=env.rubric(role))

        await run_episode(env, episode, make)
    assert interrupt.cancelled_caught  # run_episode re-raised the cancellation
    # cause `cancelled`: written aside to cancelled.jsonl and rerun by --resume
    assert (episode.ok, episode.cause, episode.stop) == (False, "cancelled", "cancelled")
    assert {t.agent.name: t.stop_condition for t in episode.traces} == stops
    for trace in episode.traces:  # the hand was played out and every seat scored
        assert set(trace.rewards) == {"payoff"}
        assert "payoff" in trace.info
