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


def test_the_two_policy_trainer_gets_a_group_per_role_of_user_sim() -> None:
    lines = run("two_policies.py", "user-sim", "--steps", "3", "--per-task", "2")
    steps = [line for line in lines if line.startswith("policy ")]
    assert sorted(re.findall(r"policy (\w+) v\d+ task (\d)", "\n".join(steps))) == [
        (p, str(t)) for p in ("assistant", "user") for t in range(3)
    ]
    for line in steps:
        role = line.split()[1]
        assert f"roles {role}, 2 samples," in line
    assert lines[-1] == (
        "done: assistant: 3 steps, user: 3 steps; versions {'assistant': 3, 'user': 3}; "
        "0 stale groups dropped"
    )


def test_the_two_policy_trainer_gets_a_group_per_model_of_kuhn() -> None:
    lines = run("two_policies.py", "kuhn", "--steps", "4", "--per-task", "2")
    steps = [line for line in lines if line.startswith("policy ")]
    by_model = {"builtin/bracket": "player0", "builtin/echo": "player1"}
    for line in steps:
        model = line.split()[1]
        assert f"roles {by_model[model]}, 2 samples," in line
    stale = int(re.search(r"(\d+) stale groups dropped", lines[-1]).group(1))  # type: ignore[union-attr]
    assert len(steps) + stale == 8  # 4 tasks x 2 models
    assert {line.split()[1] for line in steps} == set(by_model)
