"""A signal at any moment of ``taketurns eval`` is one line and exit code 130, never a
traceback: during start-up (the env making its tasks), during the run, and during
the shutdown, summary and report after the episodes (a second Ctrl-C). Each case is
a real subprocess, signalled with ``os.kill`` once it reports where it is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taketurns._cli.interrupts import INTERRUPTED, is_interrupt

# an env whose tasks() stops in start-up, and a harness whose shutdown() stops after the
# episodes; each leaves a mark first (the test signals once the mark is there)
PLUGIN = """
import os, time
from pathlib import Path
import attrs
from taketurns import AgentConfig, Env, EnvConfig, NullHarness, Task


@attrs.define
class SlowConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    stall_in_tasks: bool = False


class Slow(Env):
    config_class = SlowConfig

    def tasks(self, num_tasks):
        if self.config.stall_in_tasks:
            Path(os.environ["MARK"]).write_text("tasks")
            time.sleep(60)
        return [Task(idx=i, prompt=f"[a] or [b] {i}") for i in range(num_tasks)]

    async def run(self, task, agents):
        await agents.player.run(task)


class StallingShutdown(NullHarness):
    async def shutdown(self):
        Path(os.environ["MARK"]).write_text("shutdown")
        time.sleep(60)
"""


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "slow_plugin.py").write_text(PLUGIN)
    mark = tmp_path / "mark"
    env = {**os.environ, "MARK": str(mark)}
    argv = [sys.executable, "-m", "taketurns", "eval", "./slow_plugin.py:Slow", *args]
    argv += ["-o", str(tmp_path / "run"), "--no-progress"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, mark


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the subprocess never got there"
        time.sleep(0.05)


def _interrupted(proc: subprocess.Popen[str]) -> str:
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 130, err
    return err


def test_sigint_during_start_up_is_one_line(tmp_path: Path) -> None:
    proc, mark = _start(tmp_path, "-n", "2", "--env.stall_in_tasks=true")
    _wait_for(mark, proc)
    os.kill(proc.pid, signal.SIGINT)
    err = _interrupted(proc)
    assert err.strip() == INTERRUPTED


def test_sigint_after_the_episodes_is_one_line(tmp_path: Path) -> None:
    # the episodes are done, the eval is shutting its harness down before the summary
    proc, mark = _start(
        tmp_path, "-n", "2", "--env.player.harness=./slow_plugin.py:StallingShutdown"
    )
    _wait_for(mark, proc)
    os.kill(proc.pid, signal.SIGINT)
    err = _interrupted(proc)
    assert err.strip().splitlines()[-1] == INTERRUPTED
    assert len((tmp_path / "run" / "episodes.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("signals", [1, 2])
def test_sigint_during_the_run_is_one_line(tmp_path: Path, signals: int) -> None:
    proc, _ = _start(tmp_path, "-n", "400", "-c", "2", "--model", "builtin/bracket?latency_ms=50")
    episodes = tmp_path / "run" / "episodes.jsonl"
    _wait_for(episodes, proc)
    for _ in range(signals):  # a second signal exits at once
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.01)
    _interrupted(proc)


def test_is_interrupt() -> None:
    assert is_interrupt(KeyboardInterrupt())
    assert is_interrupt(BaseExceptionGroup("g", [KeyboardInterrupt(), KeyboardInterrupt()]))
    assert not is_interrupt(BaseExceptionGroup("g", [KeyboardInterrupt(), ValueError()]))
    assert not is_interrupt(ValueError())
