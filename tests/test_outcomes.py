"""Failures are not rewards (``taketurns._exchange.outcome``): an endpoint that starts
failing mid-run fails its episodes (counted by cause, left out of the means, listed in
the report, exit 1), ``--resume`` reruns exactly those, and episode retries rerun a
failed episode in the same run. Real loopback endpoint (tests/faultserver.py), real
CLI, real clock."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import attrs
import pytest
import trio
from faultserver import OK, Call, Fault, FaultyEndpoint, in_thread, start
from pairenv import PairConfig, PairEnv
from rich.console import Console
from rundirs import eval_cli, pairs, records

from taketurns import (
    AgentConfig,
    Agents,
    Env,
    EnvConfig,
    EvalConfig,
    RunDir,
    Task,
    Trace,
    is_failure,
    read_episodes,
    register_env,
    reward,
    run_eval,
)
from taketurns._exchange.outcome import CAUSES, cause_of, record_cause
from taketurns._output.summary import render, summarize
from taketurns._report.feed import write_report

LIMIT = 60
DOWN = Fault("status", 500, {"Retry-After": "0"})  # retried at once, then given up


# -- the rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "traces", "cause"),
    [
        ("completed", [("user_closed", [])], None),
        ("completed", [("max_turns", []), ("user_closed", [])], None),
        ("completed", [("segment_timeout", []), ("rollout_timeout", [])], None),
        ("episode_timeout", [("episode_timeout", [])], None),
        ("completed", [("my_stop_hook", [])], None),
        ("completed", [("agent_completed", ["model"])], None),  # a recovered model error
        ("completed", [("user_closed", []), ("model_error", ["model"])], "model"),
        ("completed", [("harness_error", ["harness"])], "harness"),
        ("completed", [("user_closed", ["harness"])], "harness"),  # finalize failed
        ("completed", [("user_closed", ["scoring"])], "scoring"),
        ("env_error", [("model_error", ["model"])], "env"),
        ("cancelled", [("cancelled", [])], "cancelled"),
    ],
)
def test_the_line_between_failures_and_outcomes(
    stop: str, traces: list[tuple[str, list[str]]], cause: str | None
) -> None:
    assert cause_of(stop, traces) == cause
    raw = {
        "stop": stop,
        "traces": [
            {"stop_condition": s, "errors": [{"kind": k} for k in kinds]} for s, kinds in traces
        ],
    }
    assert record_cause(raw) == cause  # a format-1 record (no cause) by the same rule
    assert record_cause({**raw, "cause": "env"}) == "env"  # format 2: as written
    assert cause is None or cause in CAUSES


def test_is_failure_names_only_infrastructure_stops() -> None:
    assert is_failure("model_error")
    assert is_failure("harness_error")
    for stop in ("max_turns", "user_closed", "segment_timeout", "episode_timeout", None):
        assert not is_failure(stop)


def test_failed_episodes_are_left_out_of_the_means_and_counted_by_cause() -> None:
    def episode(reward: float, cause: str | None) -> dict[str, object]:
        return {
            "stop": "completed",
            "cause": cause,
            "traces": [{"agent": {"name": "a"}, "reward": reward, "rewards": {"r": reward}}],
        }

    summary = summarize(
        [
            episode(1.0, None),
            episode(0.0, None),
            episode(-5.0, "model"),
            episode(-7.0, "model"),
            episode(-1.0, "scoring"),
        ]
    )
    assert (summary["episodes"], summary["ok"], summary["failed"]) == (5, 2, 3)
    assert summary["failed_by_cause"] == {"model": 2, "scoring": 1}
    a = summary["agents"]["a"]
    assert (a["traces"], a["reward_mean"], a["rewards"]) == (2, 0.5, {"r": 0.5})
    assert a["failed_traces"] == 3
    assert a["failed_reward_mean"] == pytest.approx(-13 / 3)  # shown apart


def test_a_mean_over_no_ok_trace_is_null_and_shown_as_a_dash() -> None:
    """An agent whose every episode failed has no mean: null, never 0.0 (which a real
    mean of 0 would also be), and ``-`` in the results table."""
    failed = {
        "stop": "completed",
        "cause": "model",
        "traces": [{"agent": {"name": "a"}, "reward": 0.0, "rewards": {"r": 0.0}}],
    }
    summary = summarize([failed, failed], rollouts=2)
    a = summary["agents"]["a"]
    assert (a["traces"], a["failed_traces"], a["failed_reward_mean"]) == (0, 2, 0.0)
    assert a["reward_mean"] is None
    assert a["reward_stderr"] is None
    assert (a["turns_mean"], a["tokens_mean"]) == (None, None)
    assert a["pass_at_k"] == {"1": None, "2": None}
    assert json.loads(json.dumps(summary))["agents"]["a"]["reward_mean"] is None
    console = Console(width=80, record=True)
    console.print(render(summary))
    table = console.export_text()
    cells = {
        row[0]: row[1:]
        for line in table.splitlines()
        if (row := [c.strip() for c in line.split("│")[1:-1]])
    }
    assert cells["reward"] == ["-"]
    assert cells["pass@1"] == cells["pass@2"] == ["-"]
    assert cells["turns (mean)"] == ["-"]


# -- an endpoint that fails after N calls, through the CLI, then --resume ------------------


def test_endpoint_failing_mid_run_then_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy = {"up": True}
    calls = collections.Counter[str]()

    def decide(call: Call) -> Fault:
        calls["all"] += 1
        if call.preflight:
            return OK
        if calls["all"] > 20:
            healthy["up"] = healthy["up"] and False
        return OK if healthy["up"] else DOWN

    out = tmp_path / "run"
    PairEnv.reset()
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = ["faults-pair", "-n", "10", "-c", "2", "--model", "faulty"]
        argv += ["--base-url", endpoint.base_url, "-o", str(out)]
        assert eval_cli(*argv) == 1
        err = capsys.readouterr().err
        first = records(out)
        failed = {i for i, e in first.items() if not e["ok"]}
        assert failed, "the endpoint went down after 20 calls: some episodes failed"
        assert {first[i]["cause"] for i in failed} == {"model"}
        # one line naming how many and the main cause, after everything was written
        line = next(x for x in err.splitlines() if "episodes failed" in x)
        assert f"{len(failed)} of 10 episodes failed" in line
        assert "the model endpoint failed" in line
        assert f"--resume -o {out}" in line
        assert "Traceback" not in err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["failed_by_cause"] == {"model": len(failed)}
        assert summary["agents"]["a"]["traces"] == 10 - len(failed)
        assert summary["agents"]["a"]["failed_traces"] == len(failed)
        # the report lists every failed episode, whatever its transcript cap
        write_report(out, max_transcripts=1)
        page = (out / "report.html").read_text()
        for id_ in failed:
            assert f'data-episode-id="{id_}"' in page
        assert "failed: the model endpoint failed" in page

        healthy["up"] = True
        calls["all"] = -(10**9)  # stays healthy from now on
        assert eval_cli("-o", str(out), "--resume") == 0
        err = capsys.readouterr().err
    assert f"set aside {len(failed)} failed episode" in err
    assert pairs(out) == [(i, 0) for i in range(10)]  # each pair exactly once
    again = records(out)
    assert all(e["ok"] for e in again.values())
    assert {e["id"] for e in read_episodes(out / "failed.jsonl")} == failed
    for id_ in set(first) - failed:
        assert again[id_] == first[id_]  # kept as they were


# -- episode retries ----------------------------------------------------------------------


async def test_episode_retries_rerun_a_failed_episode_and_count_attempts(tmp_path: Path) -> None:
    """Odd tasks fail every call of their first episode attempt (4 calls: the client's
    3 retries); the whole episode is played again and the retry succeeds. Task 4 is
    down for good: it fails every attempt, and is recorded failed with 3 attempts."""
    seen = collections.Counter[int]()

    def decide(call: Call) -> Fault:
        if call.task is None:
            return OK
        seen[call.task] += 1
        if call.task == 4 or (call.task % 2 and seen[call.task] <= 4):
            return DOWN
        return OK

    out = tmp_path / "run"
    PairEnv.reset()
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            endpoint = await start(nursery, decide)
            config = EvalConfig(
                "faults-pair", num_tasks=6, concurrency=3, model="faulty",
                base_url=endpoint.base_url, episode_retries=2, env=PairConfig(turns=1),
            )  # fmt: skip
            run = await run_eval(
                config, RunDir(out), env=PairEnv(config.env), progress=False, report=False
            )
            nursery.cancel_scope.cancel()
    got = {e["task"]["idx"]: e for e in read_episodes(out / "episodes.jsonl")}
    assert sorted(got) == list(range(6))  # one record per pair, whatever the attempts
    for idx, e in got.items():
        expected = 3 if idx == 4 else 2 if idx % 2 else 1
        assert e["attempts"] == expected
        assert e["ok"] == (idx != 4)
        retried = e["info"].get("retried", [])
        assert [r["attempt"] for r in retried] == list(range(1, expected))
        assert {r["cause"] for r in retried} <= {"model"}
        # the record is the last attempt's: its sessions once each, scored once
        assert sorted(t["agent"]["name"] for t in e["traces"]) == ["a", "b"]
        assert all(t["rewards"]["counted"] == 1.0 for t in e["traces"])
    assert run.summary["agents"]["a"]["traces"] == 5  # retried attempts not summed
    assert run.summary["failed_by_cause"] == {"model": 1}


def test_which_failures_are_retried_is_configurable(tmp_path: Path) -> None:
    def decide(call: Call) -> Fault:
        return DOWN if call.task == 1 else OK

    out = tmp_path / "run"
    PairEnv.reset()
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = ["faults-pair", "-n", "2", "--model", "faulty", "--base-url", endpoint.base_url]
        argv += ["--episode-retries", "3", "--retry-causes", "env,scoring", "-o", str(out)]
        assert eval_cli(*argv) == 1
    got = {e["task"]["idx"]: e for e in records(out).values()}
    assert (got[1]["cause"], got[1]["attempts"]) == ("model", 1)  # not a retried cause
    assert "retry_causes" in (out / "config.toml").read_text()
    assert eval_cli("faults-pair", "--retry-causes", "weather", "-o", str(tmp_path / "x")) == 2


# -- envs never turn a failure into a game result -------------------------------------------


@pytest.mark.parametrize("env", ["kuhn-poker", "wordle"])
def test_a_seat_whose_endpoint_failed_fails_the_episode(
    env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kuhn does not score the failed seat as a forfeit, TextArena not as a lost game:
    the episode is failed, its rewards out of the means."""

    def decide(call: Call) -> Fault:
        return OK if call.preflight else DOWN

    out = tmp_path / "run"
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = [env, "-n", "2", "--model", "faulty", "--base-url", endpoint.base_url]
        assert eval_cli(*argv, "-o", str(out)) == 1
    for e in records(out).values():
        assert (e["ok"], e["cause"]) == (False, "model")
        for t in e["traces"]:
            assert not t["info"].get("forfeited")
            assert "payoff" not in t["info"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] == 0
    assert all(a["traces"] == 0 for a in summary["agents"].values())
    assert "2 of 2 episodes failed" in capsys.readouterr().err


@attrs.define
class ScorerConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=lambda: AgentConfig(model="builtin/echo"))


@register_env("outcomes-scorer")
class BrokenScorer(Env):
    """An env whose reward raises on odd tasks: scoring failed, the episode too."""

    config_class = ScorerConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, prompt=f"say {i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        await agents.player.run(task)

    @reward
    def fragile(self, task: Task, trace: Trace) -> float:
        if task.idx % 2:
            raise ValueError("the scorer broke")
        return 1.0


def test_a_broken_scorer_fails_its_episodes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert eval_cli("outcomes-scorer", "-n", "4", "-o", str(out)) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_by_cause"] == {"scoring": 2}
    assert summary["agents"]["player"]["reward_mean"] == 1.0
