"""The supervisor: the first process of every process tree the engine owns.

Run as a plain script (``python -I -S supervisor.py ...``: no ``taketurns`` import, and
of the standard library only what is built into the interpreter or a C extension
beside ``os`` (``_signal``, ``_thread``, ``_socket``, ``_ctypes``: none of ``signal``,
``socket``, ``subprocess``, ``threading``, ``contextlib``, whose imports were three
quarters of its start-up, ``benchmarks/bench_sandbox.py``, nor ``ctypes``, 3 ms more,
but on a failed call, to name its errno), and the engine runs it compiled
(``taketurns._procs.owner.runnable``), so it starts
in milliseconds, also inside a sandbox that sees only the interpreter and this
file)::

    supervisor.py --lifeline FD|parent [--status FD] [--grace S] [--bridge PORT SOCKET]
                  [--limits NAME=N,... --report FD --scratch DIR] -- PROGRAM [ARGS...]

It makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``: every orphaned
descendant, ``setsid`` and double-forked ones included, becomes its child), starts
PROGRAM in a new session with the supervisor's own stdin/stdout/stderr and
environment, reaps whatever becomes its child, and when PROGRAM exits kills the rest
of the tree and exits with PROGRAM's status (``128 + n`` for a signal ``n``). The
tree is also killed when

- the lifeline ``FD`` (the read end of a pipe whose only write end the engine holds)
  reaches end of file: the engine dropped this tree (close, timeout, cancellation),
  or the engine's process died (eval exit, a killed worker). ``--lifeline parent``
  (for a supervisor some library started, which could pass it no descriptor): the
  supervisor's parent died (it was re-parented), checked every ``PARENT_POLL_S``;
- the supervisor gets SIGTERM, SIGINT or SIGHUP.

Killing the tree is ``SIGKILL`` to PROGRAM's process group, then, until the
supervisor has no children left, ``SIGKILL`` to each child and reaping it (a dead
child's own children are re-parented to the supervisor and killed next round), so
SIGTERM-ignorers, ``setsid`` children and daemons all die. Whether any child is left
is asked of the kernel (``waitid``) before ``/proc`` is read for their pids: a
process that read its own ``/proc`` entries makes its reaper pay for dropping them
(milliseconds of the engine's CPU per program, measured), and a program that left
nothing behind needs no read. A process that is no
descendant (one a sandbox-less program asked another service to start) is beyond it.

``--grace S`` (a server that shuts down cleanly): told to stop, the supervisor first
sends ``SIGTERM`` to PROGRAM's process group and gives PROGRAM ``S`` seconds to exit,
then ``SIGKILL`` as above; either way, once PROGRAM has exited the rest of the tree is
killed as when it exits by itself. Told to stop a second time during the grace, it
kills at once.

``--status FD``: PROGRAM's pid (its process group: it leads a new session) is written
as one decimal line to ``FD`` by PROGRAM's own process between ``setsid`` and
``exec``, so it is reported before PROGRAM runs, and the engine can still kill that
group when the supervisor itself is SIGKILLed (``taketurns._procs.owner``). PROGRAM
is forked while the supervisor has no other thread (its threads start once PROGRAM
runs; the bridge's socket listens before), so the forked child may run Python until
``exec``: it restores the signals Python ignores (``SIGPIPE``, ``SIGXFSZ``), closes
every descriptor but the standard three, and reports a failed ``exec`` to the
supervisor (status 127 and a line on stderr). ``--status`` and ``--bridge``
exclude each other.

``--bridge PORT SOCKET`` (inside a sandbox whose network namespace has only its own
loopback): listen on ``127.0.0.1:PORT`` before PROGRAM starts and forward each
connection to the Unix socket ``SOCKET`` (the interception server's, bind-mounted
into the sandbox), so PROGRAM's model base URL stays ``http://127.0.0.1:PORT/...``.

``--user UID:GID DIR`` (inside a sandbox bwrap started as root, with only
``CAP_SETUID`` and ``CAP_SETGID``): before anything else, drop to host uid ``UID`` and
gid ``GID`` with no supplementary group (the kernel then clears every capability),
make a user namespace mapping them to ``SANDBOX_ID`` (as bwrap's own does for a
user), and change to the working directory ``DIR`` (the scratch is that uid's, which
root without its capabilities may not enter); a drop that fails ends the supervisor
(status 126) before PROGRAM starts.

``--limits`` (inside a sandbox, where the supervisor is the PID namespace's init and
``/proc`` shows exactly the tree; ``taketurns._procs.limits`` says what each limit
means): the rlimits are set on the supervisor before PROGRAM starts (every process
inherits them), and a watchdog thread polls the tree's process count, resident
memory and CPU time, the size of ``--scratch DIR`` and the fill of ``/dev/shm`` and
``/tmp``; past a limit it writes the limit's name as one line to the ``--report``
descriptor and kills the tree.
"""

from __future__ import annotations

import _ctypes
import _signal  # type: ignore[import-not-found]  # no stub: signal's C half
import _socket
import _thread
import itertools
import os
import sys
import time
from _collections_abc import Callable  # loaded with os: collections.abc is not

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
CLONE_NEWUSER = 0x10000000
SANDBOX_ID = 65534  # the uid and gid inside (taketurns._procs.sandbox.SANDBOX_UID)
_CHUNK = 65536
_ROUNDS = 1000  # kill rounds before giving up on a tree that keeps forking
PARENT_POLL_S = 0.2
POLL_S = 0.05  # the limits watchdog: processes, memory, CPU
DISK_POLL_S = 0.5  # the limits watchdog: scratch, /dev/shm, /tmp
_MB = 1024 * 1024
_TMPFS = {"/dev/shm": "shm_mb", "/tmp": "scratch_mb"}
_CANNOT_EXEC = 127


class _suppress:
    """``contextlib.suppress``, whose import would cost the start-up."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _libc(name: str, *args: int) -> None:
    """Call libc's ``name`` with integer ``args`` through ``_ctypes`` (no ``ctypes``
    import); ``OSError`` when it returns non-zero, its errno found by calling it once
    more through ``ctypes`` (each call here fails again the same way, changing
    nothing)."""
    libc = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: the process's own symbols
    if _ctypes.call_function(_ctypes.dlsym(libc, name), args) == 0:
        return
    import ctypes

    call = getattr(ctypes.CDLL(None, use_errno=True), name)
    if call(*args) == 0:
        return
    raise OSError(ctypes.get_errno(), f"{name}{args} failed")


def _subreaper() -> None:
    _libc("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _drop(uid: int, gid: int, cwd: str) -> None:
    """Become host ``uid``/``gid``, unprivileged, in a user namespace of its own, in
    ``cwd`` (``--user``). Single-threaded: ``unshare(CLONE_NEWUSER)`` refuses
    otherwise."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root: every capability is cleared
    # a uid change made the process undumpable: its /proc/self is root's then
    _libc("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)
    _libc("unshare", CLONE_NEWUSER)
    for name, line in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_ID} {uid} 1"),
                       ("gid_map", f"{SANDBOX_ID} {gid} 1")):  # fmt: skip
        with open(f"/proc/self/{name}", "w") as f:
            f.write(line)
    os.chdir(cwd)
    os.environ["PWD"] = cwd  # bwrap set it to where it could go (a CLI may read it)


def _kill(pid: int, *, group: bool = False) -> None:
    """SIGKILL ``pid`` (its process group with ``group``); gone already is fine."""
    with _suppress(OSError):
        if group:
            os.killpg(pid, _signal.SIGKILL)
        else:
            os.kill(pid, _signal.SIGKILL)


def _any_child() -> bool:
    """Whether this process has a child, alive or not yet reaped (the kernel's answer:
    no ``/proc`` read)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _children() -> list[int]:
    """This process's children: each of its threads' ``children`` list in ``/proc``
    (re-parented orphans land on any thread of a subreaper). Reading these costs
    microseconds; scanning every process's ``stat`` cost tens of milliseconds on a
    busy machine."""
    found: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", "rb") as f:
                found += [int(pid) for pid in f.read().split()]
        except OSError:
            continue
    return found


def kill_tree(group: int | None) -> None:
    """SIGKILL ``group`` and every descendant, reaping each, until none is left."""
    if group is not None:
        _kill(group, group=True)
    for _ in range(_ROUNDS):
        if not _any_child():
            return
        children = _children()
        if not children:
            return
        for pid in children:
            _kill(pid)
        for pid in children:
            with _suppress(OSError):
                os.waitpid(pid, 0)


def _pump(source: _socket.socket, sink: _socket.socket) -> None:
    with _suppress(OSError):
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    with _suppress(OSError):
        sink.shutdown(_socket.SHUT_WR)


def _forward(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = _thread.allocate_lock()
    back.acquire()
    _thread.start_new_thread(_pump_then_release, (upstream, client, back))
    _pump(client, upstream)
    back.acquire()  # the other direction is done too
    client.close()
    upstream.close()


def _pump_then_release(
    source: _socket.socket, sink: _socket.socket, done: _thread.LockType
) -> None:
    try:
        _pump(source, sink)
    finally:
        done.release()


def _listen(port: int) -> _socket.socket:
    server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)
    return server


def _serve_bridge(server: _socket.socket, path: str) -> None:
    # socket (the Python half, ~5 ms to import) only here: a bridged launch's thread
    import socket

    listener = socket.socket(fileno=server.detach())
    while True:
        client, _ = listener.accept()
        _thread.start_new_thread(_forward, (client, path))


def _watch_lifeline(lifeline: str, on_cut: Callable[[], None]) -> None:
    if lifeline == "parent":
        parent = os.getppid()
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
    else:
        with _suppress(OSError):
            while os.read(int(lifeline), 1):
                pass
    on_cut()


def _apply_rlimits(limits: dict[str, int]) -> None:
    import resource

    wanted = {
        resource.RLIMIT_NOFILE: limits["open_files"],
        resource.RLIMIT_CPU: limits["cpu_s"],
        resource.RLIMIT_FSIZE: limits["scratch_mb"] * _MB,
        # a backstop past the watchdog's count (which ends the tree at the limit):
        # the kernel stops a bomb faster than the polls, and a program that failed to
        # fork still leaves its tree over the limit when it exits (``_report_last``)
        resource.RLIMIT_NPROC: 2 * limits["processes"],
    }
    for which, value in wanted.items():
        _soft, hard = resource.getrlimit(which)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        with _suppress(ValueError, OSError):
            resource.setrlimit(which, (capped, capped))


def _tree_usage() -> tuple[int, int, float]:
    """The namespace's processes (the supervisor aside): count, resident bytes, CPU
    seconds (with what its reaped descendants used)."""
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    count, resident, ticks = 0, 0, 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/statm", "rb") as f:
                resident += int(f.read().split()[1]) * page
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
        count += 1
    reaped = os.times()
    return count, resident, ticks / tick + reaped.children_user + reaped.children_system


def _disk_usage(root: str) -> int:
    total = 0
    stack = [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    return total


def _over(limits: dict[str, int], scratch: str | None, disk: bool) -> str | None:
    """The first limit the tree is past, or None."""
    count, resident, cpu = _tree_usage()
    if count > limits["processes"]:
        return "processes"
    if resident > limits["memory_mb"] * _MB:
        return "memory_mb"
    if cpu > limits["cpu_s"]:
        return "cpu_s"
    return _disk_over(limits, scratch) if disk else None


def _disk_over(limits: dict[str, int], scratch: str | None) -> str | None:
    if scratch is not None and _disk_usage(scratch) > limits["scratch_mb"] * _MB:
        return "scratch_mb"
    for mount, name in _TMPFS.items():
        try:
            fs = os.statvfs(mount)
        except OSError:
            continue
        if fs.f_bavail * fs.f_frsize < _MB:  # full, to the last MB
            return name
    return None


_REPORTING = _thread.allocate_lock()


def _report(options: _Options, hit: str) -> None:
    """Write ``hit`` on the report pipe, once (the watchdog and the main thread may
    both find a limit passed)."""
    if options.report is not None and _REPORTING.acquire(False):
        with _suppress(OSError):
            os.write(options.report, f"{hit}\n".encode())
        with _suppress(OSError):
            os.close(options.report)  # once: a second report is never read
        options.report = None


def _report_last(options: _Options) -> None:
    """The program failed: the tree it leaves (not killed yet) past a limit, a full
    disk, is why."""
    assert options.limits is not None
    hit = _over(options.limits, options.scratch, disk=True)
    if hit is not None:
        _report(options, hit)


def _watch_limits(options: _Options, stopper: _Stopper) -> None:
    """Poll the limits until one is passed: report it, kill the tree."""
    assert options.limits is not None
    every = max(1, round(DISK_POLL_S / POLL_S))
    for round_ in itertools.count():
        time.sleep(POLL_S)
        hit = _over(options.limits, options.scratch, disk=round_ % every == 0)
        if hit is None:
            continue
        _report(options, hit)
        stopper.kill()  # the main loop reaps the program, then kills the rest
        return


class _Options:
    def __init__(self, argv: list[str]) -> None:
        split = argv.index("--")
        options, self.program = argv[:split], argv[split + 1 :]

        def value(name: str) -> str | None:
            return options[options.index(name) + 1] if name in options else None

        self.lifeline = str(value("--lifeline"))
        status = value("--status")
        self.status = int(status) if status is not None else None
        self.grace = float(value("--grace") or 0.0)
        self.bridge = None
        if "--bridge" in options:
            at = options.index("--bridge")
            self.bridge = (int(options[at + 1]), options[at + 2])
        limits = value("--limits")
        self.limits = None
        if limits is not None:
            pairs = (item.split("=", 1) for item in limits.split(","))
            self.limits = {name: int(number) for name, number in pairs}
        report = value("--report")
        self.report = int(report) if report is not None else None
        self.scratch = value("--scratch")
        self.user = None
        if "--user" in options:
            at = options.index("--user")
            uid, gid = options[at + 1].split(":")
            self.user = (int(uid), int(gid), options[at + 2])
        if not self.program:
            raise SystemExit("supervisor: no program after --")
        if self.status is not None and self.bridge is not None:
            raise SystemExit("supervisor: --status and --bridge exclude each other")


class _Stopper:
    """How the program is told to stop (``cut``: from a signal handler, or the lifeline
    watcher's thread): the first time, ``SIGTERM`` and ``SIGKILL`` after the grace
    (none: at once); a second time, ``SIGKILL`` at once. A stop asked for before the
    program started is acted on once it has (``started``)."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.group: int | None = None
        self.asked = 0
        self._asks = itertools.count(1)  # next() is atomic: two threads may ask at once

    def started(self, group: int) -> None:
        self.group = group
        if self.asked:  # told to stop while it was starting
            self._act(gently=self.asked == 1)

    def cut(self, *_: object) -> None:
        ask = next(self._asks)
        self.asked = max(self.asked, ask)
        if self.group is not None:
            self._act(gently=ask == 1)

    def _act(self, *, gently: bool) -> None:
        if gently and self.grace > 0:
            self._signal(_signal.SIGTERM)
            _thread.start_new_thread(self._kill_after, (self.grace,))
        else:
            self._signal(_signal.SIGKILL)

    def _kill_after(self, grace: float) -> None:
        time.sleep(grace)
        self._signal(_signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the program's group at once (a limit was passed)."""
        self.asked = max(self.asked, 2)
        self._signal(_signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        if self.group is not None:
            with _suppress(OSError):
                os.killpg(self.group, signum)


def _spawn(program: list[str], status: int | None) -> int:
    """Fork and ``exec`` ``program`` in a new session (the supervisor has no other
    thread yet), as ``subprocess.Popen(close_fds=True, start_new_session=True)``
    would: the signals Python ignores restored, every descriptor but 0-2 closed; its
    pid reported on ``status`` (when given) before ``exec``. Its pid; ``OSError``
    when it could not ``exec`` (the child has been reaped)."""
    failed_read, failed_write = os.pipe()  # close-on-exec: EOF once the exec succeeded
    pid = os.fork()
    if pid == 0:  # the child: nothing here may return
        code = _CANNOT_EXEC
        try:
            os.close(failed_read)
            os.setsid()
            for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
                _signal.signal(signum, _signal.SIG_DFL)
            if status is not None:
                with _suppress(OSError):
                    os.write(status, f"{os.getpid()}\n".encode())
            os.closerange(3, failed_write)
            os.closerange(failed_write + 1, os.sysconf("SC_OPEN_MAX"))
            os.execvp(program[0], program)
        except OSError as exc:
            with _suppress(OSError):
                os.write(failed_write, f"{exc.errno}".encode())
        finally:
            os._exit(code)
    os.close(failed_write)
    try:
        failure = b""
        while chunk := os.read(failed_read, 64):
            failure += chunk
    finally:
        os.close(failed_read)
    if failure:
        os.waitpid(pid, 0)
        errno = int(failure)
        raise OSError(errno, os.strerror(errno), program[0])
    return pid


def main(argv: list[str]) -> int:
    options = _Options(argv)
    if options.user is not None:
        try:
            _drop(*options.user)
        except OSError as exc:
            print(f"supervisor: cannot drop to {options.user[:2]}: {exc}", file=sys.stderr)
            return 126
    _subreaper()
    if options.limits is not None:
        _apply_rlimits(options.limits)
    listener = _listen(options.bridge[0]) if options.bridge is not None else None
    stopper = _Stopper(options.grace)
    for signum in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(signum, stopper.cut)
    try:
        program = _spawn(options.program, options.status)
    except OSError as exc:
        hint = ""
        if exc.errno == 13 and options.user is not None:  # EACCES as the dropped uid
            hint = (f" (the sandbox runs it as host uid {options.user[0]}, not root: the"
                    " file must be executable, and every directory above it searchable,"
                    " by that uid)")  # fmt: skip
        print(f"supervisor: cannot start {options.program[0]!r}: {exc}{hint}", file=sys.stderr)
        return _CANNOT_EXEC
    if options.status is not None:
        os.close(options.status)
    stopper.started(program)
    if listener is not None and options.bridge is not None:  # threads: once it runs
        _thread.start_new_thread(_serve_bridge, (listener, options.bridge[1]))
    if options.limits is not None:
        _thread.start_new_thread(_watch_limits, (options, stopper))
    _thread.start_new_thread(_watch_lifeline, (options.lifeline, stopper.cut))
    status = 0
    while True:  # reap every child; stop when the program itself exits
        try:
            pid, raw = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == program:
            status = os.waitstatus_to_exitcode(raw)
            break
    if options.limits is not None and status != 0:
        # a write past a tmpfs's cap fails at once (ENOSPC), a fork past RLIMIT_NPROC
        # too (EAGAIN), and the program may exit on that before the watchdog's next
        # look: a failure on a full disk or with its tree past a limit is the limit
        _report_last(options)
    kill_tree(program)
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: the threads left are blocked reads
