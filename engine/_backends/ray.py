"""``--backend ray``: an eval's owed (task, rollout) pairs sharded over Ray workers.

::

    driver: run_eval -> run_on_ray (trio)            worker: one Ray generator task a shard
     ├─ connect to Ray, or start a private             ├─ env, Plan (model clients, limiters)
     │  loopback instance for this eval                │  built here from the config, with
     ├─ pairs round robin into W shards, -c (and       │  this shard's share of -c
     │  --max-concurrent-calls) split into W shares    ├─ play_pairs in a trio guest run
     ├─ wait on the shards' streams (in a thread);     │  hosted by the generator itself
     │  each received episode goes to run_eval's       └─ yields each batch of finished
     │  writer at once, once per pair                     episodes at once (digest and
     └─ a shard whose worker died: its pairs not yet      JSONL line: the driver writes
        received run again in a new shard                 the line as it is)

W is ``--workers`` (default: the cluster's CPUs), at most ``-c`` and the number of
pairs. Exactly once, ``MAX_LOST`` and ``WorkerLost``: ``taketurns._backends.shards``, shared with
``--backend processes``.

Why a guest run: a Ray generator task is synchronous, and trio.run cannot yield in
the middle. In guest mode the generator is trio's host loop: it runs trio's steps and
yields between them, so episodes keep running while finished ones stream out, with no
thread of ours in the worker.

``ray`` is imported only here, on first use: ``pip install 'taketurns[ray]'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import queue
import secrets
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import attrs
import trio

from taketurns._backends.shards import Ledger, OnLines, Pair, Shard, deal
from taketurns._config.options import EvalConfig
from taketurns._config.reference import is_file_reference
from taketurns._config.registry import name_class
from taketurns._errors import ConfigError, TaketurnsError
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import Plan, seeded
from taketurns._eval.play import play_pairs
from taketurns._gc import tuned_gc
from taketurns._output.records import episode_line
from taketurns._output.summary import digest

__all__ = ["require_ray", "run_on_ray"]

POLL_S = 1.0  # longest one wait on Ray blocks its thread (bounds an abandoned wait)

Batch = list[tuple[int, int, dict[str, Any], bytes]]  # (task idx, rollout, digest, line)


def require_ray(env_id: str = "") -> None:
    """Raise ``ConfigError`` if Ray is not installed (checked without importing it), or
    if the env ``env_id`` is a class in a file (Ray workers import env classes by
    module name, from an installed package)."""
    if is_file_reference(env_id):
        raise ConfigError(
            f"backend = 'ray': env {env_id!r} is a class in a file; Ray workers import the "
            "env class from an installed package (make the file part of one, installed on "
            "every node), or run with --backend local or processes"
        )
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "backend = 'ray': Ray is not installed; pip install 'taketurns[ray]' "
            "(or run with --backend local)"
        )


# --- the worker ----------------------------------------------------------------------


@attrs.frozen
class _Job:
    config: EvalConfig  # with this shard's concurrency share
    env_cls: type[Env]
    pairs: list[Pair]


def _shard(job: _Job) -> Iterator[Batch]:
    """A Ray generator task: run ``job.pairs`` and yield finished episodes as they come."""
    env = seeded(name_class(job.env_cls, job.config.env_id)(job.config.env), job.config)
    plan = Plan(job.config, env)
    out: Batch = []

    def finished(episode: Episode) -> None:
        line = episode_line(episode)
        out.append((episode.task.idx, episode.rollout, digest(episode), line))

    async def main() -> None:
        try:
            with tuned_gc():  # a worker process of the eval's own
                await play_pairs(job.config, env, plan, job.pairs, finished)
        finally:
            await plan.aclose()

    yield from _guest_run(main, out)


def _guest_run(main: Callable[[], Awaitable[None]], out: Batch) -> Iterator[Batch]:
    """Run ``main`` in trio guest mode with this generator as the host loop, yielding
    what ``main`` appends to ``out`` after each trio step that added some."""
    steps: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
    done: list[Any] = []  # the run's outcome.Outcome
    scope = trio.CancelScope()
    token: list[trio.lowlevel.TrioToken] = []

    async def guarded() -> None:
        token.append(trio.lowlevel.current_trio_token())
        with scope:
            await main()

    trio.lowlevel.start_guest_run(
        guarded, run_sync_soon_threadsafe=steps.put, done_callback=done.append
    )
    try:
        while not done:
            steps.get()()
            if out:
                batch = out[:]
                out.clear()
                yield batch
    finally:
        if not done:  # closed early (the task was cancelled): stop trio, then drain
            if token:
                token[0].run_sync_soon(scope.cancel)
            while not done:
                steps.get()()
    if out:
        yield out[:]
    done[0].unwrap()


# --- the driver ----------------------------------------------------------------------


_END = object()


# the longest Ray's temp folder may be for its sockets to fit 107 bytes (the session's
# name and ``/sockets/plasma_store`` take up to 64), and the short one made otherwise
_RAY_TEMP_MAX = 40
_OWN_TEMP = "taketurns-ray-"


def _connect(address: str | None) -> tuple[bool, str | None]:
    """Connect to Ray (``address``, else ``RAY_ADDRESS``), or start a private instance
    on this machine's loopback. Returns whether this call started or joined it (and so
    should shut it down), and the private instance's session directory (Ray's logs and
    sockets, under ``$TMPDIR/ray``, or a short folder in ``/tmp`` when that path would
    make its sockets' too long: removed after its shutdown) or None; a process
    already connected is reused as it is. Process-wide, as Ray reads it: a private
    instance sets ``RAY_AUTH_TOKEN`` in ``os.environ`` when neither it nor
    ``RAY_AUTH_TOKEN_PATH`` is set, and it stays (a later private instance in the same
    process reuses it: Ray's token loader caches the token it read)."""
    local = address is None and not os.environ.get("RAY_ADDRESS")
    if local and "ray" not in sys.modules:
        # read by Ray at import: bind every Ray process to 127.0.0.1 (Ray's single-
        # machine mode) rather than the machine's network address; no usage reports
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return False, None
    if local:
        if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
            # Ray >= 2.52 turns token authentication on and, finding no token, writes
            # one to ~/.ray/auth_token: the user's home, where it outlives this
            # instance and is offered to every cluster they join later (whose GCS then
            # answers Unauthenticated). A private instance gets a token of its own
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        # its sockets' paths (``<temp>/ray/session_<time>_<pid>/sockets/plasma_store``)
        # must fit AF_UNIX's 107 bytes: under a long TMPDIR, a short folder of its own
        # in /tmp instead (removed with the session)
        options: dict[str, Any] = {}
        if len(os.path.join(tempfile.gettempdir(), "ray")) > _RAY_TEMP_MAX:
            options["_temp_dir"] = tempfile.mkdtemp(prefix=_OWN_TEMP, dir="/tmp")
        # its start-up chatter is about an instance private to this eval: errors only
        context = ray.init(
            address="local",
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            **options,
        )
        # a RayContext (ray.init's return for a local instance) names its session
        info = getattr(context, "address_info", None) or {}
        return True, info.get("session_dir")
    else:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(
                f"ray_address = {address!r}: cannot connect to a Ray cluster there ({exc})"
            ) from None
    return True, None


def _shutdown(ray: Any, session_dir: str | None) -> None:
    """Disconnect (stopping a private instance), then remove the private instance's
    session directory and a ``session_latest`` link left pointing at it."""
    ray.shutdown()
    if session_dir is None:
        return
    shutil.rmtree(session_dir, ignore_errors=True)
    parent = os.path.dirname(session_dir)
    if os.path.basename(parent).startswith(_OWN_TEMP):  # the short folder made for it
        shutil.rmtree(parent, ignore_errors=True)
        return
    latest = os.path.join(parent, "session_latest")
    with contextlib.suppress(OSError):
        if os.path.islink(latest) and not os.path.exists(latest):
            os.unlink(latest)


async def run_on_ray(
    config: EvalConfig,
    env: Env,
    pairs: Sequence[Pair],
    on_lines: OnLines,
    *,
    on_lost: Callable[[str], None] | None = None,
) -> None:
    """Run ``pairs`` on Ray workers, calling ``on_lines`` in this trio task with each
    batch of episodes as it arrives (each pair exactly once); ``on_lost`` hears a line
    for each worker lost (its node died, its process was killed) and rerun."""
    require_ray(config.env_id)
    if not pairs:
        return
    # abandonable: Ray retries an unreachable address for minutes; Ctrl-C still works
    started, session_dir = await trio.to_thread.run_sync(
        _connect, config.ray_address, abandon_on_cancel=True
    )
    import ray

    try:
        await _Driver(ray, config, type(env), on_lines, on_lost).run(list(pairs))
    finally:
        if started:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_shutdown, ray, session_dir)


class _Driver:
    def __init__(
        self,
        ray: Any,
        config: EvalConfig,
        env_cls: type[Env],
        on_lines: OnLines,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.ray = ray
        self.config = config
        self.env_cls = env_cls
        self.on_lines = on_lines
        self.task = ray.remote(num_cpus=1, max_retries=0)(_shard)
        self.live: dict[Any, Shard] = {}  # ObjectRefGenerator -> its shard
        self.ledger = Ledger(on_lost)

    async def run(self, pairs: list[Pair]) -> None:
        workers = self.config.workers
        if workers is None:  # one per CPU of the cluster
            resources = await trio.to_thread.run_sync(self.ray.cluster_resources)
            workers = int(resources.get("CPU", 1))
        try:
            for shard in deal(pairs, workers, self.config):
                self._submit(shard)
            while self.live:
                ready = await trio.to_thread.run_sync(
                    self._poll, list(self.live), abandon_on_cancel=True
                )
                failure: Exception | None = None
                for gen, result in ready:
                    try:
                        self._take(gen, result)
                    except Exception as exc:  # write the other shards' batches first
                        failure = failure or exc
                if failure is not None:
                    raise failure
        finally:
            if self.live:  # interrupted or failed: stop the workers still running
                gens = list(self.live)
                self.live.clear()
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._cancel, gens)

    def _submit(self, shard: Shard) -> None:
        gen = self.task.remote(_Job(shard.config(self.config), self.env_cls, shard.pairs))
        self.live[gen] = shard

    def _poll(self, gens: list[Any]) -> list[tuple[Any, Any]]:
        """(In a thread.) Wait up to ``POLL_S`` for streams with something ready; take
        one item from each: a batch, ``_END``, or the error that ended the stream."""
        ray = self.ray
        ready, _ = ray.wait(gens, num_returns=1, timeout=POLL_S)
        if ready:
            ready, _ = ray.wait(gens, num_returns=len(gens), timeout=0)
        results: list[tuple[Any, Any]] = []
        for gen in ready:
            try:
                results.append((gen, ray.get(next(gen))))
            except StopIteration:
                results.append((gen, _END))
            except ray.exceptions.RayError as exc:
                results.append((gen, exc))
        return results

    def _take(self, gen: Any, result: Any) -> None:
        shard = self.live[gen]
        if isinstance(result, list):
            receive = self.ledger.receive
            batch = [(line, d) for idx, r, d, line in result if receive(shard, (idx, r))]
            self.on_lines(batch)
            return
        del self.live[gen]
        if isinstance(result, self.ray.exceptions.RayTaskError):
            raise _cause(result)  # the shard's own code failed: a bug or bad config
        # the worker died (or ended without sending everything): run the rest again
        cause = result if isinstance(result, BaseException) else RuntimeError("stream ended")
        rest = self.ledger.redo(shard, cause)
        if rest is not None:
            self._submit(rest)

    def _cancel(self, gens: list[Any]) -> None:
        for gen in gens:
            # a stream that already ended has no task left to stop
            with contextlib.suppress(Exception):
                self.ray.cancel(gen, force=True)


def _cause(exc: Any) -> BaseException:
    """The exception a worker raised (a single-member group unwrapped): a taketurns
    error as itself, anything else as Ray's error carrying the remote traceback."""
    cause = getattr(exc, "cause", None)
    while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
        cause = cause.exceptions[0]
    if isinstance(cause, TaketurnsError):
        return cause
    error: BaseException = exc
    return error
