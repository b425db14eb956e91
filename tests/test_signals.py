"""A signal at any moment of ``taketurns eval`` is one line and exit code 130, never a
traceback: during start-up (the env making its tasks), during the run, and during
the shutdown, summary and report after the episodes (a second Ctrl-C). Each case is
a real subprocess, signalled with ``os.kill`` once it reports where it is."""

from __future__ import annotations

import contextlib
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
from taketurns import AgentConfig, Env, EnvConfig, Task
from taketurns.harness import NullHarness


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


# a process started as the command: `sys.orig_argv` as the console script has it
AS_THE_COMMAND = """
import os, signal, sys
sys.orig_argv = [sys.executable, "/somewhere/bin/taketurns", "eval", "kuhn-poker"]
import taketurns  # the package's first import sets the start-up handler
assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
{after}
os.kill(os.getpid(), signal.SIGINT)
signal.pause()
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "command", ['"/somewhere/bin/taketurns"', '"-X", "utf8", "-m", "taketurns"']
)
def test_sigint_while_the_command_imports_is_one_line(command: str) -> None:
    code = AS_THE_COMMAND.replace('"/somewhere/bin/taketurns"', command).format(after="")
    proc = _python(code)
    assert (proc.returncode, proc.stderr) == (130, "interrupted while starting; nothing was run\n")


def test_main_takes_signals_back_and_a_library_import_changes_nothing() -> None:
    # once main runs, Python's handler is back (a KeyboardInterrupt for trio to handle)
    after = (
        "from taketurns._startup import started; started()\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler"
    )
    proc = _python(AS_THE_COMMAND.format(after=after))
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in proc.stderr
    library = _python(
        "import signal, taketurns\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler"
    )
    assert library.returncode == 0, library.stderr


def test_sigint_the_moment_main_takes_signals_back_is_one_line() -> None:
    """The start-up handler gives way to Python's as ``main`` starts; a SIGINT
    arriving right then (here: sent as ``started`` returns) is answered like any later
    one, not with a traceback."""
    code = AS_THE_COMMAND.split("os.kill(")[0].format(after="") + (
        "from taketurns._cli import interrupts\n"
        "from taketurns._cli.main import main\n"
        "def started():\n"
        "    from taketurns._startup import started as real\n"
        "    real()\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # delivered as this returns\n"
        "interrupts.started = started\n"
        "sys.exit(main(['eval', 'kuhn-poker', '-n', '1']))\n"
    )
    proc = _python(code)
    assert (proc.returncode, proc.stderr.strip()) == (130, INTERRUPTED)


def test_a_second_sigint_while_the_command_exits_keeps_its_status(tmp_path: Path) -> None:
    """The second Ctrl-C lands after the run wrote its summary and said so, while
    Python finalizes: the exit status stays 130, never the signal's own (-2)."""
    proc, _ = _start(tmp_path, "-n", "400", "-c", "2", "--model", "builtin/bracket?latency_ms=50")
    _wait_for(tmp_path / "run" / "episodes.jsonl", proc)
    os.kill(proc.pid, signal.SIGINT)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("interrupted"):
            break
    with contextlib.suppress(ProcessLookupError):  # already gone: nothing to test
        os.kill(proc.pid, signal.SIGINT)
    _interrupted(proc)
