"""``taketurns rescore`` (issue 26, item 3): recorded traces scored again with the
env's current rubric into a new run directory, with no agent model call; records
say where they came from, the summary and the report compare old and new means."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taketurns._cli.main import main
from taketurns._output.records import read_episodes

ENV = f"{Path(__file__).parent / 'rescoreenv.py'}:BonusKuhn"


def _eval(out: Path, *args: str) -> Path:
    assert main(["eval", ENV, "-n", "8", "-r", "2", *args, "-o", str(out), "--no-progress"]) in (
        0,
        1,
    )
    return out


def _records(run: Path) -> list[dict[str, Any]]:
    return sorted(read_episodes(run / "episodes.jsonl"), key=lambda e: e["id"])


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = _eval(tmp_path_factory.mktemp("rescore") / "base")
    # the agents' endpoint is now a closed port: any agent model call would fail
    config = (run / "config.toml").read_text()
    config = re.sub(
        r"^model = .*$",
        'model = "gone"\nbase_url = "http://127.0.0.1:9/v1"',
        config,
        count=1,
        flags=re.M,
    )
    (run / "config.toml").write_text(config)
    return run


def test_an_unchanged_rubric_reproduces_every_record(base: Path, tmp_path: Path) -> None:
    out = tmp_path / "same"
    assert main(["rescore", str(base), "-o", str(out)]) == 0
    old, new = _records(base), _records(out)
    assert len(new) == len(old) == 16
    for before, after in zip(old, new, strict=True):
        assert after["info"].pop("rescored") == {
            "from": str(base.resolve()),
            "episode": before["id"],
        }
        for t, u in zip(before["traces"], after["traces"], strict=True):
            assert u["info"].pop("rescored_from") == {
                "reward": t["reward"],
                "rewards": t["rewards"],
                "metrics": t["metrics"],
            }
        assert after == before
    moved = _summary(out)["rescored_from"]
    assert moved["run"] == str(base.resolve())
    for row in moved["agents"].values():
        assert row["reward_mean_before"] == row["reward_mean_after"]


def test_a_changed_reward_rewrites_the_means(base: Path, tmp_path: Path) -> None:
    """``--env.bonus=1`` adds 1 to every won hand: each trace's reward is its payoff
    plus 1 when the payoff is > 0, and each mean moves by the share of won hands."""
    out = tmp_path / "bonus"
    assert main(["rescore", str(base), "-o", str(out), "--env.bonus=1"]) == 0
    old = _summary(base)["agents"]
    summary = _summary(out)
    won: dict[str, int] = {}
    for e in _records(out):
        for t in e["traces"]:
            payoff = t["rewards"]["payoff"]
            assert t["rewards"]["won"] == (1.0 if payoff > 0 else 0.0)
            assert t["reward"] == payoff + t["rewards"]["won"]
            assert t["info"]["rescored_from"]["reward"] == payoff
            won[t["agent"]["name"]] = won.get(t["agent"]["name"], 0) + (payoff > 0)
    for name, row in summary["rescored_from"]["agents"].items():
        assert row["reward_mean_before"] == old[name]["reward_mean"]
        assert row["reward_mean_after"] == pytest.approx(old[name]["reward_mean"] + won[name] / 16)
        assert summary["agents"][name]["reward_mean"] == row["reward_mean_after"]
    assert "bonus = 1.0" in (out / "config.toml").read_text()
    page = (out / "report.html").read_text()
    [before] = re.findall(r'data-agent="player0" data-stat="before" data-value="([^"]+)"', page)
    [after] = re.findall(r'data-agent="player0" data-stat="after" data-value="([^"]+)"', page)
    assert float(before) == old["player0"]["reward_mean"]
    assert float(after) == summary["agents"]["player0"]["reward_mean"]


def test_a_fixed_reward_rescores_a_scoring_failure(tmp_path: Path) -> None:
    broken = _eval(tmp_path / "broken", "--env.broken=true")
    assert _summary(broken)["failed_by_cause"] == {"scoring": 16}
    out = tmp_path / "fixed"
    assert main(["rescore", str(broken), "-o", str(out), "--env.broken=false"]) == 0
    summary = _summary(out)
    assert (summary["ok"], summary["failed"]) == (16, 0)
    assert all(e["ok"] and e["cause"] is None for e in _records(out))
    # and the other way: a reward that now raises fails the episodes, exit 1
    again = tmp_path / "again"
    assert main(["rescore", str(out), "-o", str(again), "--env.broken=true"]) == 1
    assert _summary(again)["failed_by_cause"] == {"scoring": 16}


def test_a_rescore_scores_within_the_scoring_deadline_as_the_eval_does(tmp_path: Path) -> None:
    """A reward the eval cut off at ``timeouts.scoring_s`` is cut off again on
    rescore (not scored 1.0 after its 3 s): one scoring path, one deadline."""
    bounds = [f"--env.{p}.timeouts.scoring_s=0.2" for p in ("player0", "player1")]
    run = tmp_path / "slow"
    status = main(
        ["eval", ENV, "-n", "1", "--env.slow_s=3", *bounds, "-o", str(run), "--no-progress"]
    )
    assert status == 1  # the cut-off reward fails the episode (cause scoring)
    [before] = _records(run)
    out = tmp_path / "again"
    assert main(["rescore", str(run), "-o", str(out)]) == 1
    [after] = _records(out)
    for old, new in zip(before["traces"], after["traces"], strict=True):
        assert "slow" not in old["rewards"]  # cut off: absent, not 0.0
        assert "slow" not in new["rewards"]
        assert any("timeouts.scoring_s" in e["message"] for e in new["errors"])
    assert after["cause"] == before["cause"] == "scoring"


def test_bad_use_is_refused(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(base), "-o", str(tmp_path / "x"), "--model", "m"]) == 2
    assert "rescore takes only --env.<field>=V overrides" in capsys.readouterr().err
    assert main(["rescore", str(base), "-o", str(base)]) == 2
    assert "is the run being rescored" in capsys.readouterr().err
    assert main(["rescore", str(tmp_path)]) == 2
    assert "holds no episodes.jsonl" in capsys.readouterr().err
    assert main(["rescore", str(base), "-o", str(tmp_path / "y"), "--env.nothing=1"]) == 2
    assert "nothing" in capsys.readouterr().err


def test_the_default_directory_is_beside_the_source(base: Path, tmp_path: Path) -> None:
    source = Path(shutil.copytree(base, tmp_path / "run"))
    assert main(["rescore", str(source)]) == 0
    assert main(["rescore", str(source)]) == 0
    assert (tmp_path / "run-rescored" / "summary.json").is_file()
    assert (tmp_path / "run-rescored-2" / "summary.json").is_file()


@pytest.fixture
def judge_url() -> Iterator[str]:
    """``taketurns serve --policy judge`` on a free loopback port (a real endpoint)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "taketurns", "serve", "--policy", "judge", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_judge_added_later_scores_through_its_endpoint(tmp_path: Path, judge_url: str) -> None:
    """A run scored without a judge, rescored with an endpoint judge: the judge is
    called once per trace (its calls recorded apart), the agents never."""
    qa = str(Path(__file__).parent.parent / "examples" / "qa.jsonl")
    run = tmp_path / "qa"
    assert (
        main(
            [
                "eval",
                "jsonl",
                f"--env.taskset.path={qa}",
                "-n",
                "3",
                "-o",
                str(run),
                "--no-progress",
            ]
        )
        == 0
    )
    out = tmp_path / "judged"
    judge = ["--env.taskset.judge.model=judge", f"--env.taskset.judge.base_url={judge_url}"]
    assert main(["rescore", str(run), "-o", str(out), *judge]) == 0
    old = {e["id"]: e for e in _records(run)}
    right = []  # the built-in judge's verdict: the answer is in the reply
    for e in _records(out):
        [t] = e["traces"]
        [call] = t["judge_calls"]
        assert (call["model"], call["error"]) == ("judge", None)
        assert t["rewards"] == {"judge": call["score"]}
        assert t["turns"] == old[e["id"]]["traces"][0]["turns"]  # no new model turn
        reply = t["messages"][-1]["content"].casefold()
        right.append(float(e["task"]["answer"].casefold() in reply))
        assert call["score"] == right[-1]
    agents = _summary(out)["rescored_from"]["agents"]
    assert agents["agent"]["reward_mean_after"] == pytest.approx(sum(right) / 3)
