"""``--backend ray`` on a real multi-node cluster: a head and two worker nodes started
with ``ray start`` on this machine (each its own raylet), one worker node SIGKILLed
mid-run (``tests/raycluster.py``, in a network and PID namespace of its own: loopback
only, nothing left behind). No episode is lost or written twice, the lost node's
episodes run again on the other, and the run's output and summary say what happened."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import raycluster

from taketurns import read_episodes

pytestmark = pytest.mark.slow


def test_a_worker_node_killed_mid_run_loses_no_episode(tmp_path: Path) -> None:
    assert shutil.which("unshare"), "util-linux's unshare is needed (a network namespace)"
    script = Path(raycluster.__file__)
    done = subprocess.run(
        [
            "unshare",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        timeout=600,
        check=False,
        # the machine's temp dir, not the suite's private (deep) one: raycluster.py
        env={**os.environ, "TMPDIR": "/tmp"},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["killed"], "the worker node was never killed (the run ended first)"
    assert result["rc"] == 0, result["stderr"][-3000:]

    run = Path(result["run"])
    records = list(read_episodes(run / "episodes.jsonl"))
    keys = [(r["task"]["idx"], r["rollout"]) for r in records]
    assert len(keys) == len(set(keys)) == result["episodes"]  # none lost, none twice
    assert all(r["ok"] for r in records)

    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == result["episodes"]
    assert summary["failed"] == 0
    assert summary["workers_lost"] == 1
    (note,) = [n for n in summary["notes"] if n.startswith("a worker was lost")]
    assert "NodeDiedError" in note
    received, total, rerun = map(
        int,
        re.search(
            r"(\d+) of its (\d+) episodes were received, "
            r"the other (\d+) run again",
            note,
        ).groups(),
    )
    # the killed node had played some of its shard; the rest ran on the other node
    assert received >= 1
    assert rerun >= 1
    assert received + rerun == total
    assert "a worker was lost" in result["stderr"] + result["stdout"]
    # the PID namespace took every Ray process with it
    left = subprocess.run(
        ["pgrep", "-f", f"node_manager_port={raycluster.NODE_PORTS[0]}"],
        capture_output=True,
        check=False,
    )
    assert left.stdout == b""
