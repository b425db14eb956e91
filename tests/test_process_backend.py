"""``--backend processes``: the same records as the local backend from worker processes,
a dead worker's pairs redone exactly once, a worker's own error raised in the driver,
``--resume`` across backends, and stopping (cancellation, SIGINT, a killed driver)
leaving no process, zombie, descriptor or temp directory behind (each test runs with a
temp directory of its own, checked empty of ``taketurns-*`` after it). Real
subprocesses throughout."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from crashenv import CrashConfig, CrashOnce
from procs import children, marked, open_fds, scratch_dirs
from rundirs import eval_cli, flat, pairs, records, steady

from taketurns import (
    ConfigError,
    EvalConfig,
    OptionError,
    RunDir,
    Task,
    load_eval_config,
    read_episodes,
    run_eval,
)
from taketurns._backends.shards import MAX_LOST, Ledger, Shard, deal
from taketurns._errors import WorkerDied, WorkerError, WorkerLost

LIMIT = 60  # seconds any one subprocess step may take on a loaded machine


@pytest.fixture(autouse=True)
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's temp directory (``TMPDIR`` of the drivers it starts, too): the
    workers' temp directories are made there, and none is left after the test."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setenv("TMPDIR", str(root))
    yield root
    assert scratch_dirs(root) == []


# --- sharding and the ledger (no processes) ----------------------------------------------


def test_pairs_are_dealt_round_robin_with_shares_of_the_limits() -> None:
    config = EvalConfig(env_id="x", concurrency=5, max_concurrent_calls=3)
    owed = [(Task(idx=i), 0) for i in range(7)]
    shards = deal(owed, 4, config)  # 4 workers, but only 3 model calls at once
    assert [[t.idx for t, _ in s.pairs] for s in shards] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [(s.share, s.calls) for s in shards] == [(2, 1), (2, 1), (1, 1)]
    worker = shards[2].config(config)
    assert (worker.backend, worker.concurrency, worker.max_concurrent_calls) == ("local", 1, 1)
    assert len(deal(owed[:2], 8, EvalConfig(env_id="x", concurrency=32))) == 2
    assert len(deal(owed, 8, EvalConfig(env_id="x", concurrency=1))) == 1


def test_the_ledger_writes_each_pair_once_and_gives_up_after_max_lost() -> None:
    ledger = Ledger()
    shard = Shard([(Task(idx=i), 0) for i in range(4)], share=2, calls=None)
    assert ledger.receive(shard, (0, 0))
    assert not ledger.receive(shard, (0, 0))  # a redelivery is dropped
    died = WorkerDied("worker process 1 was killed by SIGKILL")
    for lost in range(1, MAX_LOST + 1):
        rest = ledger.redo(shard, died)
        assert rest is not None
        assert [t.idx for t, _ in rest.pairs] == [1, 2, 3]
        assert (rest.lost, rest.share) == (lost, 2)
        shard = rest
    with pytest.raises(WorkerLost, match=r"workers died 4 times running the pairs \(1, 0\)"):
        ledger.redo(shard, died)
    for idx in (1, 2, 3):
        assert ledger.receive(shard, (idx, 0))
    assert ledger.redo(shard, died) is None  # nothing owed: nothing to redo


# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "toml", "problem"),
    [
        (["--workers", "0"], "", "workers = 0: expected an integer >= 1"),
        (["--workers", "two"], "", "workers = 'two': expected an integer"),
        ([], 'workers = "2"\n', "workers = '2': expected an integer"),
        ([], "workers = true\n", "workers = True: expected an integer"),
        (["--backend", "threads"], "", "backend = 'threads': expected local or ray or processes"),
    ],
)
def test_bad_workers_and_backends_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], toml: str, problem: str
) -> None:
    config = tmp_path / "run.toml"
    config.write_text(f'env_id = "kuhn-poker"\n{toml}')
    out = tmp_path / "run"
    assert eval_cli("-C", str(config), "-o", str(out), *args) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.strip() for line in lines] == ["error:", f"- {problem}"]
    assert not out.exists()


def test_workers_and_backend_load_from_toml_flags_and_python() -> None:
    kuhn = CrashOnce.config_class
    config = load_eval_config(
        kuhn, file_data={"env_id": "crash-once", "backend": "processes", "workers": 2}
    )
    assert (config.backend, config.workers) == ("processes", 2)
    config = load_eval_config(
        kuhn,
        file_data={"env_id": "crash-once"},
        overrides=[("backend", "processes"), ("workers", "3")],
    )
    assert (config.backend, config.workers) == ("processes", 3)
    assert load_eval_config(kuhn, file_data={"env_id": "crash-once"}).workers is None
    with pytest.raises(OptionError, match="workers = 0 is not accepted"):
        EvalConfig(env_id="x", workers=0)


async def test_an_env_class_workers_cannot_import_is_refused(tmp_path: Path) -> None:
    local = type("LocalCrash", (CrashOnce,), {"__module__": "__main__"})
    config = EvalConfig(env_id="crash-once", num_tasks=2, backend="processes", env=CrashConfig())
    with pytest.raises(ConfigError, match="LocalCrash is defined in __main__"):
        await run_eval(config, RunDir(tmp_path), env=local(config.env), progress=False)


# --- same records as local; resume across backends ----------------------------------------


def test_processes_write_the_same_records_as_local(tmp_path: Path) -> None:
    local, procs = tmp_path / "local", tmp_path / "processes"
    base = ["kuhn-poker", "-n", "200", "-r", "2", "-c", "32"]
    assert eval_cli(*base, "-o", str(local)) == 0
    assert eval_cli(*base, "--backend", "processes", "--workers", "2", "-o", str(procs)) == 0
    a, b = records(local), records(procs)
    assert len(b) == 400
    assert a.keys() == b.keys()
    for key, episode in b.items():
        assert list(episode) == list(a[key])  # same fields, same order
        assert steady(episode) == steady(a[key])  # same payoffs, turns, messages ...
        assert episode["ok"]
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (local, procs))
    assert sb.keys() == sa.keys()
    # identical apart from timing; the agents' means were summed in another order
    assert {k: v for k, v in steady(sb).items() if k != "agents"} == {
        k: v for k, v in steady(sa).items() if k != "agents"
    }
    assert flat(sb["agents"]) == pytest.approx(flat(sa["agents"]))
    assert (procs / "report.html").is_file()


def _truncate(out: Path, keep: int) -> None:
    lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    # keep `keep` records and a torn last line, as a crash mid-write leaves
    (out / "episodes.jsonl").write_text("".join(lines[:keep]) + lines[keep][:40])
    (out / "summary.json").unlink()


def test_resume_works_across_backends(tmp_path: Path) -> None:
    first, second = tmp_path / "local-then-processes", tmp_path / "processes-then-local"
    base = ["kuhn-poker", "-n", "16", "-r", "2", "-c", "4"]
    everything = [(i, r) for i in range(16) for r in range(2)]
    assert eval_cli(*base, "-o", str(first)) == 0
    _truncate(first, 9)
    assert eval_cli("--resume", "-o", str(first), "--backend", "processes", "--workers", "2") == 0
    assert pairs(first) == everything
    assert json.loads((first / "summary.json").read_text())["episodes"] == 32

    assert eval_cli(*base, "--backend", "processes", "-o", str(second)) == 0
    _truncate(second, 5)
    assert eval_cli("--resume", "-o", str(second), "--backend", "local") == 0
    assert pairs(second) == everything
    a, b = records(first), records(second)
    assert {k: steady(v) for k, v in a.items()} == {k: steady(v) for k, v in b.items()}


# --- workers that die, fail or are stopped -------------------------------------------------


def _crash_run(tmp_path: Path, **options: Any) -> tuple[EvalConfig, CrashOnce, RunDir]:
    env_config = CrashConfig(marker=str(tmp_path / "marker"), log=str(tmp_path / "log"), **options)
    config = EvalConfig(
        env_id="crash-once",
        num_tasks=24,
        concurrency=4,
        backend="processes",
        workers=2,
        env=env_config,
    )
    run_dir = RunDir(tmp_path / "run")
    run_dir.prepare(resume=False, overwrite=False)
    run_dir.unlock()  # run_eval takes the directory's lock itself (and releases it)
    return config, CrashOnce(env_config), run_dir


def _log(tmp_path: Path) -> list[tuple[int, int]]:
    path = tmp_path / "log"
    if not path.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


async def test_a_dead_workers_pairs_are_redone_exactly_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    orphan = f"TAKETURNS_ORPHAN_{uuid.uuid4().hex}"
    # the episodes print to stdout; the dying worker leaves a process of its own behind
    config, env, run_dir = _crash_run(tmp_path, chatter=True, orphan=orphan)
    before, fds = children(), open_fds()
    try:
        run = await run_eval(config, run_dir, env=env, progress=False, report=False)
        assert marked(orphan) == []  # killed with the dead worker's process group
    finally:
        _reap(orphan)
    dead = int((tmp_path / "marker").read_text())
    assert run.written == 24
    assert pairs(run_dir.path) == [(i, 0) for i in range(24)]  # each exactly once
    assert all(e["ok"] for e in read_episodes(run_dir.episodes_path))
    assert run.summary["episodes"] == 24
    log = _log(tmp_path)
    # the dead worker sent episodes before dying (its shard: even tasks) ...
    assert {idx for idx, pid in log if pid == dead} >= {0, 2}
    # ... and the crashing task ran to the end in another worker
    assert [pid for idx, pid in log if idx == config.env.crash_task] not in ([], [dead])
    assert "not a result" in capfd.readouterr().out  # the workers' prints reach stdout
    assert children() == before
    assert open_fds() == fds


async def test_a_pair_that_kills_every_worker_stops_the_eval(tmp_path: Path) -> None:
    config, env, run_dir = _crash_run(tmp_path, always=True, crash_task=1)
    config.num_tasks = 6
    before = children()
    with pytest.raises(WorkerLost, match=r"\(1, 0\).*killed|\(1, 0\).*exited") as info:
        await run_eval(config, run_dir, env=env, progress=False, report=False)
    assert (1, 0) in info.value.pairs
    assert len((tmp_path / "marker").read_text().split()) == MAX_LOST + 1
    written = pairs(run_dir.path)
    assert (1, 0) not in written
    assert len(written) == len(set(written))
    assert children() == before


@pytest.mark.parametrize("kind", ["bug", "config"])
async def test_an_env_failing_in_setup_fails_the_eval_with_its_error(
    tmp_path: Path, kind: str
) -> None:
    config, env, run_dir = _crash_run(tmp_path, setup_error=kind)
    before = children()
    if kind == "bug":  # not a taketurns error: the worker's traceback comes along
        with pytest.raises(WorkerError, match="RuntimeError: the word list is empty") as info:
            await run_eval(config, run_dir, env=env, progress=False, report=False)
        assert "in setup" in info.value.traceback
        assert "crashenv.py" in info.value.traceback
    else:  # a taketurns error is raised as itself
        with pytest.raises(ConfigError) as caught:
            await run_eval(config, run_dir, env=env, progress=False, report=False)
        assert caught.value.problems == ["env.data = 'missing.jsonl': no such file"]
    assert pairs(run_dir.path) == []
    assert children() == before


async def test_cancelling_the_driver_writes_the_workers_cancelled_episodes(
    tmp_path: Path,
) -> None:
    config, env, run_dir = _crash_run(tmp_path, hang=True)
    config.num_tasks = 8
    before, fds = children(), open_fds()
    with trio.move_on_after(LIMIT) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_eval(config, run_dir, env=env, progress=False, report=False)
            )
            # -c 4: two episodes hang in each worker (the log: written by the workers)
            while len(_log(tmp_path)) < 4:  # noqa: ASYNC110 - no event to wait on here
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    started = sorted((idx, 0) for idx, _ in _log(tmp_path))
    assert len({pid for _, pid in _log(tmp_path)}) == 2
    episodes = list(read_episodes(run_dir.episodes_path))
    assert pairs(run_dir.path) == started  # written as cancelled, as the local backend does
    for e in episodes:
        assert (e["ok"], e["stop"]) == (False, "cancelled")
        assert {t["stop_condition"] for t in e["traces"]} <= {"cancelled"}
    assert json.loads(run_dir.summary_path.read_text())["interrupted"] is True
    assert children() == before
    assert open_fds() == fds


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _reap(marker: str) -> None:
    """If a test failed with workers still alive, kill them (by pid) all the same."""
    for pid in marked(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait(condition: Any, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.slow
def test_sigint_stops_the_workers_writes_cancelled_episodes_and_exits_130(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    marker = f"TAKETURNS_PROCESSES_{uuid.uuid4().hex}"
    env = {**os.environ, marker: "1"}
    argv = [
        sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "60", "-c", "4",
        "--model", "builtin/bracket?latency_ms=40", "--backend", "processes",
        "--workers", "2", "-o", str(out), "--no-progress",
    ]  # fmt: skip
    try:
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        ) as proc:
            _wait(  # the driver and its two workers run; some episodes are written
                lambda: len(marked(marker)) == 3 and _lines(out / "episodes.jsonl") >= 8,
                "two workers running, 8 episodes written",
            )
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=LIMIT)
        assert proc.returncode == 130, err
        assert "--resume" in err
        assert marked(marker) == []  # no worker left behind
    finally:
        _reap(marker)
    first = list(read_episodes(out / "episodes.jsonl"))
    assert 8 <= len(first) < 60
    cancelled = [e for e in first if e["stop"] == "cancelled"]
    assert cancelled, "the episodes running at the signal are written as cancelled"
    for e in cancelled:
        # a seat whose session had closed before the signal (a hand that was over:
        # Kuhn leaves its second `async with` first) keeps the reason it closed with
        stops = [t["stop_condition"] for t in e["traces"]]
        assert "cancelled" in stops
        assert set(stops) <= {"cancelled", "user_closed"}
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True

    assert eval_cli("-o", str(out), "--resume") == 0  # the stored config: processes again
    assert pairs(out) == [(i, 0) for i in range(60)]
    assert all(e["ok"] for e in read_episodes(out / "episodes.jsonl"))


@pytest.mark.slow
def test_workers_stop_when_the_driver_is_killed(tmp_path: Path) -> None:
    marker = f"TAKETURNS_PROCESSES_{uuid.uuid4().hex}"
    argv = [
        sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "8", "-c", "4",
        "--model", "builtin/bracket?latency_ms=600000", "--backend", "processes",
        "--workers", "2", "-o", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    try:
        with subprocess.Popen(
            argv, stderr=subprocess.DEVNULL, env={**os.environ, marker: "1"}
        ) as proc:
            _wait(lambda: len(marked(marker)) == 3, "the driver and two workers running")
            time.sleep(0.5)  # the workers are into their episodes (waiting on the model)
            proc.kill()
            proc.wait(timeout=LIMIT)
        _wait(lambda: marked(marker) == [], "the workers exited on their own")
    finally:
        _reap(marker)
