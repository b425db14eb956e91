"""``benchmarks/bench_agents.py`` keeps running (issue 42 item 6): it broke twice
unseen, once when messages moved to stdin, once when a sandbox started as root began
running its agent as ``nobody`` (the shim's folder was root's alone, and the bare
replay found its temp directory ``nobody``'s). One resumed ``codex`` segment through
the harness, sandbox on, and its bare replay, as the benchmark measures them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_agents.py"


def test_the_agent_benchmark_measures_a_sandboxed_codex_segment_and_its_bare_replay() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--segments", "1", "--only", "codex"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = dict(line.rsplit(None, 1) for line in done.stdout.splitlines()[-4:-1])
    assert float(rows["codex harness, per resumed segment"]) > 0, done.stdout
    assert float(rows["codex bare, same command and server"]) > 0, done.stdout
