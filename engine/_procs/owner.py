"""The process owner: how the engine starts, waits for and ends every process tree it
starts out of process (agent programs, pooled programs, agent CLIs, ACP adapters,
mini-swe-agent, MCP stdio servers).

``start`` runs a program under the supervisor (``taketurns._procs.supervisor``), inside
a bubblewrap sandbox (``taketurns._procs.sandbox``) unless its ``Sandbox`` is ``none``,
and returns an ``OwnedProcess``. Its contract:

- **It ends when its program exits.** ``wait`` returns the program's exit status
  (``128 + n`` when a signal ``n`` killed it) as soon as the program exits; the
  supervisor then kills whatever the program left behind. ``run`` captures output
  in memory files read once the program is reaped, so a descendant holding them
  never holds the segment open.
- **The whole tree dies** on ``aclose`` (close, timeout, cancellation: callers use it
  in ``finally``): the lifeline pipe is cut, the supervisor SIGKILLs the program's
  process group and every descendant (``setsid`` and double-forked ones included: it
  is their subreaper) and exits; the owner reaps it in a shielded wait bounded by
  ``KILL_S``, and past that SIGKILLs the supervisor's group, and a sandbox's PID
  namespace through its first process, then reaps for up to ``REAP_S`` more. With a
  ``grace_s`` (a server that shuts down cleanly) the supervisor first SIGTERMs the
  program's group and gives the program that long to exit before it kills as above
  (the owner's wait grows by as much); ``kill`` skips the grace. An
  outer process that did not exit by itself (SIGKILLed by ``aclose`` or by anyone
  else, or never reaped) killed nothing, so ``aclose`` then kills on its own what
  was reported on a status pipe: without a sandbox the program's process group (the
  program writes its pid there before ``exec``: the supervisor's ``--status``),
  in a sandbox its PID namespace's init (bwrap's ``--info-fd``: ``child-pid``).
- **Eval exit**: the lifeline's write end lives only in the engine's process, so
  when that process dies (a killed worker, ``os._exit``, SIGKILL), every supervisor
  sees end of file and kills its tree (after its grace). No ``PR_SET_PDEATHSIG``: it
  fires when the *thread* that started the process exits, and the lifeline already
  covers the process's death.

Guarantees: sandboxed, exact (the supervisor is the PID namespace's init: when it
exits or is killed, the kernel kills everything in the namespace; a SIGKILLed bwrap
leaves that init to ``aclose``, which kills it). ``sandbox = none``: every
descendant of the program, however detached, is found (subreaper) and killed; what
the program got *another* service to start (a systemd unit, a daemon over a socket)
is not its descendant and survives. ``kill`` stops and kills every descendant of the
supervisor before the
supervisor. A supervisor SIGKILLed (by ``aclose`` past ``KILL_S``, or by anyone
else) with ``sandbox = none``: its program's process group
dies on ``aclose``, but a descendant that had left that group (``setsid``,
``setpgid``) lost its subreaper: it is re-parented to the nearest subreaper above (the
engine's process is none) or init, and survives; so does a program still between
``fork`` and its report when ``aclose`` reads the pipe (microseconds). What was
reported is signalled only when the outer process was killed, once, so a recycled
pid is not hit. Both: a host whose ``/proc`` is hidden cannot be scanned.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import py_compile
import signal
import stat as stat_mod
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from taketurns._procs.limits import tree_cgroup
from taketurns._procs.process import Process, open_process
from taketurns._procs.sandbox import (
    MODEL_SOCKET,
    Layout,
    Sandbox,
    bwrap_argv,
    hand_over,
    host_ids,
    real_path,
)
from taketurns._procs.scratch import read_all

__all__ = ["Captured", "Launch", "OwnedProcess", "run", "start"]

SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))
KILL_S = 3.0  # how long the supervisor may take to kill its tree and exit
REAP_S = 5.0  # how long reaping after a hard kill may take


@attrs.frozen
class Captured:
    """A finished program: its status and what it wrote to the captured pipes."""

    returncode: int
    stdout: bytes
    stderr: bytes


def _interpreter() -> str:
    # the real file, not a venv's link: the sandbox binds the base prefix back
    return real_path(sys.executable)


@functools.cache
def runnable(source: str) -> str:
    """What the interpreter runs for the supervisor script ``source``: its compiled
    form, ``__pycache__/supervisor.cpython-3XY.pyc`` beside it, (re)written here when
    missing or stale (a script run by path is compiled on every start: 3-4 ms of a
    start-up of 13-17, ``benchmarks/results/supervisor.txt``); ``source`` itself when
    that file cannot be written or when a sandbox's uid could not read it (a umask
    that made it private). Never under ``PYTHONPYCACHEPREFIX``: a sandbox binds the
    package's folder, not that prefix. Once per process and source: the supervisor does not
    change while the engine runs."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return source
    # beside the source whatever PYTHONPYCACHEPREFIX says: a sandbox sees the package
    folder, name = os.path.split(source)
    compiled = os.path.join(folder, "__pycache__", f"{name.removesuffix('.py')}.{tag}.pyc")
    try:
        stat = os.stat(source)
        if not _fresh(compiled, stat):
            py_compile.compile(
                source,
                cfile=compiled,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
            )
        if not _fresh(compiled, stat):
            return source
        for path in (compiled, os.path.dirname(compiled)):
            mode = os.stat(path).st_mode
            if not mode & stat_mod.S_IROTH or (path != compiled and not mode & stat_mod.S_IXOTH):
                return source
    except (OSError, py_compile.PyCompileError):
        return source
    return compiled


def _fresh(compiled: str, source: os.stat_result) -> bool:
    """Whether ``compiled`` is this interpreter's compiled form of a source file with
    ``source``'s modification time and size (the header ``py_compile`` writes)."""
    try:
        with open(compiled, "rb") as f:
            header = f.read(16)
    except OSError:
        return False
    return (
        len(header) == 16
        and header[:4] == importlib.util.MAGIC_NUMBER
        and int.from_bytes(header[4:8], "little") == 0  # timestamp-based
        and int.from_bytes(header[8:12], "little") == int(source.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == source.st_size & 0xFFFFFFFF
    )


def _supervisor(lifeline: str) -> list[str]:
    """The supervisor's command line up to its options: no site, isolated (it imports
    no ``taketurns`` and hardly any of the standard library: it starts fast), its
    compiled form (``runnable``)."""
    return [_interpreter(), "-I", "-S", runnable(SUPERVISOR), "--lifeline", lifeline]


@attrs.frozen
class Launch:
    """How one program is started (``argv``): ``lifeline``, the read end of its
    lifeline; ``status``: the descriptor the program's pid (``none``) or bwrap's info
    (the namespace init's host pid) is reported on; ``report``: where a sandbox's
    supervisor writes the name of a resource limit the tree passed; ``grace_s``: how
    long the program may take to exit on SIGTERM before it is killed; ``scratch``,
    ``cwd``, ``model_socket``/``model_port`` as for ``start``; ``search_path``: the
    ``PATH`` the program is started with; ``resolved``: the sandbox's ``Layout`` for
    this program, kept from an earlier start (None: resolved by ``argv``)."""

    sandbox: Sandbox
    scratch: Path
    cwd: Path
    lifeline: int
    status: int | None = None
    report: int | None = None
    grace_s: float = 0.0
    model_socket: str | None = None
    model_port: int | None = None
    search_path: str | None = None
    resolved: Layout | None = None

    @property
    def bridged(self) -> bool:
        """Whether the supervisor bridges the model endpoint into the sandbox."""
        return (
            self.sandbox.kind == "bwrap"
            and self.sandbox.network == "endpoint"
            and self.model_socket is not None
            and self.model_port is not None
        )

    def argv(self, program: Sequence[str]) -> list[str]:
        """The full argv: the supervisor around ``program``, in bwrap unless ``none``."""
        sandbox = self.sandbox
        supervised = _supervisor(str(self.lifeline))
        if self.status is not None and sandbox.kind == "none":  # a sandbox's pids are its own
            supervised += ["--status", str(self.status)]
        if self.grace_s > 0:
            supervised += ["--grace", repr(self.grace_s)]
        user = host_ids() if sandbox.kind == "bwrap" else None
        if user is not None:  # the eval runs as root: the sandbox does not
            supervised += ["--user", f"{user[0]}:{user[1]}", real_path(self.cwd)]
        if sandbox.kind == "bwrap":
            supervised += ["--limits", sandbox.limits.argument()]
            supervised += ["--scratch", real_path(self.scratch)]
            if self.report is not None:
                supervised += ["--report", str(self.report)]
        if self.bridged:
            supervised += ["--bridge", str(self.model_port), MODEL_SOCKET]
        supervised += ["--", *program]
        if sandbox.kind == "none":
            return supervised
        return bwrap_argv(
            supervised,
            program=program,
            scratch=self.scratch,
            cwd=self.cwd,
            sandbox=sandbox,
            model_socket=self.model_socket if self.bridged else None,
            search_path=self.search_path,
            info_fd=self.status,
            user=user,
            cgroup=tree_cgroup(sandbox.limits),  # where cgroup v2 is delegated
            resolved=self.resolved,
        )


def supervised(program: Sequence[str]) -> list[str]:
    """``program`` under the supervisor, for a library that starts and stops the
    process itself (the MCP SDK's stdio client): no sandbox, the lifeline is the
    supervisor's parent (the engine), and a SIGTERM (or the program exiting) kills the
    whole tree."""
    return [*_supervisor("parent"), "--", *program]


_FREEZE_ROUNDS = 50  # scans of /proc before killing what was found (a tree forking fast)


def _parents() -> dict[int, int]:
    """Every live process's parent, from ``/proc``."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            found[int(name)] = int(stat[1])
    return found


def kill_descendants(root: int) -> None:
    """SIGKILL every descendant of ``root`` (not ``root``), ``setsid`` and re-parented
    ones included (``root`` is their subreaper): each found is SIGSTOPped at once, so
    none forks or exits between the scans, and once a scan finds no one new (or after
    ``_FREEZE_ROUNDS``) all are SIGKILLed. Costs a scan of ``/proc`` a round."""
    stopped: set[int] = set()
    for _ in range(_FREEZE_ROUNDS):
        parents = _parents()
        tree, frontier = set(), [root]
        while frontier:
            parent = frontier.pop()
            kids = [pid for pid, ppid in parents.items() if ppid == parent]
            tree.update(kids)
            frontier += kids
        new = tree - stopped
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class OwnedProcess:
    """One owned process tree (see the module docstring). ``process`` is the
    outermost process (bwrap, or the supervisor); its ``stdin``/``stdout`` are the
    program's when piped."""

    __slots__ = (
        "_lifeline",
        "_limit",
        "_on_limit",
        "_report",
        "_reported",
        "_status",
        "grace_s",
        "process",
        "sandboxed",
    )

    def __init__(
        self,
        process: Process,
        lifeline: int,
        status: int,
        *,
        sandboxed: bool,
        grace_s: float = 0.0,
        report: int | None = None,
        on_limit: Callable[[str], None] | None = None,
    ) -> None:
        self.process = process
        self._lifeline: int | None = lifeline
        self._status: int | None = status  # the status pipe's read end, non-blocking
        self._reported: int | None = None
        self._report = report  # the limits report pipe's read end, non-blocking
        self._limit: str | None = None
        self._on_limit = on_limit
        self.sandboxed = sandboxed
        self.grace_s = grace_s

    @property
    def limit(self) -> str | None:
        """The resource limit the tree passed (``taketurns._procs.limits``: the
        supervisor killed it), or None. Reported once to ``on_limit``."""
        if self._limit is None and self._report is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                hit = os.read(self._report, 256).decode().split("\n", 1)[0].strip()
                if hit:
                    self._limit = hit
                    if self._on_limit is not None:
                        self._on_limit(hit)
        return self._limit

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Not exited yet (as far as a non-blocking wait can tell)."""
        return self.process.poll() is None

    async def wait(self) -> int:
        """Wait for the program to exit; its status (``128 + n`` for signal ``n``)."""
        code = await self.process.wait()
        _ = self.limit  # reported before the caller sees the status
        return 128 - code if code < 0 else code

    def cut(self) -> None:
        """Tell the supervisor to kill the tree, after its grace (non-blocking;
        ``aclose`` reaps)."""
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None

    def kill(self) -> None:
        """Kill the whole tree at once, skipping the grace, without waiting (a process
        about to exit: a second Ctrl-C; a model server that never got ready);
        ``aclose`` still reaps. A sandbox's namespace dies with its init, killed here;
        without one, every descendant of the supervisor (``setsid``'d ones included)
        is stopped, then killed, before the supervisor (``kill_descendants``)."""
        self.cut()
        if self.process.returncode is not None:
            return  # reaped: its pid may be another process's by now
        if not self.sandboxed:
            # the supervisor, SIGKILLed, would leave its tree's setsid'd members
            # without a subreaper: stop every descendant first, then kill them all
            kill_descendants(self.process.pid)
        # SIGKILL, not a second stop: a signal the supervisor gets while it is still
        # starting could be taken as the first stop and wait out the whole grace
        self._hard_kill()  # ``aclose`` kills the program's group from the status pipe

    async def aclose(self) -> None:
        """Kill the whole tree and reap it, close the pipes. Shielded and bounded;
        idempotent."""
        self.cut()
        with trio.CancelScope(shield=True):
            with trio.move_on_after(KILL_S + self.grace_s):
                await self.process.wait()
            if self.process.returncode is None:
                self._hard_kill()
                with trio.move_on_after(REAP_S):
                    await self.process.wait()
            code = self.process.returncode
            # killed, not exited, it killed nothing (a namespace dies with its init);
            # exited, what it reported is not needed (nor read)
            killed = code is None or code < 0
            reported = self._read_status() if killed else None
            if reported is not None:
                with contextlib.suppress(OSError):
                    if self.sandboxed:
                        os.kill(reported, signal.SIGKILL)
                    else:
                        os.killpg(reported, signal.SIGKILL)
            _ = self.limit
            self._drop_status()
            if self._report is not None:
                os.close(self._report)
                self._report = None
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                if stream is not None:
                    await stream.aclose()

    def _read_status(self) -> int | None:
        """What the status pipe reported: the program's process group (no sandbox)
        or the PID namespace's init (bwrap); None when nothing was (not started)."""
        if self._reported is None and self._status is not None:
            # OSError: nothing written; ValueError, KeyError: nothing whole
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                raw = os.read(self._status, 4096)
                self._reported = int(json.loads(raw)["child-pid"] if self.sandboxed else raw)
        return self._reported

    def _drop_status(self) -> None:
        """Forget what was reported (never signalled twice: a pid may be reused once
        it is gone) and close the status pipe."""
        self._reported = None
        if self._status is not None:
            os.close(self._status)
            self._status = None

    def _hard_kill(self) -> None:
        """The supervisor did not finish: SIGKILL the sandbox's PID namespace (through
        its init, bwrap's child: the supervisor) and the outer process's group."""
        pid = self.process.pid
        if self.sandboxed:
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                for child in children:
                    os.kill(int(child), signal.SIGKILL)  # a PID namespace's init
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


async def start(
    program: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    sandbox: Sandbox,
    scratch: Path,
    model_socket: str | None = None,
    model_port: int | None = None,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = subprocess.DEVNULL,
    stderr: Any = subprocess.DEVNULL,
    grace_s: float = 0.0,
    on_limit: Callable[[str], None] | None = None,
    resolved: Layout | None = None,
) -> OwnedProcess:
    """Start ``program`` in ``cwd`` with exactly ``env``, owned (module docstring).
    ``scratch``: the only writable directory when sandboxed (``cwd`` lies in it);
    ``model_socket``/``model_port``: the interception server's Unix socket and the
    loopback port to bridge it to inside the sandbox. ``stdin``/``stdout``/``stderr``
    as for ``subprocess`` (a file, ``PIPE`` or ``DEVNULL``). ``grace_s``: how long
    the program may take to exit on SIGTERM when stopped before it is killed (0: no
    SIGTERM, killed at once). ``on_limit``: called with the limit's name when a
    sandboxed tree passed one of its resource limits and was killed (at the latest
    when ``wait`` returns). ``resolved``: ``sandbox``'s ``Layout`` for ``program``
    kept from an earlier start (``taketurns._procs.sandbox.layout``; None: resolved
    for this start)."""
    if sandbox.kind == "bwrap":
        hand_over(scratch, host_ids())  # its uid may write it (the eval runs as root)
    read_end, write_end = os.pipe()
    status_read, status_write = os.pipe()
    report_read, report_write = os.pipe()
    try:
        launch = Launch(
            sandbox,
            scratch,
            cwd,
            read_end,
            status=status_write,
            report=report_write,
            grace_s=grace_s,
            model_socket=model_socket,
            model_port=model_port,
            search_path=env.get("PATH"),
            resolved=resolved,
        )
        process = await open_process(
            launch.argv(program),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=str(cwd),
            env=dict(env),
            pass_fds=(read_end, status_write, report_write),
            start_new_session=True,  # a terminal's Ctrl-C reaches the engine only
        )
    except BaseException:
        os.close(write_end)
        os.close(status_read)
        os.close(report_read)
        raise
    finally:
        os.close(read_end)
        os.close(status_write)
        os.close(report_write)
    os.set_blocking(status_read, False)
    os.set_blocking(report_read, False)
    return OwnedProcess(
        process,
        write_end,
        status_read,
        sandboxed=sandbox.kind != "none",
        grace_s=grace_s,
        report=report_read,
        on_limit=on_limit,
    )


async def run(program: Sequence[str], **options: Any) -> Captured:
    """Run ``program`` to its exit with stdout and stderr captured (stdin: nothing),
    started as ``start`` starts it (``options``: ``start``'s keyword arguments but the
    standard streams); the tree is killed and reaped on every path. Cancellation
    kills it. The output goes to two memory files (``memfd_create``), read once the
    program is reaped: no task reads while it runs, and whatever a descendant still
    holds them for cannot hold the segment open."""
    out = os.memfd_create("taketurns-stdout")
    try:
        err = os.memfd_create("taketurns-stderr")
        try:
            owned = await start(program, **options, stdout=out, stderr=err)
            try:
                returncode = await owned.wait()
            finally:
                await owned.aclose()
            return Captured(returncode, read_all(out), read_all(err))
        finally:
            os.close(err)
    finally:
        os.close(out)
