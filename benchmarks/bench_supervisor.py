"""The supervisor's own cost per owned process (issue 42 item 5), this tree's against
another revision's, through this tree's process owner, in one run: a bare ``true``
owned with ``sandbox = "none"`` and in bwrap, the two supervisors alternated round by
round (drift of a loaded machine hits both alike). Wall time per process, and this
process's CPU (the engine's: what it pays to start, wait for and reap the tree).

The other revision's ``supervisor.py`` (``git show REV:engine/_procs/supervisor.py``)
is copied beside this one for the run (a sandbox binds the package's directory, not
the temp directory) and removed after it.

``--script``: the other revision's supervisor runs as a script, by path, as every
revision before the compiled supervisor (``owner.runnable``) ran it; this tree's runs
as this tree runs it.

Run: ``python benchmarks/bench_supervisor.py --against REV [--script] [--rounds N]
[--per N]``; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from taketurns._procs import owner
from taketurns._procs.sandbox import Sandbox

KINDS = ("none", "bwrap")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def by_path(source: str) -> str:
    return source


async def measure(
    files: dict[str, str], scratch: Path, rounds: int, per: int, script: bool
) -> dict:
    """(wall ms, CPU ms) per owned ``true`` for each (revision, sandbox kind)."""
    compiled = owner.runnable
    env = {"PATH": "/usr/bin:/bin"}
    out: dict = {(name, kind): ([], []) for name in files for kind in KINDS}
    for n in range(rounds + 1):  # round 0 warms up
        order = list(files) if n % 2 else list(reversed(files))
        for kind in KINDS:
            for name in order:
                owner.SUPERVISOR = files[name]
                owner.runnable = by_path if script and name != "this tree" else compiled
                wall, cpu = time.perf_counter(), own_cpu()
                for _ in range(per):
                    done = await owner.run(
                        ["true"], cwd=scratch, env=env, sandbox=Sandbox(kind), scratch=scratch
                    )
                    assert done.returncode == 0, done
                if n:
                    out[name, kind][0].append((time.perf_counter() - wall) / per * 1e3)
                    out[name, kind][1].append((own_cpu() - cpu) / per * 1e3)
    owner.runnable = compiled
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the other revision (git)")
    parser.add_argument(
        "--script", action="store_true", help="the other revision's supervisor by path"
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per", type=int, default=10, help="processes per round")
    args = parser.parse_args()
    mine = Path(owner.SUPERVISOR)
    source = f"{args.against}:engine/_procs/supervisor.py"
    text = subprocess.run(["git", "show", source], capture_output=True, check=True).stdout
    other = mine.with_name(f"_bench_supervisor_{args.against[:12]}.py")
    other.write_bytes(text)
    scratch = Path(tempfile.mkdtemp(prefix="taketurns-"))
    try:
        files = {args.against[:12]: str(other), "this tree": str(mine)}
        out = trio.run(measure, files, scratch, args.rounds, args.per, args.script)
    finally:
        other.unlink()
        tag = sys.implementation.cache_tag
        (other.parent / "__pycache__" / f"{other.stem}.{tag}.pyc").unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"owned `true`, {args.rounds} rounds x {args.per}, alternated (median ms)")
    print(f"{'':24} {'wall':>8} {'engine cpu':>11}")
    for kind in KINDS:
        medians = {}
        for name in files:
            wall, cpu = out[name, kind]
            medians[name] = (statistics.median(wall), statistics.median(cpu))
            print(f"{kind + ' ' + name:24} {medians[name][0]:8.1f} {medians[name][1]:11.2f}")
        (bw, bc), (aw, ac) = medians.values()
        print(f"{kind + ' ratio':24} {aw / bw:8.2f} {ac / bc:11.2f}")


if __name__ == "__main__":
    main()
