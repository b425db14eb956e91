"""``run_eval``: every (task, rollout) pair not yet in a run directory becomes one
episode, written the moment it finishes; then the summary and the report.

Structure::

    run_eval (one nursery: signal watcher, the backend)
     └─ model servers the run owns, if any (``_eval.servers``: llamacpp/ models,
        │ --model-server), up before the first episode, stopped after the last
        └─ the backend: ``play_pairs`` in this loop (local), or worker processes / Ray
           workers each running ``play_pairs`` on their shard (``_backends``)

Each finished episode is appended to ``episodes.jsonl`` at once (also a failed,
timed-out or cancelled one); a worker backend hands over each batch it receives,
lines and digests as its workers made them (``_backends.shards.OnLines``).
With ``handle_signals=True`` (the CLI), SIGINT/SIGTERM/SIGHUP cancel the running episodes,
which are closed, scored and written as cancelled (also by worker processes; on Ray:
not written, ``--resume`` reruns them); a second signal exits at once (killing the
model servers first).

Fail fast (``_eval.brake``): once too many of the run's episodes failed
(``max_failures``, or by default a model endpoint that is down) no further episode is
admitted; the local backend lets the running ones finish, a worker backend is stopped
as by a signal; ``EvalRun.stopped`` and the summary's ``stopped`` say why.

``run_eval`` changes no process-global state: the CLI, which owns its process, tunes
the garbage collector around it (``_gc.tuned_gc``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from taketurns._backends.processes import run_on_processes
from taketurns._backends.ray import run_on_ray
from taketurns._config.options import EvalConfig
from taketurns._config.reference import absolute
from taketurns._config.settings import dump_toml
from taketurns._errors import Interrupted, OutputError, TaketurnsError, sole_error
from taketurns._eval.brake import Brake
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import Plan, make_env, seeded
from taketurns._eval.play import play_pairs
from taketurns._eval.servers import open_model_servers
from taketurns._exchange.task import Task
from taketurns._output.failures import LiveFailures
from taketurns._output.progress import EvalProgress
from taketurns._output.records import episode_line, parse_record
from taketurns._output.rundir import RunDir, Tidied, compact
from taketurns._output.summary import Summarizer, digest
from taketurns._procs import journal

if TYPE_CHECKING:
    from taketurns._report.feed import ReportFeed

__all__ = ["EvalRun", "run_eval"]


# the signals that stop an eval (SIGHUP: the terminal closed)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# lines fed to the report at a time (``_Writer.report``): the most it holds unread
REPORT_BLOCK = 256


@attrs.define
class EvalRun:
    """What ``run_eval`` returns: the summary and where everything was written."""

    summary: dict[str, Any]
    run_dir: RunDir
    written: int
    tidied: Tidied = attrs.field(factory=Tidied)
    # why the run stopped admitting episodes before the end (``_eval.brake``), if it did:
    # the pairs it did not play run on ``--resume``
    stopped: str | None = None


async def _watch_signals(
    cancel: trio.CancelScope, before_exit: Callable[[], None], task_status: Any
) -> None:
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        task_status.started()
        async for _ in signals:
            if cancel.cancel_called:
                before_exit()
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
    notify: Callable[[str], None] | None = None,
) -> EvalRun:
    """Run every (task, rollout) pair not yet in ``run_dir`` and write the summary.

    Holds the run directory's lock for the whole run (taking it unless ``prepare``
    did; released at the end). Writes ``config.toml`` as the CLI does when the
    directory has none, so the CLI can ``--resume`` the run. Before playing,
    ``run_dir.tidy()`` sets aside damaged lines and cancelled or failed episodes, so
    their pairs run again; ``notify`` gets its one-line note. Raises ``ConfigError``
    before any episode starts (also when another process holds the directory);
    ``Interrupted`` after a signal (with every finished and cancelled episode
    written); ``OutputError`` when the directory cannot be written (the run stops;
    what was written is kept)."""
    env = seeded(env, config) if env is not None else make_env(config)
    plan = plan if plan is not None else Plan(config, env)
    tasks = list(tasks if tasks is not None else env.tasks(config.num_tasks))
    writer = _Writer(run_dir, Summarizer(rollouts=config.rollouts))
    # the report is fed each record as it is written: the end of the run reads none again
    writer.feed = _report_feed(run_dir, env, config) if report else None
    try:
        return await _play(
            config,
            run_dir,
            writer,
            env,
            plan,
            tasks,
            progress=progress,
            report=report,
            handle_signals=handle_signals,
            notify=notify,
        )
    finally:
        if writer.feed is not None:
            writer.feed.close()  # the env's report hooks' threads end (the page written or not)


async def _play(
    config: EvalConfig,
    run_dir: RunDir,
    writer: _Writer,
    env: Env,
    plan: Plan,
    tasks: Sequence[Task],
    *,
    progress: bool,
    report: bool,
    handle_signals: bool,
    notify: Callable[[str], None] | None,
) -> EvalRun:
    """``run_eval``'s run, through ``writer`` (its report feed closed by the caller)."""
    tidied = _tidy(run_dir, writer, notify)
    journal.sweep(run_dir.path)  # a SIGKILLed run's scratch and socket directories
    _keep_config(run_dir, config, notify, plan.sampling_note())
    plan.services["run_dir"] = str(run_dir.path)  # hidden from every sandbox
    for warning in plan.sandbox_warnings():
        if notify is not None:
            notify(warning)
    todo = _owed(tasks, config.rollouts, tidied.pairs)
    start = time.monotonic()
    interrupted = True  # until the episodes' loop ends on its own
    summary: dict[str, Any] = {}
    planned = len(tasks) * config.rollouts
    bar = writer.bar = EvalProgress(planned, done=planned - len(todo), enabled=progress)
    writer.live = LiveFailures(bar.note if progress else notify)
    writer.brake = Brake(config.max_failures, planned=len(todo), endpoint=config.base_url or "")
    writer.local = config.backend == "local"
    try:
        run_dir.open()
        with bar:
            try:
                with writer.cancel, _unwrapped():
                    async with trio.open_nursery() as nursery:
                        if handle_signals:
                            kill = partial(_kill_servers, plan)
                            await nursery.start(_watch_signals, writer.cancel, kill)
                        async with open_model_servers(
                            plan,
                            run_dir.path,
                            say=partial(_starting, bar, notify),
                            timeout_s=config.preflight_timeout_s,
                        ):
                            with writer.braked:
                                await _on_backend(
                                    config,
                                    env,
                                    plan,
                                    todo,
                                    writer.record_lines,
                                    lambda: bar.phase("eval"),
                                    writer.stop_admitting,
                                    writer.worker_lost,
                                )
                        nursery.cancel_scope.cancel()
                interrupted = writer.cancel.cancelled_caught and not writer.failure
            finally:
                run_dir.close()
                bar.phase("closing")
                await plan.aclose()
                # also when the run is cancelled from outside: what was written is summed
                wall_s = time.monotonic() - start
                bar.phase("writing summary and report" if report else "writing summary")
                summary = _finish(
                    run_dir,
                    writer.finished,
                    wall_s,
                    interrupted,
                    writer.failure,
                    writer.brake,
                    seed=config.seed,
                    notes=plan.notes() + writer.lost,
                    workers_lost=len(writer.lost),
                    planned=planned,
                )
                if writer.feed is not None and not writer.failure:
                    writer.report()  # the last block
                    _write_report(writer.feed, writer.failure)
                bar.phase("done")
    finally:
        journal.sweep(run_dir.path)  # every episode is over: nothing listed is in use
        run_dir.unlock()
    if writer.failure:
        raise writer.failure[0]
    if interrupted:
        raise Interrupted(
            f"interrupted; {writer.written} episodes written this run to {run_dir.path}"
        )
    return EvalRun(summary, run_dir, writer.written, tidied, writer.brake.reason)


def _starting(bar: EvalProgress, notify: Callable[[str], None] | None, text: str) -> None:
    bar.phase("starting model server")
    if notify is not None:
        notify(text)


def _kill_servers(plan: Plan) -> None:
    for server in plan.servers.values():
        server.kill_now()


def _tidy(run_dir: RunDir, writer: _Writer, notify: Callable[[str], None] | None) -> Tidied:
    """Lock ``run_dir`` and tidy it (``RunDir.tidy``), its kept records summed into
    ``writer.finished`` and fed to its report; on an error the lock is released
    again."""
    run_dir.lock()
    try:
        tidied = run_dir.tidy(on_kept=writer.kept)
    except BaseException:
        run_dir.unlock()
        raise
    note = tidied.note()
    if notify is not None and note:
        notify(note)
    return tidied


def _keep_config(
    run_dir: RunDir, config: EvalConfig, notify: Callable[[str], None] | None, note: str = ""
) -> None:
    """Write ``config.toml`` as the CLI does (so ``--resume`` can continue a run
    started from Python) unless the directory holds one already (the CLI wrote it, or
    this is a resume). A config TOML cannot hold (a Python object among its options)
    is not written: ``notify`` hears it. On an error the lock is released. Raises
    ``OutputError``."""
    if run_dir.config_path.exists():
        return
    try:
        stored = attrs.evolve(config, env_id=absolute(config.env_id), output_dir=None)
        try:
            text = dump_toml(stored)
        except (TypeError, ValueError) as exc:
            if notify is not None:
                notify(f"{run_dir.config_path.name} not written ({exc}): the CLI cannot resume")
            return
        run_dir.write_config(text + note)
    except BaseException:
        run_dir.unlock()
        raise


class _Writer:
    """Where finished episodes go: appended to ``episodes.jsonl``, summed, counted on
    the progress bar. The first write that fails (a full disk) is kept in
    ``failure`` and cancels the run; later batches are dropped (their pairs run
    again on resume)."""

    def __init__(self, run_dir: RunDir, finished: Summarizer) -> None:
        self.run_dir = run_dir
        self.finished = finished
        self.written = 0
        self.failure: list[OutputError] = []
        self.bar: EvalProgress | None = None
        self.live = LiveFailures(None)
        self.cancel = trio.CancelScope()
        self.brake = Brake(None, planned=0)
        self.local = True
        self.stop_admitting = trio.Event()  # the local backend admits no more episodes
        self.braked = trio.CancelScope()  # a worker backend is stopped (as by a signal)
        self.lost: list[str] = []  # a line per worker a worker backend lost
        self.feed: ReportFeed | None = None  # the report, fed each record written
        self.unreported: list[bytes] = []  # lines written, not yet fed to it

    def kept(self, record: dict[str, Any]) -> None:
        """A record a resume keeps (``RunDir.tidy``): summed, and fed to the report."""
        self.finished.add(compact(record))
        if self.feed is not None:
            self.feed.add(record)

    def report(self) -> None:
        """The lines written since the last call, fed to the report as the report
        reads them back (``parse_record``: the records a reading of the file gives),
        in one loop: the report's work runs in blocks of ``REPORT_BLOCK`` lines, not
        interleaved with the episodes' one record at a time (measured: that slowed
        the episodes by more than the feed costs)."""
        lines, self.unreported = self.unreported, []
        feed = self.feed
        if feed is None:
            return
        for line in lines:
            record = parse_record(line)
            if record is not None:
                feed.add(record)

    def worker_lost(self, line: str) -> None:
        """A worker backend lost a worker (and runs its pairs again): say so now, and
        in the summary (``workers_lost``, ``notes``)."""
        self.lost.append(line)
        say = self.live.say
        if say is not None:
            say(line)

    def record_lines(self, batch: list[tuple[bytes, dict[str, Any]]]) -> None:
        if self.failure:
            return
        try:
            self.run_dir.append_lines(line for line, _ in batch)
        except OutputError as exc:
            self.failure.append(exc)
            self.cancel.cancel()
            return
        if self.feed is not None:
            self.unreported.extend(line for line, _ in batch)
            if len(self.unreported) >= REPORT_BLOCK:
                self.report()
        for _, digested in batch:
            self.finished.add(digested)
            self.live.add(digested.get("failure"))
            if self.brake.add(digested):
                self._stop()
            if self.bar is not None:
                self.bar.add(digested)
        self.written += len(batch)

    def _stop(self) -> None:
        """The brake tripped: admit no more episodes. The local backend lets the
        running ones finish; a worker backend is stopped as by a signal (its running
        episodes are cancelled; ``--resume`` reruns them)."""
        self.stop_admitting.set()
        if not self.local:
            self.braked.cancel()
        say = self.live.say
        if say is not None:
            ending = "letting the running episodes finish" if self.local else "stopping the workers"
            say(f"stopping: {self.brake.reason}; {ending}")


def _finish(
    run_dir: RunDir,
    finished: Summarizer,
    wall_s: float,
    interrupted: bool,
    failure: list[OutputError],
    brake: Brake,
    *,
    seed: int,
    notes: list[str],
    planned: int | None = None,
    workers_lost: int = 0,
) -> dict[str, Any]:
    """Sum up what was written (also when the run is cancelled from outside) and
    write the summary (``stopped``: why the brake stopped the run, if it did;
    ``seed``: the run's seed; ``notes``: what the model clients noted, e.g. an
    endpoint that refuses ``seed``, and each worker a worker backend lost;
    ``workers_lost``: how many; ``planned``: the (task, rollout) pairs the run
    plays, from the tasks the env has, which may be fewer than ``-n`` asked). A
    write failure is added to ``failure`` (the run's first error is the one that
    counts), never raised over another error."""
    summary = finished.result(wall_s=wall_s)
    summary["interrupted"] = interrupted
    summary["seed"] = seed
    if planned is not None:
        summary["planned"] = planned
    if notes:
        summary["notes"] = notes
    if workers_lost:
        summary["workers_lost"] = workers_lost
    if brake.reason is not None:
        summary["stopped"] = brake.reason
    try:
        run_dir.write_summary(summary)
    except OutputError as exc:
        failure.append(exc)
    return summary


def _report_feed(run_dir: RunDir, env: Env, config: EvalConfig) -> ReportFeed:
    from taketurns._report.feed import ReportFeed

    return ReportFeed(run_dir.path, env=env, rollouts=config.rollouts)


def _write_report(feed: ReportFeed, failure: list[OutputError]) -> None:
    """The end of the run: ``report.html`` from what ``feed`` was fed."""
    try:
        feed.write()
    except OutputError as exc:
        failure.append(exc)


async def _on_backend(
    config: EvalConfig,
    env: Env,
    plan: Plan,
    todo: Sequence[tuple[Task, int]],
    record_lines: Callable[[list[tuple[bytes, dict[str, Any]]]], None],
    on_started: Callable[[], None],
    stop_admitting: trio.Event,
    on_lost: Callable[[str], None],
) -> None:
    """Play ``todo`` where ``config.backend`` says; each finished episode reaches
    ``record_lines`` as its JSONL line and summary digest. ``on_started``: the local
    backend's setup is done (worker backends set up in each worker); ``on_lost``: a
    worker backend lost a worker and runs its pairs again."""
    if config.backend == "ray":
        await run_on_ray(config, env, todo, record_lines, on_lost=on_lost)
    elif config.backend == "processes":
        await run_on_processes(config, env, todo, record_lines, on_lost=on_lost)
    else:

        def record(episode: Episode) -> None:
            record_lines([(episode_line(episode), digest(episode))])

        await play_pairs(
            config, env, plan, todo, record, on_started=on_started, stop_admitting=stop_admitting
        )


def _owed(
    tasks: Sequence[Task], rollouts: int, done: set[tuple[int, int]]
) -> list[tuple[Task, int]]:
    """The (task, rollout) pairs not yet on disk, in task order."""
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
