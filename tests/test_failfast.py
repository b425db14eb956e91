"""Fail fast (issue 24, item 2): ``--max-failures N|P%`` and the default that stops a
run whose model endpoint is down (``_eval.brake``). End to end: the real ``taketurns
serve`` killed mid-run under the real ``taketurns eval``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from taketurns import ConfigError, read_episodes
from taketurns._config.options import EvalConfig
from taketurns._eval.brake import ENDPOINT_DOWN_AFTER, Brake

CRASHENV = Path(__file__).with_name("crashenv.py")


def _taketurns(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "taketurns", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


@contextlib.contextmanager
def serving(latency_ms: int = 30, port: int = 0) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``taketurns serve`` on 127.0.0.1 (port 0: a free one): the process and its URL;
    killed (if still running) and reaped at the end."""
    command = [sys.executable, "-m", "taketurns", "serve", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:"), url
            yield server, url
        finally:
            server.kill()


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def test_a_killed_endpoint_stops_the_run_early_with_a_resume_hint(tmp_path: Path) -> None:
    with serving() as (server, url):
        _stopped_early(server, url, tmp_path / "run")


def _stopped_early(server: subprocess.Popen[str], url: str, out: Path) -> None:
    tasks = 400
    args = ["eval", f"{CRASHENV}:CrashOnce", "--env.crash_task=-1", "-n", str(tasks)]
    args += ["-c", "4", "--base-url", url, "--model", "builtin/bracket", "-o", str(out)]
    args += ["--request-retries", "1", "--request-backoff", "0.05", "--no-progress"]
    with _taketurns(*args) as ev:
        deadline = time.monotonic() + 60
        while _lines(out / "episodes.jsonl") < 20:  # polling a subprocess's output
            assert ev.poll() is None, ev.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server.kill()
        server.wait()
        _, stderr = ev.communicate(timeout=120)
    assert ev.returncode == 1, stderr
    assert f"the model endpoint at {url} failed {ENDPOINT_DOWN_AFTER} episodes in a row" in stderr
    assert f"continue with --resume -o {out}" in stderr
    records = list(read_episodes(out / "episodes.jsonl"))
    failed = [r for r in records if r["cause"] == "model"]
    # stopped at the 10th failure in a row; the 3 others running were let finish
    assert ENDPOINT_DOWN_AFTER <= len(failed) <= ENDPOINT_DOWN_AFTER + 4
    assert all(r["cause"] in (None, "model") for r in records)  # none cancelled
    assert len(records) < 100
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"].startswith("the model endpoint")
    # the terminal named the failure: the client's error, where it was raised
    assert "the model endpoint failed: ModelEndpointError at " in stderr


def _digest(cause: str | None) -> dict[str, object]:
    return {"ok": cause is None, "cause": cause, "traces": []}


def test_the_default_counts_model_failures_in_a_row_and_an_ok_episode_resets_it() -> None:
    brake = Brake(None, planned=1000)
    for _ in range(ENDPOINT_DOWN_AFTER - 1):
        assert not brake.add(_digest("model"))
    assert not brake.add(_digest("env"))  # another cause neither counts nor resets
    assert not brake.add(_digest("cancelled"))
    assert not brake.add(_digest(None))  # an ok episode: the endpoint answered
    for _ in range(ENDPOINT_DOWN_AFTER - 1):
        assert not brake.add(_digest("model"))
    assert brake.add(_digest("model"))
    assert brake.reason is not None
    assert not brake.add(_digest("model"))  # trips once


@pytest.mark.parametrize(
    ("limit", "planned", "stops_at"), [(0, 50, 1), (3, 50, 4), ("10%", 50, 6), ("100%", 5, None)]
)
def test_max_failures_is_a_count_or_a_share_of_the_run(
    limit: int | str, planned: int, stops_at: int | None
) -> None:
    brake = Brake(limit, planned=planned)
    tripped = [n for n in range(1, planned + 1) if brake.add(_digest("model"))]
    assert tripped == ([] if stops_at is None else [stops_at])


@pytest.mark.parametrize("bad", ["-1", "x", "101%", "%", True, 2.5])
def test_a_bad_max_failures_is_refused_by_name(bad: object) -> None:
    from taketurns import load_eval_config

    with pytest.raises(ConfigError, match=r"max_failures = .*percentage"):
        load_eval_config(EvalConfig, file_data={"env_id": "x", "max_failures": bad})


def test_max_failures_stops_worker_processes_too(tmp_path: Path) -> None:
    """On a worker backend the workers are stopped as on Ctrl-C: their running
    episodes are written as cancelled, and a resume reruns them."""
    out = tmp_path / "run"
    buggy = Path(__file__).with_name("buggyenv.py")
    args = ["eval", f"{buggy}:BuggyEnv", "-n", "60", "-c", "2", "-o", str(out), "--no-progress"]
    args += ["--backend", "processes", "--workers", "2", "--max-failures", "1"]
    with _taketurns(*args) as ev:
        _, stderr = ev.communicate(timeout=120)
    assert ev.returncode == 1, stderr
    assert "stopping: 2 episodes failed, more than --max-failures 1; stopping the workers" in stderr
    records = list(read_episodes(out / "episodes.jsonl"))
    assert len(records) < 60
    assert {r["cause"] for r in records} <= {"env", "cancelled"}
    assert json.loads((out / "summary.json").read_text())["stopped"].startswith("2 episodes")
