"""``--backend ray`` on a local two-CPU Ray cluster started by this module: the same
records as the local backend, a dead worker's pairs redone exactly once, ``--resume``
across backends. The test extra installs Ray (``taketurns[ray]``); without it these fail
naming it."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crashenv
import pytest
import trio
from crashenv import CrashConfig, CrashOnce
from rundirs import eval_cli, flat, pairs, records, steady
from sameruns import assert_same_runs

from taketurns import ConfigError, Env, EvalConfig, RunDir, read_episodes, run_eval
from taketurns._backends.ray import _guest_run, _shutdown, require_ray
from taketurns._backends.shards import MAX_LOST, split
from taketurns._errors import WorkerLost


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    # ray.init writes to this process's environment (RAY_AUTH_MODE=token,
    # PYTHONBREAKPOINT, ...), which every later test and its subprocesses would inherit:
    # RAY_AUTH_MODE made tests/raycluster.py's cluster demand a token it was never given
    saved = dict(os.environ)
    with pytest.MonkeyPatch.context() as mp:
        # read by Ray at import: every Ray process on 127.0.0.1; no usage reports
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        # this cluster's own token (Ray >= 2.52 turns token authentication on): without
        # one, ray.init generates one into ~/.ray/auth_token, the user's home
        mp.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
        import ray  # the test extra installs it: missing, this fails and names it

        context = ray.init(
            num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR
        )
        # the test env lives in a module of the tests, which workers cannot import
        ray.cloudpickle.register_pickle_by_value(crashenv)
        try:
            yield ray
        finally:
            # the engine's own shutdown: this instance's session directory removed too
            _shutdown(ray, context.address_info["session_dir"])
            os.environ.clear()
            os.environ.update(saved)


# --- without Ray ------------------------------------------------------------------------


def test_concurrency_is_split_into_near_equal_shares() -> None:
    assert split(32, 3) == [11, 11, 10]
    assert split(5, 5) == [1] * 5
    assert sum(split(97, 7)) == 97


def test_a_guest_run_streams_batches_as_trio_makes_them() -> None:
    out: list[tuple[int, int, str]] = []

    async def main() -> None:
        for i in range(3):
            out.append((i, 0, "x"))
            await trio.sleep(0.01)
        out.append((3, 0, "y"))

    batches = list(_guest_run(main, out))
    assert [item for batch in batches for item in batch] == [
        (0, 0, "x"),
        (1, 0, "x"),
        (2, 0, "x"),
        (3, 0, "y"),
    ]
    assert batches[0] == [(0, 0, "x")]  # sent before main went on


def test_a_guest_run_raises_what_main_raised() -> None:
    async def main() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("broken shard")

    with pytest.raises(ValueError, match="broken shard"):
        list(_guest_run(main, []))


def test_closing_a_guest_run_early_cancels_trio() -> None:
    out: list[tuple[int, int, str]] = []
    seen: list[str] = []

    async def main() -> None:
        out.append((0, 0, "x"))
        try:
            await trio.sleep_forever()
        finally:
            seen.append("cancelled")

    stream = _guest_run(main, out)
    assert next(stream) == [(0, 0, "x")]
    stream.close()
    assert seen == ["cancelled"]


def test_missing_ray_is_a_config_error_before_any_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install 'taketurns\[ray\]'"):
        require_ray()
    out = tmp_path / "run"
    assert eval_cli("kuhn-poker", "-n", "2", "--backend", "ray", "-o", str(out)) == 2
    assert "pip install 'taketurns[ray]'" in capsys.readouterr().err
    assert not (out / "episodes.jsonl").exists()


def test_an_unknown_backend_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eval_cli("kuhn-poker", "-n", "2", "--backend", "spark", "-o", str(tmp_path / "r")) == 2
    assert "backend = 'spark': expected local or ray or processes" in capsys.readouterr().err


# --- on a local Ray cluster -------------------------------------------------------------


@pytest.mark.parametrize("tmpdir", ["given", "long"])
def test_the_private_instance_leaves_nothing_in_the_home_or_the_temp_dir(
    tmp_path: Path, tmpdir: str
) -> None:
    """``--backend ray`` with no address starts a Ray instance of its own; Ray (>= 2.52)
    would write its token to ``~/.ray/auth_token``, where the user's next cluster reads
    it, and leaves its session (logs, sockets) in ``$TMPDIR/ray``. The eval gives its
    instance a token of its own and removes the session after stopping it. Under a
    ``TMPDIR`` too long for Ray's socket paths (107 bytes), the instance runs from a
    short folder of its own in ``/tmp``, removed with it."""
    home, out = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
    if tmpdir == "long":
        env["TMPDIR"] = str(tmp_path / ("t" * 60))
        Path(env["TMPDIR"]).mkdir()
    own_before = set(Path("/tmp").glob("taketurns-ray-*"))
    cmd = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "4"]
    done = subprocess.run(
        [*cmd, "--backend", "ray", "-o", str(out), "--no-progress"],
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert len(list(read_episodes(out / "episodes.jsonl"))) == 4
    assert not (home / ".ray" / "auth_token").exists()
    sessions = Path(env["TMPDIR"]) / "ray"
    assert not sessions.exists() or [p.name for p in sessions.iterdir()] == []
    assert set(Path("/tmp").glob("taketurns-ray-*")) == own_before


def test_ray_writes_the_same_records_as_local(ray_cluster: Any, tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert eval_cli("kuhn-poker", "-n", "200", "-c", "32", "-o", str(local)) == 0
    assert (
        eval_cli("kuhn-poker", "-n", "200", "-c", "32", "--backend", "ray", "-o", str(remote)) == 0
    )
    a, b = records(local), records(remote)
    assert len(b) == 200
    assert a.keys() == b.keys()
    for key, episode in b.items():
        assert list(episode) == list(a[key])  # same fields, same order
        assert steady(episode) == steady(a[key])
        assert episode["ok"]
        assert sum(t["rewards"]["payoff"] for t in episode["traces"]) == 0
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (local, remote))
    for field in ("episodes", "ok", "failed", "episode_stops"):
        assert sb[field] == sa[field]
    # the same numbers, summed in another order
    assert flat(sb["agents"]) == pytest.approx(flat(sa["agents"]))
    assert (remote / "report.html").is_file()


def test_ray_replays_a_seeded_run_at_any_concurrency(ray_cluster: Any, tmp_path: Path) -> None:
    # issue 26: one seed, -c 1 here and -c 64 on Ray: the same records but ids and timing
    base = ["kuhn-poker", "-n", "40", "-r", "2", "--seed", "7"]
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert eval_cli(*base, "-c", "1", "-o", str(local)) == 0
    assert eval_cli(*base, "-c", "64", "--backend", "ray", "-o", str(remote)) == 0
    assert_same_runs(local, remote, 80)


def _crash_run(tmp_path: Path, **options: Any) -> tuple[EvalConfig, Env, RunDir]:
    env_config = CrashConfig(marker=str(tmp_path / "marker"), log=str(tmp_path / "log"), **options)
    config = EvalConfig(
        env_id="crash-once", num_tasks=24, concurrency=4, backend="ray", env=env_config
    )
    run_dir = RunDir(tmp_path / "run")
    run_dir.prepare(resume=False, overwrite=False)
    return config, CrashOnce(env_config), run_dir


def test_a_dead_workers_pairs_are_redone_exactly_once(ray_cluster: Any, tmp_path: Path) -> None:
    config, env, run_dir = _crash_run(tmp_path)
    run = trio.run(lambda: run_eval(config, run_dir, env=env, progress=False, report=False))
    dead = int((tmp_path / "marker").read_text())
    assert run.written == 24
    assert pairs(run_dir.path) == [(i, 0) for i in range(24)]  # each exactly once
    assert all(e["ok"] for e in read_episodes(run_dir.episodes_path))
    assert run.summary["episodes"] == 24
    by = [tuple(map(int, line.split())) for line in (tmp_path / "log").read_text().splitlines()]
    # the dead worker streamed episodes before dying (its shard: even tasks) ...
    assert {idx for idx, pid in by if pid == dead} >= {0, 2}
    # ... and the crashing task ran to the end in another worker
    assert [pid for idx, pid in by if idx == config.env.crash_task] != [dead]
    assert any(idx == config.env.crash_task for idx, _ in by)


def test_a_pair_that_kills_every_worker_stops_the_eval(ray_cluster: Any, tmp_path: Path) -> None:
    config, env, run_dir = _crash_run(tmp_path, always=True, crash_task=1)
    config.num_tasks = 6
    with pytest.raises(WorkerLost, match=r"\(1, 0\)") as info:
        trio.run(lambda: run_eval(config, run_dir, env=env, progress=False, report=False))
    assert (1, 0) in info.value.pairs
    assert len((tmp_path / "marker").read_text().split()) == MAX_LOST + 1
    written = pairs(run_dir.path)
    assert (1, 0) not in written
    assert len(written) == len(set(written))


def test_cancelling_the_driver_stops_the_workers(ray_cluster: Any, tmp_path: Path) -> None:
    config, env, run_dir = _crash_run(tmp_path, hang=True)
    config.num_tasks = 4

    async def run() -> bool:
        with trio.move_on_after(3) as scope:
            await run_eval(config, run_dir, env=env, progress=False, report=False)
        return scope.cancelled_caught

    start = time.monotonic()
    assert trio.run(run)
    assert time.monotonic() - start < 20
    assert pairs(run_dir.path) == []  # nothing finished; --resume reruns all four
    # the hung workers were stopped: their CPUs come back
    while ray_cluster.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() - start < 30, ray_cluster.available_resources()
        time.sleep(0.1)


def _truncate(out: Path, keep: int) -> None:
    lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    # keep `keep` records and a torn last line, as a crash mid-write leaves
    (out / "episodes.jsonl").write_text("".join(lines[:keep]) + lines[keep][:40])
    (out / "summary.json").unlink()


def test_resume_works_across_backends(ray_cluster: Any, tmp_path: Path) -> None:
    first, second = tmp_path / "local-then-ray", tmp_path / "ray-then-local"
    base = ["kuhn-poker", "-n", "16", "-r", "2", "-c", "4"]
    assert eval_cli(*base, "-o", str(first)) == 0
    _truncate(first, 9)
    assert eval_cli("--resume", "-o", str(first), "--backend", "ray") == 0
    assert pairs(first) == [(i, r) for i in range(16) for r in range(2)]
    assert json.loads((first / "summary.json").read_text())["episodes"] == 32

    assert eval_cli(*base, "--backend", "ray", "-o", str(second)) == 0
    _truncate(second, 5)
    assert eval_cli("--resume", "-o", str(second), "--backend", "local") == 0
    assert pairs(second) == [(i, r) for i in range(16) for r in range(2)]
    # and both runs hold the same records
    a, b = records(first), records(second)
    assert {k: steady(v) for k, v in a.items()} == {k: steady(v) for k, v in b.items()}
