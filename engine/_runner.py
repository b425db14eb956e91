"""``run_eval``: every (task, rollout) pair not yet in a run directory becomes one
episode, written the moment it finishes; then the summary and the report.

Structure::

    run_eval (one nursery: signal watcher, the backend)
     └─ the backend: ``play_pairs`` in this loop (local), or worker processes / Ray
        workers each running ``play_pairs`` on their shard (``_backends``)

Each finished episode is appended to ``episodes.jsonl`` at once (also a failed,
timed-out or cancelled one); a worker backend hands over each batch it receives,
lines and digests as its workers made them (``_backends.shards.OnLines``).
With ``handle_signals=True`` (the CLI), SIGINT/SIGTERM cancel the running episodes,
which are closed, scored and written as cancelled (also by worker processes; on Ray:
not written, ``--resume`` reruns them); a second signal exits at once.

``run_eval`` changes no process-global state: the CLI, which owns its process, tunes
the garbage collector around it (``_gc.tuned_gc``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import trio

from taketurns._backends.processes import run_on_processes
from taketurns._backends.ray import run_on_ray
from taketurns._config.options import EvalConfig
from taketurns._errors import TaketurnsError, sole_error
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import Plan, make_env
from taketurns._eval.play import play_pairs
from taketurns._exchange.task import Task
from taketurns._output.progress import EvalProgress
from taketurns._output.records import episode_line
from taketurns._output.rundir import RunDir
from taketurns._output.summary import digest, summarize

__all__ = ["EvalRun", "Interrupted", "run_eval"]


class Interrupted(Exception):
    """The eval was stopped by SIGINT/SIGTERM; finished episodes are on disk."""


@attrs.define
class EvalRun:
    """What ``run_eval`` returns: the summary and where everything was written."""

    summary: dict[str, Any]
    run_dir: RunDir
    written: int


async def _watch_signals(cancel: trio.CancelScope, task_status: Any) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if cancel.cancel_called:
                os._exit(130)  # second signal: exit at once, as promised
            cancel.cancel()


async def run_eval(
    config: EvalConfig,
    run_dir: RunDir,
    *,
    env: Env | None = None,
    plan: Plan | None = None,
    tasks: Sequence[Task] | None = None,
    progress: bool = True,
    report: bool = True,
    handle_signals: bool = False,
) -> EvalRun:
    """Run every (task, rollout) pair not yet in ``run_dir`` and write the summary.
    Raises ``ConfigError`` before any episode starts; ``Interrupted`` after a signal
    (with every finished and cancelled episode written)."""
    env = env if env is not None else make_env(config)
    plan = plan if plan is not None else Plan(config, env)
    tasks = list(tasks if tasks is not None else env.tasks(config.num_tasks))
    finished = run_dir.finished()
    todo = _owed(tasks, config.rollouts, finished)
    start = time.monotonic()
    written = 0
    interrupted = True  # until the episodes' loop ends on its own
    planned = len(tasks) * config.rollouts
    bar = EvalProgress(planned, done=planned - len(todo), enabled=progress)

    def record_lines(batch: list[tuple[bytes, dict[str, Any]]]) -> None:
        nonlocal written
        run_dir.append_lines(line for line, _ in batch)
        for _, digested in batch:
            finished.append(digested)
            bar.add(digested)
        written += len(batch)

    run_dir.open()
    with bar:
        try:
            with trio.CancelScope() as cancel, _unwrapped():
                async with trio.open_nursery() as nursery:
                    if handle_signals:
                        await nursery.start(_watch_signals, cancel)
                    await _on_backend(
                        config, env, plan, todo, record_lines, lambda: bar.phase("eval")
                    )
                    nursery.cancel_scope.cancel()
            interrupted = cancel.cancelled_caught
        finally:
            run_dir.close()
            bar.phase("closing")
            await plan.aclose()
            # also when the run is cancelled from outside: what was written is summed up
            wall = time.monotonic() - start
            bar.phase("writing summary and report" if report else "writing summary")
            summary = summarize(finished, rollouts=config.rollouts, wall_s=wall)
            summary["interrupted"] = interrupted
            run_dir.write_summary(summary)
            if report:
                from taketurns._report.page import write_report

                write_report(run_dir.path)
            bar.phase("done")
    if interrupted:
        raise Interrupted(f"interrupted; {written} episodes written this run to {run_dir.path}")
    return EvalRun(summary, run_dir, written)


async def _on_backend(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    todo: Sequence[tuple[Task, int]],
    record_lines: Callable[[list[tuple[bytes, dict[str, Any]]]], None],
    on_started: Callable[[], None],
) -> None:
    """Play ``todo`` where ``config.backend`` says; each finished episode reaches
    ``record_lines`` as its JSONL line and summary digest. ``on_started``: the local
    backend's setup is done (worker backends set up in each worker)."""
    if config.backend == "ray":
        await run_on_ray(config, env, todo, record_lines)
    elif config.backend == "processes":
        await run_on_processes(config, env, todo, record_lines)
    else:

        def record(episode: Episode) -> None:
            record_lines([(episode_line(episode), digest(episode))])

        await play_pairs(config, env, plan, todo, record, on_started=on_started)


def _owed(
    tasks: Sequence[Task], rollouts: int, finished: Sequence[Mapping[str, Any]]
) -> list[tuple[Task, int]]:
    """The (task, rollout) pairs not yet on disk, in task order."""
    done = {(e["task"]["idx"], e["rollout"]) for e in finished}
    return [(t, r) for t in tasks for r in range(rollouts) if (t.idx, r) not in done]


@contextlib.contextmanager
def _unwrapped() -> Iterator[None]:
    """A taketurns error raised on purpose (a backend's ``ConfigError``, a worker
    backend's ``WorkerLost``) leaves the run's nursery as itself, not in an exception
    group."""
    try:
        yield
    except BaseExceptionGroup as group:
        sole = sole_error(group)
        if isinstance(sole, TaketurnsError):
            raise sole from None
        raise
