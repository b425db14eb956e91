"""Resource limits per rollout (``taketurns._procs.limits``): a fork bomb, a memory
hog and a disk filler, each bounded, each end their rollout as ``resource_limit``
(naming the limit) while the rest of the eval finishes; and a role's
``sandbox_limits.*`` are refused when not positive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
import trio
from agentprocs import leftovers
from test_containment import PROBE, none_left

from taketurns import read_episodes
from taketurns._config.options import AgentConfig, SandboxLimits
from taketurns._procs import owner
from taketurns._procs.limits import TreeLimits, delegated_cgroup
from taketurns._procs.sandbox import Sandbox
from taketurns.errors import ConfigError

LIMITS = {"processes": 48, "memory_mb": 192, "scratch_mb": 96, "shm_mb": 32}


def test_runaways_end_their_rollout_as_resource_limit_and_the_eval_goes_on(
    tmp_path: Path,
) -> None:
    mark = uuid.uuid4().hex
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = {"TT_PROBE_MARK": mark}
    hogs = {**env, "TT_PROBE_HOG": "J=fork,Q=memory,K=disk"}
    command = json.dumps([sys.executable, str(PROBE)])
    limits = "".join(f"{k} = {v}\n" for k, v in LIMITS.items())
    text = 'env_id = "kuhn-poker"\n'
    for seat, seat_env in (("player0", hogs), ("player1", env)):
        table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in seat_env.items())
        text += f'[env.{seat}]\nharness = "program"\n'
        text += f"harness_options = {{ command = {command}, env = {{ {table} }} }}\n"
        text += f"[env.{seat}.sandbox_limits]\n{limits}"
    config = tmp_path / "eval.toml"
    config.write_text(text)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-C", str(config)]
    argv += ["-n", "8", "-c", "4", "-o", str(out), "--no-progress"]
    done = subprocess.run(
        argv,
        env={**os.environ, "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert len(episodes) == 8
    hit: Counter[str] = Counter()
    for episode in episodes:
        assert episode["ok"], episode["errors"]  # an outcome, not a failure
        seats = {t["info"]["seat"]: t for t in episode["traces"]}
        runaway, other = seats[0], seats[1]
        assert runaway["stop_condition"] == "resource_limit", runaway["errors"]
        hit[runaway["info"]["resource_limit"]] += 1
        assert runaway["info"]["sandbox_limits"]["processes"] == LIMITS["processes"]
        assert other["stop_condition"] != "resource_limit"
    assert set(hit) == {"processes", "memory_mb", "scratch_mb"}, hit
    assert none_left(mark) == []
    assert leftovers(temp) == []


@pytest.mark.parametrize("value", [0, -1, "many", True])
def test_a_limit_that_is_not_a_positive_integer_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="processes"):
        AgentConfig(sandbox_limits=SandboxLimits(processes=value))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("processes=0", "env.player0.sandbox_limits.processes = 0: expected an integer >= 1"),
        ("procesess=9", "did you mean 'processes'?"),
    ],
)
def test_a_bad_limit_on_the_command_line_is_refused_naming_the_option(
    tmp_path: Path, option: str, said: str
) -> None:
    argv = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "1"]
    argv += ["--env.player0.harness=program", f"--env.player0.sandbox_limits.{option}"]
    argv += ["-o", str(tmp_path / "run")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


def cgroup_of(pid: int) -> str:
    """The cgroup v2 path of process ``pid`` (its ``0::`` line)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return next(line for line in lines if line.startswith("0::")).strip()


@pytest.mark.skipif(delegated_cgroup() is None, reason="no cgroup v2 delegated here")
async def test_where_cgroup_v2_is_delegated_each_tree_runs_in_its_own_capped_cgroup(
    tmp_path: Path,
) -> None:
    limits = TreeLimits(processes=40)
    scratch = tmp_path / "scratches" / "scratch"
    scratch.mkdir(parents=True)
    env = {"PATH": os.environ["PATH"]}
    owned = await owner.start(
        ["sleep", "30"], cwd=scratch, env=env, sandbox=Sandbox(limits=limits), scratch=scratch
    )
    try:
        with trio.fail_after(10):
            while "taketurns-" not in cgroup_of(owned.pid):  # noqa: ASYNC110 - no event
                await trio.sleep(0.05)
        parent = delegated_cgroup()
        assert parent is not None
        folder = parent / cgroup_of(owned.pid).rsplit("/", 1)[1]
        assert (folder / "pids.max").read_text().strip() == "80"  # twice the processes
        assert TreeLimits().record()["enforced_by"] == "cgroup2+rlimits+supervisor"
    finally:
        await owned.aclose()
