"""The trainer-shaped examples run from a clone (real subprocesses, built-in model)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(script: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_trio_trainer_loop_prints_a_line_per_group() -> None:
    lines = run("trainer.py", "--steps", "5", "--per-task", "3", "--concurrency", "4")
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 5
    tasks = sorted(int(re.search(r"task (\d+)", s).group(1)) for s in steps)  # type: ignore[union-attr]
    assert tasks == [0, 1, 2, 3, 4]
    for line in steps:
        assert "3/3 ok, 6 samples" in line
        assert "advantage mean +0.000" in line or "advantage mean -0.000" in line
    assert lines[-1] == "done: 5 steps, 0 stale groups dropped"


def test_the_asyncio_trainer_gets_groups_from_a_thread_hosted_trio_loop() -> None:
    lines = run("asyncio_trainer.py", "--steps", "4", "--per-task", "2")
    steps = [line for line in lines if line.startswith("asyncio step ")]
    assert len(steps) == 4
    assert all(": 4 samples," in line for line in steps)
    assert lines[-1] == "done: 4 steps"
