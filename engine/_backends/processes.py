"""``--backend processes``: an eval's owed (task, rollout) pairs sharded over worker
processes on this machine (``--workers``, default one per CPU), without Ray.

::

    driver: run_eval -> run_on_processes (trio)      worker: python -m taketurns._backends.processes
     ├─ pairs round robin into W shards, -c (and       ├─ reads its job from stdin (pickled:
     │  --max-concurrent-calls) split into W shares    │  config with its shares, env class,
     ├─ one task per shard: starts its worker,         │  pairs), builds env and Plan
     │  writes the job to its stdin, reads its         ├─ play_pairs in its own trio.run
     │  results pipe and hands each line, with its     ├─ each finished episode: one line on
     │  digest, to run_eval's writer (not re-parsed)   │  the results pipe at once: (task idx,
     └─ a worker that died: its pairs not yet          │  rollout, digest) + the JSONL line
        received run again in a new worker             └─ stdin closed (or SIGTERM): cancels
                                                          play_pairs, sends what it wrote, exits

W = min(``--workers``, ``-c``, pairs). Contracts:

- **Exactly once** (``taketurns._backends.shards``, shared with Ray): a pair is written the first
  time it is received; a worker that dies (killed, ``os._exit``, out of memory) loses
  nothing: its pairs not yet received run again in a new worker, up to ``MAX_LOST``
  times, then ``WorkerLost``. A torn last line of a dying worker is dropped.
- **Results travel on a dedicated pipe** (an ``os.pipe`` passed with ``pass_fds``),
  never on stdout: env code may print (the workers share the driver's stdout/stderr).
- **A worker's own code raising** (``env.setup``, a bug; not an episode's ``env.run``,
  which is recorded) fails the eval: a ``TaketurnsError`` is re-raised in the driver as
  itself when it pickles, anything else as ``WorkerError`` carrying the worker's
  traceback. The other workers are stopped as below.
- **Stopping** (SIGINT/SIGTERM/SIGHUP to the driver, cancellation, another shard failing):
  the driver closes each worker's stdin; the worker cancels its episodes, which are
  closed, scored and sent as cancelled, exactly as the local backend writes them. The
  driver keeps receiving for ``STOP_S`` (shielded), then kills the worker's process
  group. A driver that dies abruptly closes the stdins too: workers stop on their own.
  Each worker gets a temp directory of its own (``TMPDIR``: its rollouts' scratch
  lives there), removed by the worker as it exits and by the driver once the worker
  is reaped (a killed worker removes nothing), so a killed driver leaves none either.
  Workers run in their own process group, so a terminal's Ctrl-C reaches the driver
  only, which decides.
- Workers import the env class by reference (module and name) on the driver's
  ``sys.path``: an env class defined in ``__main__`` or in a function is refused.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import orjson
import trio

from taketurns._backends.shards import Ledger, OnLines, Pair, Shard, deal
from taketurns._config.options import EvalConfig
from taketurns._config.registry import name_class
from taketurns._errors import (
    ConfigError,
    TaketurnsError,
    WorkerDied,
    WorkerError,
    sole_error,
)
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import Plan, seeded
from taketurns._eval.play import play_pairs
from taketurns._gc import tuned_gc
from taketurns._output.records import episode_line
from taketurns._output.summary import digest

__all__ = ["STOP_S", "run_on_processes"]

STOP_S = 30.0  # how long a stopping worker may take to send its cancelled episodes
PIPE_SIZE = 1 << 20  # results pipe buffer (Linux default max): a worker rarely waits on it


# --- the driver ----------------------------------------------------------------------


async def run_on_processes(
    config: EvalConfig,
    env: Env,
    pairs: Sequence[Pair],
    on_lines: OnLines,
    *,
    on_lost: Callable[[str], None] | None = None,
) -> None:
    """Run ``pairs`` in worker processes, calling ``on_lines`` in this trio task with
    the episodes each read from a worker brings (each pair exactly once); ``on_lost``
    hears a line for each worker lost and rerun."""
    if not pairs:
        return
    env_cls = type(env)
    if env_cls.__module__ == "__main__" or "<locals>" in env_cls.__qualname__:
        raise ConfigError(
            f"backend = 'processes': worker processes import the env class by name, and "
            f"{env_cls.__qualname__} is defined in {env_cls.__module__}; move it into an "
            "importable module (or run with --backend local)"
        )
    shards = deal(pairs, config.workers or os.cpu_count() or 1, config)
    if config.interception_port and len(shards) > 1:
        raise ConfigError(
            f"interception_port = {config.interception_port}: each worker process runs "
            "its own interception server; leave the port 0 (any free port) or use one worker"
        )
    await _Driver(config, env_cls, on_lines, on_lost).run(shards)


class _Driver:
    def __init__(
        self,
        config: EvalConfig,
        env_cls: type[Env],
        on_lines: OnLines,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.env_cls = env_cls
        self.on_lines = on_lines
        self.ledger = Ledger(on_lost)
        self.failures: list[TaketurnsError] = []

    async def run(self, shards: list[Shard]) -> None:
        async with trio.open_nursery() as nursery:
            for shard in shards:
                nursery.start_soon(self._shard, shard, nursery.cancel_scope)
        if self.failures:  # the first; the others' workers were stopped because of it
            raise self.failures[0]

    async def _shard(self, shard: Shard, stop_all: trio.CancelScope) -> None:
        """Run ``shard`` to the end, in a new worker each time one dies."""
        rest: Shard | None = shard
        try:
            while rest is not None:
                cause = await self._worker(rest)
                rest = self.ledger.redo(rest, cause)
        except TaketurnsError as exc:  # a worker's own error, or WorkerLost
            self.failures.append(exc)
            stop_all.cancel()

    async def _worker(self, shard: Shard) -> WorkerDied:
        """Run ``shard`` in a new worker process until it exits. Returns how it ended;
        raises what the worker's own code raised."""
        job = self._job(shard)
        read_fd, write_fd = os.pipe()
        # the worker's own temp directory (its rollouts' scratch): the worker removes
        # it as it exits (also when this driver was killed), this driver once it is
        # reaped (also when it was killed and removed nothing)
        temp = tempfile.mkdtemp(prefix="taketurns-worker-")
        try:
            with contextlib.suppress(OSError):  # a smaller pipe works too
                fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            module = "taketurns._backends.processes"
            command = [sys.executable, "-m", module, str(write_fd), temp]
            proc = await trio.lowlevel.open_process(
                command,
                stdin=subprocess.PIPE,
                pass_fds=(write_fd,),
                process_group=0,
                env={**os.environ, "TMPDIR": temp},
            )
        except BaseException:
            os.close(read_fd)
            shutil.rmtree(temp, ignore_errors=True)
            raise
        finally:
            os.close(write_fd)
        results = _Results(trio.lowlevel.FdStream(read_fd), shard, self.ledger, self.on_lines)
        try:
            assert proc.stdin is not None
            with contextlib.suppress(trio.BrokenResourceError):  # it died: the pump sees EOF
                await proc.stdin.send_all(job)  # stdin stays open: closing it means "stop"
            await results.pump()
            await proc.wait()
        finally:
            try:
                await _stop(proc, results)
            finally:
                shutil.rmtree(temp, ignore_errors=True)
        return WorkerDied(_ending(proc))

    def _job(self, shard: Shard) -> bytes:
        """The worker's stdin: a length, then (sys.path, pickled job). The path comes
        first so the worker can import what the job refers to, as the driver did."""
        try:
            job = (shard.config(self.config), self.env_cls, shard.pairs)
            blob = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise ConfigError(
                f"backend = 'processes': the eval cannot be sent to a worker process "
                f"({type(exc).__name__}: {exc}); run with --backend local"
            ) from None
        frame = pickle.dumps((sys.path, blob), protocol=pickle.HIGHEST_PROTOCOL)
        return struct.pack(">Q", len(frame)) + frame


class _Results:
    """The driver's end of one worker's results pipe."""

    def __init__(
        self, stream: trio.lowlevel.FdStream, shard: Shard, ledger: Ledger, on_lines: OnLines
    ) -> None:
        self.stream = stream
        self.shard = shard
        self.ledger = ledger
        self.on_lines = on_lines
        self.partial = b""  # the start of a line still being received

    async def pump(self, *, raise_errors: bool = True) -> None:
        """Take every line until the worker's end closes (it exited), handing each
        read's episodes to ``on_lines`` at once; raise what the worker reported
        raising. A torn last line (it died mid-write) is dropped: its pair is owed."""
        while data := await self.stream.receive_some(PIPE_SIZE):
            *lines, self.partial = (self.partial + data).split(b"\n")
            batch = []
            failure = None
            for line in lines:
                kind = line[:1]
                if kind == b"E":
                    head, _, episode = line[1:].partition(b"\t")
                    idx, rollout, digested = orjson.loads(head)
                    if self.ledger.receive(self.shard, (idx, rollout)):
                        batch.append((episode, digested))
                elif kind == b"X":  # the worker's last line
                    failure = _failure(orjson.loads(line[1:]))
            if batch:
                self.on_lines(batch)
            if failure is not None and raise_errors:
                raise failure


async def _stop(proc: trio.Process, results: _Results) -> None:
    """Shielded: ask a still running worker to stop (close its stdin), take what it
    sends for up to ``STOP_S``, then kill it; reap it, kill what it left running in its
    process group (programs a worker that died had started), close the pipes."""
    assert proc.stdin is not None
    with trio.CancelScope(shield=True):
        try:
            if proc.returncode is None:
                await proc.stdin.aclose()
                with trio.move_on_after(STOP_S):
                    await results.pump(raise_errors=False)
                    await proc.wait()
        finally:
            # the worker if still running, else what it left (its id stays the group's
            # while any member lives, so no other process is hit)
            _kill_group(proc.pid)
            await proc.wait()
            await proc.stdin.aclose()
            await results.stream.aclose()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _ending(proc: trio.Process) -> str:
    code = proc.returncode
    assert code is not None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process {proc.pid} was killed by {name}"
    return f"worker process {proc.pid} exited with code {code} before sending its shard"


def _failure(report: dict[str, Any]) -> TaketurnsError:
    """The error a worker reported: a taketurns error as itself, else ``WorkerError``."""
    if report.get("pickled"):
        try:
            error = pickle.loads(base64.b64decode(report["pickled"]))
        except Exception:
            error = None
        if isinstance(error, TaketurnsError):
            error.add_note(f"raised in a worker process:\n{report['traceback'].rstrip()}")
            return error
    return WorkerError(report["type"], report["message"], report["traceback"])


# --- the worker ----------------------------------------------------------------------


def worker_main(argv: Sequence[str]) -> int:
    """``python -m taketurns._backends.processes FD TEMP``: read the job from stdin, run
    it, send each finished episode on file descriptor ``FD``; report a failure there
    too. ``TEMP`` (this worker's temp directory, made by the driver) is removed on
    exit: a driver that was killed cannot remove it."""
    out, temp = int(argv[0]), argv[1]
    os.set_inheritable(out, False)  # programs this worker starts must not hold the pipe
    try:
        config, env_cls, pairs = _read_job(0)
        trio.run(_work, config, env_cls, pairs, out)
    except Exception as exc:
        _report(out, exc)
        return 1
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return 0


def _read_job(fd: int) -> tuple[EvalConfig, type[Env], list[Pair]]:
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8))
    path, blob = pickle.loads(_read_exactly(fd, size))
    sys.path[:] = path
    job: tuple[EvalConfig, type[Env], list[Pair]] = pickle.loads(blob)
    return job


def _read_exactly(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError("the driver closed stdin before sending the whole job")
        data += chunk
    return bytes(data)


async def _work(config: EvalConfig, env_cls: type[Env], pairs: list[Pair], out: int) -> None:
    env = seeded(name_class(env_cls, config.env_id)(config.env), config)
    plan = Plan(config, env)
    stop = trio.CancelScope()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(_stop_on_signal, stop)
            nursery.start_soon(_stop_on_eof, stop)
            with stop, tuned_gc():  # this process is ours
                await play_pairs(config, env, plan, pairs, partial(_send, out))
            nursery.cancel_scope.cancel()
    finally:
        await plan.aclose()


async def _stop_on_eof(stop: trio.CancelScope) -> None:
    """The driver closed this worker's stdin: it asks the worker to stop, or it died."""
    async with trio.lowlevel.FdStream(os.dup(0)) as stdin:
        while await stdin.receive_some():
            pass
    stop.cancel()


async def _stop_on_signal(
    stop: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    # SIGHUP too: a closed terminal stops a worker the way SIGTERM does
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            stop.cancel()


def _send(out: int, episode: Episode) -> None:
    """One finished episode to the driver, at once. A blocking write: the pipe holds
    ``PIPE_SIZE`` bytes, so it waits only when the driver falls that far behind."""
    head = orjson.dumps([episode.task.idx, episode.rollout, digest(episode)], default=str)
    _write(out, b"E%s\t%s\n" % (head, episode_line(episode)))


def _report(out: int, exc: BaseException) -> None:
    """This worker's own failure to the driver (best effort: it may be gone)."""
    exc = sole_error(exc)
    report: dict[str, Any] = {
        "type": type(exc).__qualname__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "pickled": None,
    }
    if isinstance(exc, TaketurnsError):
        with contextlib.suppress(Exception):
            report["pickled"] = base64.b64encode(pickle.dumps(exc)).decode()
    with contextlib.suppress(OSError):
        _write(out, b"X%s\n" % orjson.dumps(report))


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
