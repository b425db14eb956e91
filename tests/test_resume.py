"""A resume that bends (issue 24, items 3 and 4): how a run executes may change on
``--resume`` (recorded in ``resumes.jsonl``), ``-n``/``-r`` may grow, what it computes
may not; ``--resume`` without ``-o`` finds the newest run or creates nothing; a run
started by ``run_eval`` from Python is resumed by the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import trio
from rundirs import eval_cli, pairs
from test_failfast import serving

from taketurns import RunDir, load_eval_config, read_episodes, run_eval

CRASHENV = Path(__file__).with_name("crashenv.py")
ENV = f"{CRASHENV}:CrashOnce"


def _eval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taketurns", "eval", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _resumes(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "resumes.jsonl").read_text().splitlines()]


def test_resume_on_a_moved_endpoint_with_more_concurrency_and_tasks(tmp_path: Path) -> None:
    """The endpoint dies mid-run (the run stops early); the server comes back on
    another port; ``--resume`` with the new ``--base-url``, a new ``-c`` and a larger
    ``-n`` completes every pair exactly once."""
    out = tmp_path / "run"
    first = ["-n", "40", "-c", "2", "--model", "builtin/bracket", "-o", str(out)]
    first += ["--request-retries", "0", "--env.crash_task=-1"]
    with (
        serving(latency_ms=20) as (server, old_url),
        subprocess.Popen(
            [sys.executable, "-m", "taketurns", "eval", ENV, *first, "--base-url", old_url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ) as ev,
    ):
        deadline = time.monotonic() + 60
        episodes = out / "episodes.jsonl"
        while not episodes.exists() or len(episodes.read_bytes().splitlines()) < 5:
            assert ev.poll() is None, ev.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server.kill()
        _, stderr = ev.communicate(timeout=120)
    assert ev.returncode == 1, stderr
    assert "stopped early" in stderr
    before = list(read_episodes(out / "episodes.jsonl"))
    assert any(r["cause"] == "model" for r in before)
    assert len(before) < 40  # some pairs never played
    with serving(latency_ms=5) as (_, new_url):
        assert new_url != old_url
        proc = _eval("--resume", "-o", str(out), "-c", "4", "--base-url", new_url, "-n", "50")
    assert proc.returncode == 0, proc.stderr
    records = list(read_episodes(out / "episodes.jsonl"))
    assert sorted((r["task"]["idx"], r["rollout"]) for r in records) == [(i, 0) for i in range(50)]
    assert all(r["ok"] for r in records)
    set_aside = list(read_episodes(out / "failed.jsonl"))
    assert {r["cause"] for r in set_aside} == {"model"}
    (resume,) = _resumes(out)
    assert resume["changed"] == {
        "base_url": [old_url, new_url],
        "concurrency": [2, 4],
        "num_tasks": [40, 50],
    }
    stored = tomllib.loads((out / "config.toml").read_text())
    assert (stored["base_url"], stored["concurrency"], stored["num_tasks"]) == (new_url, 4, 50)


def test_resume_refuses_what_changes_the_result_and_a_smaller_n(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert eval_cli(ENV, "-n", "3", "-o", str(out), "--env.crash_task=-1") == 0
    config = (out / "config.toml").read_bytes()
    cases = [
        (["--model", "builtin/echo"], "model: unset in the stored config, 'builtin/echo' now"),
        (["--sampling.temperature=0.5"], "sampling.temperature: unset in the stored config"),
        (["--env.crash_task=2"], "env.crash_task: -1 in the stored config, 2 now"),
        (["-n", "2"], "never drop them"),
    ]
    for args, expected in cases:
        proc = _eval("--resume", "-o", str(out), *args)
        assert proc.returncode == 2, proc.stderr
        assert expected in proc.stderr
    assert (out / "config.toml").read_bytes() == config
    assert not (out / "resumes.jsonl").exists()
    # how it runs may change, and a plain resume is recorded too
    assert eval_cli("--resume", "-o", str(out), "--max-failures", "5%", "-r", "2") == 0
    assert eval_cli("--resume", "-o", str(out)) == 0
    assert [r["changed"] for r in _resumes(out)] == [
        {"max_failures": [None, "5%"], "rollouts": [1, 2]},
        {},
    ]
    assert pairs(out) == [(i, r) for i in range(3) for r in range(2)]


def test_resume_without_a_directory_takes_the_newest_run_or_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert eval_cli(ENV, "--resume", "--env.crash_task=-1") == 2
    assert list(tmp_path.iterdir()) == []  # no junk directory holding only .lock
    assert eval_cli(ENV, "-n", "2", "--env.crash_task=-1") == 0
    time.sleep(1.1)  # the default directory's name has a one-second stamp
    assert eval_cli(ENV, "-n", "2", "--env.crash_task=-1", "-c", "1") == 0
    older, newer = sorted((tmp_path / "outputs").iterdir())
    assert eval_cli(ENV, "--resume", "-n", "4") == 0
    assert pairs(newer) == [(i, 0) for i in range(4)]
    assert pairs(older) == [(0, 0), (1, 0)]
    assert eval_cli(ENV, "--resume", "--model", "builtin/echo") == 2  # no run of that model
    assert len(list((tmp_path / "outputs").iterdir())) == 2


def test_a_run_started_from_python_is_resumed_by_the_cli(tmp_path: Path) -> None:
    from crashenv import CrashConfig, CrashOnce

    out = tmp_path / "run"
    data = {"env_id": ENV, "num_tasks": 3, "env": {"crash_task": -1}}
    config = load_eval_config(CrashConfig, file_data=data)
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=False)
    trio.run(lambda: run_eval(config, run_dir, env=CrashOnce(config.env), progress=False))
    # the same config.toml as the CLI writes for the same options
    cli = tmp_path / "cli"
    assert eval_cli(ENV, "-n", "3", "--env.crash_task=-1", "-o", str(cli)) == 0
    assert (out / "config.toml").read_text() == (cli / "config.toml").read_text()
    stored = tomllib.loads((out / "config.toml").read_text())
    assert (stored["env_id"], stored["num_tasks"], stored["env"]["crash_task"]) == (ENV, 3, -1)
    assert "output_dir" not in stored
    before = (out / "episodes.jsonl").read_bytes()
    assert eval_cli("--resume", "-o", str(out), "-n", "5") == 0
    assert pairs(out) == [(i, 0) for i in range(5)]
    assert (out / "episodes.jsonl").read_bytes().startswith(before)


def test_a_roles_endpoint_may_change_its_model_may_not() -> None:
    from taketurns._cli.resume import compare

    stored = {
        "num_tasks": 4,
        "model": "m",
        "env": {"player": {"base_url": "http://a/v1", "model": "x", "sampling": {"seed": 1}}},
    }
    given = {
        "num_tasks": 4,
        "model": "m",
        "concurrency": 8,
        "env": {
            "player": {
                "base_url": "http://b/v1",
                "api_key_var": "KEY",
                "model": "y",
                "sampling": {"seed": 2},
            }
        },
    }
    refused, changed = compare(stored, given)
    assert changed == {
        "concurrency": [None, 8],
        "env.player.api_key_var": [None, "KEY"],
        "env.player.base_url": ["http://a/v1", "http://b/v1"],
    }
    assert refused == [
        "env.player.model: 'x' in the stored config, 'y' now",
        "env.player.sampling.seed: 1 in the stored config, 2 now",
    ]


def test_a_refused_resume_is_refused_before_the_endpoint_check(tmp_path: Path) -> None:
    """A changed ``--seed`` on a run whose endpoint is now down: the refusal, not a
    preflight timeout (the endpoint is never asked)."""
    out = tmp_path / "run"
    with serving(latency_ms=0) as (_, url):
        args = ["-n", "2", "--model", "builtin/bracket", "--base-url", url, "-o", str(out)]
        assert eval_cli(ENV, *args, "--env.crash_task=-1") == 0
    proc = _eval("--resume", "-o", str(out), "--seed", "7", "--preflight-timeout", "2")
    assert proc.returncode == 2, proc.stderr
    assert "seed: 0 in the stored config, 7 now" in proc.stderr
    assert "preflight" not in proc.stderr
