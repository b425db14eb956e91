"""Engine CPU per model call of this tree against e7043db (the last commit before the
package was renamed to ``taketurns`` and the close contract of issue 12), alternated
run by run in one process, so the machine's drift (±20% on a shared VM between two
runs of the same code) hits both alike. The two import side by side because their
names differ (``engine`` / ``taketurns``). Kuhn self-play, built-in model at latency
0, slope between 600 and 3000 episodes, the model's own compute subtracted (as
``bench_exchange.py``).

Set-up (a venv holding e7043db, and this tree's package without its entry points,
whose groups the old tree shares)::

    git worktree add /tmp/old e7043db && python -m venv /tmp/venv-old
    /tmp/venv-old/bin/pip install -e /tmp/old
    pip install --no-deps --target /tmp/new-site . && rm -r /tmp/new-site/*.dist-info
    cd /tmp && PYTHONPATH=/tmp/new-site /tmp/venv-old/bin/python \
        /path/to/benchmarks/bench_against_e7043db.py 32 10   # concurrency, rounds
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import trio

import taketurns.envs.kuhn as new_kuhn
from taketurns import RunDir as NewRunDir
from taketurns import load_eval_config as new_load
from taketurns import run_eval as new_run_eval
from taketurns._gc import tuned_gc
from taketurns.env import env_registry as new_registry
from taketurns.testing import BuiltinModel as NewModel


def _old(module: str) -> Any:
    """A module of e7043db's tree (its top-level packages were engine, envs and
    harnesses; this tree has none of them)."""
    return importlib.import_module(module)


OldModel = _old("engine").BuiltinModel
OldRunDir = _old("engine.output").RunDir
old_registry = _old("engine.registry").envs
old_run_eval = _old("engine.runner").run_eval
old_load = _old("engine.settings").load_eval_config
old_kuhn = _old("envs.kuhn")
old_registry.register("kuhn-poker")(old_kuhn.KuhnPoker)
new_registry.register("kuhn-poker")(new_kuhn.KuhnPoker)

_MODEL_CPU = [0.0]


def _probe(cls: Any) -> None:
    """Time the built-in model's own compute (as bench_exchange.py does)."""
    respond = cls.respond

    def timed(self: Any, request: Any) -> Any:
        start = time.perf_counter()
        try:
            return respond(self, request)
        finally:
            _MODEL_CPU[0] += time.perf_counter() - start

    cls.respond = timed


_probe(OldModel)
_probe(NewModel)
# e7043db tuned the GC inside run_eval; this tree's CLI does it around the eval
_VERSIONS: dict[str, tuple[Any, Any, Any, Any, Callable[[], Any]]] = {
    "old": (old_load, old_registry, old_run_eval, OldRunDir, contextlib.nullcontext),
    "new": (new_load, new_registry, new_run_eval, NewRunDir, tuned_gc),
}


def _run(version: str, num: int, concurrency: int) -> tuple[float, int]:
    """(engine CPU s, model calls) of one eval."""
    load, registry, run_eval, run_dir, gc_tuning = _VERSIONS[version]
    config = load(
        registry.get("kuhn-poker").config_class,
        file_data={"env_id": "kuhn-poker", "num_tasks": num, "concurrency": concurrency},
    )
    with tempfile.TemporaryDirectory() as tmp:
        _MODEL_CPU[0] = 0.0
        cpu = time.process_time()
        with gc_tuning():
            run = trio.run(lambda: run_eval(config, run_dir(tmp), progress=False, report=False))
        cpu = time.process_time() - cpu
    assert run.summary["failed"] == 0
    calls = round(sum(a["turns_mean"] * a["traces"] for a in run.summary["agents"].values()))
    return cpu - _MODEL_CPU[0], calls


def _slope(version: str, concurrency: int) -> float:
    """Engine µs per model call: the slope between 600 and 3000 episodes."""
    small, calls_small = _run(version, 600, concurrency)
    large, calls_large = _run(version, 3000, concurrency)
    return (large - small) / (calls_large - calls_small) * 1e6


def main() -> None:
    concurrency, rounds = int(sys.argv[1]), int(sys.argv[2])
    for version in _VERSIONS:
        _run(version, 200, concurrency)  # warm up: imports, caches
    runs: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(rounds):
        for version in ("old", "new") if i % 2 == 0 else ("new", "old"):
            runs[version].append(_slope(version, concurrency))
    old, new = runs["old"], runs["new"]
    ratios = [b / a for a, b in zip(old, new, strict=True)]
    print(f"c={concurrency} e7043db   {[round(x) for x in old]}")
    print(f"c={concurrency} this tree {[round(x) for x in new]}")
    print(
        f"engine µs per call, median: e7043db {statistics.median(old):.1f}, this tree "
        f"{statistics.median(new):.1f} (x{statistics.median(new) / statistics.median(old):.3f}); "
        f"median of pairwise ratios x{statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
