"""End-to-end: ``taketurns eval`` writes and re-reads the JSONL record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from taketurns._cli.main import main
from taketurns._output.records import loads_episode, read_episodes


def _episodes(out: Path) -> list[dict]:
    return list(read_episodes(out / "episodes.jsonl"))


def test_kuhn_eval_writes_zero_sum_episodes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["eval", "kuhn-poker", "-n", "40", "-c", "8", "-o", str(out), "--no-progress"]) == 0
    episodes = _episodes(out)
    assert len(episodes) == 40
    assert sorted(e["task"]["idx"] for e in episodes) == list(range(40))
    for e in episodes:
        assert e["ok"]
        assert e["errors"] == []
        assert [t["agent"]["name"] for t in e["traces"]] == ["player0", "player1"]
        assert sum(t["rewards"]["payoff"] for t in e["traces"]) == 0
        for t in e["traces"]:
            assert set(t) >= {
                "agent",
                "episode",
                "turns",
                "messages",
                "rewards",
                "reward",
                "metrics",
                "stop_condition",
                "errors",
                "info",
                "timing",
            }
            assert t["episode"]["id"] == e["id"]
            assert t["agent"] == {
                "name": t["agent"]["name"],
                "model": "builtin/bracket",
                "harness": "null",
                "trainable": True,
            }
            assert len(t["turns"]) >= 1
    # every line re-reads into the same records
    for line in (out / "episodes.jsonl").read_text().splitlines():
        episode = loads_episode(line)
        assert json.loads(line)["id"] == episode.id
        assert all(trace.turns for trace in episode.traces)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 40
    assert summary["agents"]["player0"]["reward_mean"] == pytest.approx(
        -summary["agents"]["player1"]["reward_mean"]
    )


def test_bad_env_option_is_refused_before_any_episode(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code = main(["eval", "kuhn-poker", "-n", "3", "-o", str(out), "--env.invalid_retries=-1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "env.invalid_retries = -1" in err
    assert not (out / "episodes.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env.player0.limits.max_turns=0"], "env.player0.limits.max_turns"),
        (["--env.nope=1"], "env.nope"),
        (["--num-tasks", "0"], "num_tasks"),
        (["--env.player1.model=gpt-4o"], "base URL"),
        (["--env.player0.harness=nope"], "unknown harness 'nope'"),
        (["--sampling.temperature=hot"], "sampling.temperature"),
        (["stray"], "unknown argument"),
    ],
)
def test_bad_options_name_the_field(tmp_path: Path, capsys, args, needle) -> None:
    out = tmp_path / "run"
    assert main(["eval", "kuhn-poker", "-n", "2", "-o", str(out), *args]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "episodes.jsonl").exists()


def test_unknown_env_lists_known(capsys) -> None:
    assert main(["eval", "no-such-env", "-n", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown env 'no-such-env'" in err
    assert "kuhn-poker" in err


def test_non_empty_dir_refused_then_resume_runs_only_owed_pairs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["eval", "kuhn-poker", "-n", "5", "-o", str(out), "--no-progress"]) == 0
    assert main(["eval", "kuhn-poker", "-n", "5", "-o", str(out), "--no-progress"]) == 2
    # tear the file: drop two episodes and leave half a line behind
    lines = (out / "episodes.jsonl").read_text().splitlines()
    (out / "episodes.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:50])
    assert main(["eval", "kuhn-poker", "-o", str(out), "--resume", "--no-progress"]) == 0
    episodes = _episodes(out)
    assert sorted(e["task"]["idx"] for e in episodes) == [0, 1, 2, 3, 4]
    assert (out / "episodes.jsonl").read_text().splitlines()[:3] == lines[:3]


def test_console_script_runs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "4", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(_episodes(out)) == 4


async def test_an_eval_cancelled_from_outside_still_sums_up_what_it_wrote(
    tmp_path: Path, autojump_clock
) -> None:
    import trio

    from taketurns import RunDir, load_eval_config, run_eval
    from taketurns._config.registry import envs

    data = {
        "env_id": "kuhn-poker",
        "num_tasks": 50,
        "concurrency": 4,
        "model": "builtin/bracket?latency_ms=1000",
    }
    config = load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)
    with trio.move_on_after(10):
        await run_eval(config, RunDir(tmp_path), progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    episodes = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert summary["interrupted"] is True
    assert summary["episodes"] == len(episodes)
    assert 0 < len(episodes) < 50
    assert (tmp_path / "report.html").exists()
