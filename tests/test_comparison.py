"""``taketurns compare A B`` (issue 26, item 4): the paired difference per task, per
agent, with its bootstrap interval; on hand-made records and on real run directories
made by the CLI (``taketurns eval kuhn-poker -n 8 -r 2`` and variants)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taketurns._cli.main import main
from taketurns._output.comparison import compare
from taketurns._output.records import read_episodes


def _episode(task: int, reward: float, *, cause: str | None = None) -> dict[str, Any]:
    return {
        "task": {"idx": task, "name": f"t{task}"},
        "stop": "completed",
        "cause": cause,
        "traces": [
            {"agent": {"name": "a"}, "reward": reward, "rewards": {"r": reward}},
            {"agent": {"name": "user"}, "reward": 0.0, "rewards": {}},  # not scored
        ],
    }


def test_paired_difference_exact_values() -> None:
    """A scores tasks 0, 1 as 0 and 1 (task 1 over two rollouts 0 and 2); B scores 1
    and 1, and task 2 A never ran: 2 matched, differences 1 and 0, so the mean is 0.5
    and the interval that of two units 1 and 0 ([0, 1], worked out in test_bootstrap).
    A failed episode counts nowhere."""
    a = [_episode(0, 0.0), _episode(1, 0.0), _episode(1, 2.0), _episode(0, 9.0, cause="model")]
    b = [_episode(0, 1.0), _episode(1, 1.0), _episode(2, 5.0)]
    row = compare(a, b)["agents"]["a"]
    assert row == {
        "tasks_a": 2,
        "tasks_b": 3,
        "matched": 2,
        "mean_a": 0.5,
        "mean_b": 1.0,
        "diff": 0.5,
        "diff_ci95": [0.0, 1.0],
        "b_higher": 1,
        "b_lower": 0,
        "tied": 1,
    }


def test_an_agent_without_rewards_is_left_out() -> None:
    assert set(compare([_episode(0, 1.0)], [_episode(0, 0.0)])["agents"]) == {"a"}


def test_no_matched_task_no_difference() -> None:
    row = compare([_episode(0, 1.0)], [_episode(1, 1.0)])["agents"]["a"]
    assert (row["matched"], row["diff"], row["diff_ci95"], row["mean_a"]) == (0, None, None, None)


def _eval(out: Path, *args: str) -> Path:
    assert (
        main(["eval", "kuhn-poker", "-n", "8", "-r", "2", *args, "-o", str(out), "--no-progress"])
        == 0
    )
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    return {
        "a": _eval(root / "a"),
        "again": _eval(root / "again"),
        # player1 answers without a bracketed action: it forfeits every hand (-1)
        "echo": _eval(root / "echo", "--env.player1.model=builtin/echo"),
        "fewer": _eval(root / "fewer", "-n", "5", "--env.player1.model=builtin/echo"),
    }


def _json(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> dict[str, Any]:
    assert main(["compare", str(a), str(b), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_rerun_differs_by_nothing(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    result = _json(capsys, runs["a"], runs["again"])
    assert set(result["agents"]) == {"player0", "player1"}
    for row in result["agents"].values():
        assert (row["matched"], row["tied"], row["diff"], row["diff_ci95"]) == (
            8,
            8,
            0.0,
            [0.0, 0.0],
        )


def test_a_changed_seat_moves_the_means(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    summary = json.loads((runs["a"] / "summary.json").read_text())["agents"]
    result = _json(capsys, runs["a"], runs["echo"])["agents"]
    p0, p1 = result["player0"], result["player1"]
    assert p0["matched"] == p1["matched"] == 8
    # every task has both rollouts ok: the mean over tasks is the run's mean
    assert p1["mean_a"] == pytest.approx(summary["player1"]["reward_mean"])
    assert p1["mean_b"] == -1.0
    assert p1["diff"] == pytest.approx(-1.0 - summary["player1"]["reward_mean"])
    assert p0["diff"] == pytest.approx(-p1["diff"])  # zero-sum
    low, high = p1["diff_ci95"]
    assert low <= p1["diff"] <= high < 0.5
    assert p1["b_higher"] + p1["b_lower"] + p1["tied"] == 8


def test_only_tasks_in_both_runs_are_paired(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``fewer`` is ``echo`` at -n 5: A's tasks 5-7 have no partner and count nowhere."""
    row = _json(capsys, runs["a"], runs["fewer"])["agents"]["player1"]
    assert (row["tasks_a"], row["tasks_b"], row["matched"]) == (8, 5, 5)
    first = [
        [e for e in read_episodes(runs[name] / "episodes.jsonl") if e["task"]["idx"] < 5]
        for name in ("a", "echo")
    ]
    expected = compare(*first)["agents"]["player1"]
    assert row == {**expected, "tasks_a": 8}


def test_the_table_names_the_matched_tasks(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(runs["a"]), str(runs["fewer"])]) == 0
    err = capsys.readouterr().err
    [line] = [ln for ln in err.splitlines() if "player1" in ln]
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert cells[1] == "5 (8, 5)"
    assert cells[3] == "-1.000"


def test_a_directory_without_episodes_is_refused(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(runs["a"]), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "compare B:" in err
    assert "holds no episodes.jsonl" in err
