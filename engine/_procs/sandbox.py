"""The sandbox of one rollout's processes: a bubblewrap (``bwrap``) command line.

Built from an allowlist (``bwrap_argv``): the sandbox's root is an empty tmpfs, and
only what is named below exists in it, whatever the eval's working directory,
``TMPDIR``, ``sys.path`` or launch style (``taketurns``, ``python -m taketurns``, an env
by file path or by module):

- read-only: the system's runtime trees (``/usr``, ``/bin``, ``/sbin``, ``/lib*``,
  links kept links), from ``/etc`` only what resolving names, users and certificates
  and the dynamic linker need (``ETC``), the interpreter's prefix
  (``sys.base_prefix``), the venv (``sys.prefix``), the ``taketurns`` package's own
  directories (never a folder because it is on ``sys.path``), the agent program's
  install tree (resolved from the agent's ``argv[0]`` and the interpreter its
  ``#!`` line names: a ``node_modules`` tree, or ``.../bin/prog``'s installation),
  and the other absolute paths on its command line and in ``readable`` (an agent
  CLI's MCP servers' programs);
- writable: the rollout's scratch directory (its working directory, HOME and TMPDIR
  live there), at the same path as on the host; ``/tmp`` and ``/dev/shm``, fresh
  tmpfs capped at the limits' sizes (``taketurns._procs.limits``);
- its model endpoint: the interception server's Unix socket, bind-mounted at
  ``MODEL_SOCKET`` and bridged to ``127.0.0.1:PORT`` inside by the supervisor
  (``taketurns._procs.supervisor``);
- never, even when a path above would contain it: the eval's working directory, the
  host's home directories, the temp directory and the directory of every rollout's
  scratch, the run directory (``hide``); a path that contains one of them is not
  bound (its file arguments still are), one inside another rollout's scratch neither;
- its own user, PID, IPC, UTS, cgroup and network namespaces: it runs as uid and gid
  ``SANDBOX_UID`` (65534, ``nobody``) inside, sees only its own processes, and its
  network is its own loopback (``network = "host"`` keeps the host's). Its first
  process (the supervisor) is the namespace's init (``--as-pid-1``): when it exits,
  the kernel kills every process left in it;
- unprivileged on the host too (``host_ids``): run by a user, bwrap's user namespace
  maps ``SANDBOX_UID`` to that user; run as root, bwrap (which needs root's reach to
  bind what it binds) makes no user namespace and keeps only ``CAP_SETUID`` and
  ``CAP_SETGID`` for the supervisor, which first drops to the host's ``nobody``
  (uid and gid, no supplementary group: the kernel clears every capability then) and
  makes its own user namespace mapping ``SANDBOX_UID`` to it (``--user``). So host
  root's files are others' to the agent, by owner and by group bits alike; the
  scratch is handed to that uid before each start (``hand_over``);
- no capabilities (bwrap drops them all), a new session (no terminal injection).

What it cannot hide: the kernel is the host's; inside, files keep their host owners
mapped (run by a user, the user namespace maps the sandbox's uid to that user, so
what the user owns in the bound trees is the sandbox's by owner bits: a reason
nothing of the user's own is bound; run as root, what ``nobody`` owns); with
``network = "host"`` every host port is reachable.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from taketurns._procs.limits import TreeLimits

__all__ = [
    "MODEL_SOCKET",
    "SANDBOXES",
    "Layout",
    "Sandbox",
    "bwrap_argv",
    "bwrap_path",
    "hand_over",
    "host_ids",
    "layout",
    "missing_bwrap",
    "real_path",
]

SANDBOXES = ("bwrap", "none")
NETWORKS = ("endpoint", "host")
MODEL_SOCKET = "/run/taketurns/model.sock"
SANDBOX_UID = 65534  # nobody: the sandbox's uid and gid inside its user namespace
SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# what a program needs from /etc: names (hosts, DNS, users), certificates, the linker,
# the alternatives links /usr/bin points through
ETC = (
    "alternatives", "ca-certificates", "ca-certificates.conf", "gai.conf", "group",
    "host.conf", "hosts", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
    "mime.types", "nsswitch.conf", "os-release", "passwd", "pki", "protocols",
    "resolv.conf", "services", "ssl", "timezone",
)  # fmt: skip
# start bwrap in a cgroup (its cgroup.procs: argv[1]; bwrap's argv: the rest)
ENTER = (
    "import os, sys; f = open(sys.argv[1], 'w'); f.write(str(os.getpid())); f.close(); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)
INSTALL_HINT = "install Debian's bubblewrap (apt-get install bubblewrap)"


@attrs.frozen
class Sandbox:
    """One agent's containment: ``kind`` ``bwrap`` (the default) or ``none``;
    ``network`` ``endpoint`` (only the model endpoint, the default) or ``host``;
    ``hide``: more host paths never to bind (the run directory); ``readable``: more
    to bind read-only (the rollout's MCP servers' programs); ``limits``: its resource
    limits."""

    kind: str = "bwrap"
    network: str = "endpoint"
    hide: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # more host paths to bind back read-only
    limits: TreeLimits = attrs.field(factory=TreeLimits)

    def describe(self) -> str:
        """How the trace records it: ``bwrap``, ``bwrap, host network`` or ``none``."""
        if self.kind == "none":
            return "none"
        return "bwrap, host network" if self.network == "host" else "bwrap"


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def missing_bwrap(field: str) -> str:
    """The message refusing a sandboxed agent where bubblewrap is missing."""
    return (
        f"{field}.sandbox = 'bwrap' needs bubblewrap, which is not on PATH: "
        f"{INSTALL_HINT}, or set --{field}.sandbox=none to run its agents unsandboxed"
    )


def host_ids() -> tuple[int, int] | None:
    """The host uid and gid a sandbox's processes run as when the eval runs as root
    (``nobody``'s, else 65534); None otherwise (bwrap's user namespace maps the
    eval's own unprivileged user)."""
    if os.geteuid() != 0:
        return None
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return SANDBOX_UID, SANDBOX_UID
    return nobody.pw_uid, nobody.pw_gid


def hand_over(scratch: Path, ids: tuple[int, int] | None) -> None:
    """Give the scratch (everything in it the engine wrote: its config, its prompt
    files) to the sandbox's host uid and gid ``ids``, so the agent may write it; what
    that uid owns already is left alone, links are not followed. Nothing for None."""
    if ids is None:
        return
    uid, gid = ids
    names = [os.fspath(scratch)]
    for root, dirs, files in os.walk(scratch):
        names += [os.path.join(root, name) for name in (*dirs, *files)]
    for name in names:
        with contextlib.suppress(OSError):
            if os.lstat(name).st_uid != uid:
                os.chown(name, uid, gid, follow_symlinks=False)


@functools.cache
def _system_homes() -> frozenset[str]:
    """The real paths of the home directories the user database names, and of the
    fixed places no bind may contain: the same on every call, so read once per process."""
    homes = {"/root", "/home", "/tmp", "/var/tmp", "/run"}
    with contextlib.suppress(OSError):
        homes.update(p.pw_dir for p in pwd.getpwall() if p.pw_dir.startswith(("/home", "/root")))
    return frozenset(os.path.realpath(p) for p in homes)


def forbidden_paths(scratch_root: str, extra: Iterable[str]) -> list[str]:
    """What no bind may contain (real paths): the cwd, the homes (the user database's,
    once per process; ``HOME``'s and the cwd on every call: a start sees where the
    process is now), the temp directories, ``scratch_root`` (the directory of every
    rollout's scratch), and ``extra`` (the run directory)."""
    wanted = {tempfile.gettempdir(), scratch_root, os.getcwd(), *extra}
    if "HOME" in os.environ:
        wanted.add(os.environ["HOME"])
    return sorted((_system_homes() | {real_path(p) for p in wanted}) - {"/"})


def existing_real_path(path: str | os.PathLike[str]) -> str | None:
    """``os.path.realpath(path)`` when ``path`` exists (links followed), else None.
    Asked of the kernel: an ``O_PATH`` open and its ``/proc/self/fd`` link, three
    system calls whatever the depth (``realpath`` makes an ``lstat`` per component
    in Python); a host without ``/proc`` gets ``realpath``'s answer."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def real_path(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``; the kernel's answer when ``path`` exists
    (``existing_real_path``)."""
    return existing_real_path(path) or os.path.realpath(path)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _inside_any(path: str, roots: Sequence[str]) -> bool:
    """``_inside(path, r)`` for some ``r`` of ``roots`` (one C-level prefix test)."""
    return path in roots or path.startswith(tuple(r.rstrip("/") + "/" for r in roots))


# the system trees as prefixes (``_inside_any`` for them without a tuple per call)
_SYSTEM_PREFIXES = tuple(f"{tree}/" for tree in SYSTEM_TREES)


def _in_system_tree(path: str) -> bool:
    return path in SYSTEM_TREES or path.startswith(_SYSTEM_PREFIXES)


@functools.cache
def _found_packages() -> tuple[str, ...]:
    """The ``taketurns`` packages' directories, found once per process (a package
    found is imported already or importable from the same place on every call)."""
    dirs: list[str] = []
    for name in ("taketurns", "taketurns.harnesses", "taketurns.envs"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return tuple(dirs)


def _package_dirs() -> list[str]:
    return list(_found_packages())


@functools.lru_cache(maxsize=8)
def _real_existing(paths: tuple[str, ...]) -> tuple[str, ...]:
    """The real paths of those of ``paths`` that exist, sorted: asked only for the
    runtime's trees (the interpreter's prefixes and the package's directories, which
    neither move nor vanish while the process runs), so once per set of them."""
    return tuple(sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}))


def runtime_paths() -> list[str]:
    """What any sandboxed Python needs: the interpreter's prefixes (the base one, the
    venv) and the ``taketurns`` package's directories. Not ``sys.path``: the cwd or a
    script's folder is on it whenever a user runs ``python -m`` or an env by file."""
    return list(_real_existing((sys.base_prefix, sys.prefix, sys.exec_prefix, *_package_dirs())))


def _resolve(name: str, search_path: str | None) -> str | None:
    if os.path.isabs(name):
        return name if os.path.exists(name) else None
    return shutil.which(name, path=search_path)


def _shebang(path: str) -> list[str]:
    """The interpreter a ``#!`` script names (``env X``: ``X``), else nothing."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return words[:1]


def install_tree(program: str) -> list[str]:
    """Where an installed program lives: the link itself and, from its real file,
    the outermost ``node_modules`` above it (an npm prefix: the CLI and its native
    package beside it), else ``.../bin/prog``'s installation (two levels up); and,
    named as ``.../bin/prog``, the installation the name itself lies in. A program
    that is neither (a script in a user's folder) is bound alone, never its folder:
    what else it needs is named in ``Sandbox.readable``."""
    real = real_path(program)
    found = [program, real]
    parts = Path(real).parts
    if "node_modules" in parts:
        found.append(str(Path(*parts[: parts.index("node_modules") + 1])))
    elif Path(real).parent.name in ("bin", "sbin"):
        found.append(str(Path(real).parent.parent))
    if Path(program).parent.name == "bin":
        # a link's own installation too: a venv's ``bin/python`` links into the base
        # interpreter, and the venv (its pyvenv.cfg, its site-packages) is the link's
        found.append(str(Path(program).parent.parent))
    return found


def command_paths(command: str, search_path: str | None) -> list[str]:
    """What an agent's program ``command`` (its argv[0]) needs: its install tree and
    its ``#!`` interpreter's."""
    first = _resolve(command, search_path)
    if first is None:
        return []
    wanted = install_tree(first)
    for interpreter in _shebang(real_path(first)):
        resolved = _resolve(interpreter, search_path)
        if resolved is not None:
            wanted += install_tree(resolved)
    return wanted


def agent_paths(program: Sequence[str], search_path: str | None) -> list[str]:
    """What the agent program needs (from the agent's argv, never the supervisor's):
    its install tree and its ``#!`` interpreter's (``command_paths``), and every
    absolute path on its command line."""
    wanted: list[str] = [a for a in program[1:] if os.path.isabs(a) and os.path.exists(a)]
    if program:
        wanted += command_paths(program[0], search_path)
    return wanted


def _allowed(path: str, forbidden: Sequence[str], others: str | None) -> bool:
    """Whether ``path`` may be bound: it contains no forbidden place, and lies in no
    other rollout's scratch (``others``: where every scratch lies, None: not asked)."""
    if any(_inside(f, path) for f in forbidden):
        return False
    return others is None or not _inside(path, others)


@functools.cache
def _system_trees() -> tuple[str, ...]:
    """The system trees' options, read once per process (the host's layout)."""
    argv: list[str] = []
    for tree in SYSTEM_TREES:
        if os.path.islink(tree):
            argv += ["--symlink", os.readlink(tree), tree]
        elif os.path.isdir(tree):
            argv += ["--ro-bind", tree, tree]
    return tuple(argv)


@functools.cache
def _etc() -> tuple[str, ...]:
    """What of ``/etc`` is bound (``ETC``: those that exist), read once per process."""
    return tuple(p for p in (f"/etc/{name}" for name in ETC) if os.path.exists(p))


def _tmpfs(path: str, size_mb: int, perms: str) -> list[str]:
    return ["--perms", perms, "--size", str(size_mb * 1024 * 1024), "--tmpfs", path]


@attrs.frozen
class Layout:
    """A sandbox's host side for one agent program, resolved against the host once
    (``layout``) for every start of that program in that sandbox: ``bwrap``'s path and
    its options before the binds (``head``), ``/etc``'s files bound, where every
    rollout's scratch lies (``others``), what the sandbox hides besides (``hide``),
    the runtime's trees and what the program's command and ``Sandbox.readable`` need
    (``needed``), as real paths that existed when resolved. A served harness keeps one
    per sandbox, command, ``PATH`` and scratch folder for as long as it lives (an
    eval): a bwrap or a program installed elsewhere while it runs is found by the next
    eval. What no bind may contain (the cwd, the homes) is read at every start
    (``readable``), as are the start's own arguments, scratch and model socket
    (``bwrap_argv``)."""

    bwrap: str
    head: tuple[str, ...]
    etc: tuple[str, ...]
    others: str
    hide: tuple[str, ...]
    runtime: frozenset[str]
    needed: frozenset[str]

    def readable(self, args: Iterable[str]) -> list[str]:
        """The host paths bound read-only beside the system trees for a start whose
        program's arguments are ``args`` (module docstring), outermost first, none
        inside another. The runtime is bound wherever it lies (a checkout under the
        temp directory shares its parent with every scratch directory); what the
        program needs is not, when it lies in another rollout's scratch."""
        forbidden = forbidden_paths(self.others, self.hide)
        real = {r for a in args if os.path.isabs(a) and (r := existing_real_path(a)) is not None}
        bound: list[str] = []
        for path in sorted(self.runtime | self.needed | real):
            if _in_system_tree(path) or _inside_any(path, bound):
                continue  # bound already (sorted: an outer path comes first)
            if _allowed(path, forbidden, None if path in self.runtime else self.others):
                bound.append(path)
        return bound


def layout(
    sandbox: Sandbox,
    command: str | None,
    search_path: str | None,
    scratch_root: str | os.PathLike[str],
    user: tuple[int, int] | None,
) -> Layout:
    """``sandbox`` and the agent's program ``command`` (its argv[0], found on
    ``search_path``; None: no program's tree) resolved against the host, for scratch
    directories made in ``scratch_root`` and a sandbox run as ``user`` (``host_ids()``).
    Raises ``FileNotFoundError`` where bubblewrap is not on PATH."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(INSTALL_HINT)
    head = [bwrap, *_namespaces(sandbox, as_root=user is not None)]
    # --as-pid-1: the program (the supervisor) is the PID namespace's init, so when it
    # exits the kernel kills everything left in the namespace. bwrap's own init would
    # wait for every process in it instead (measured: a setsid child kept it alive).
    head += ["--as-pid-1", "--new-session", *_system_trees(), "--dev", "/dev", "--proc", "/proc"]
    head += _tmpfs("/dev/shm", sandbox.limits.shm_mb, "1777")
    head += _tmpfs("/tmp", sandbox.limits.scratch_mb, "1777")
    others = real_path(scratch_root)
    wanted = [*(command_paths(command, search_path) if command else ()), *sandbox.readable]
    return Layout(
        bwrap,
        tuple(head),
        _etc(),  # a link is bound as what it points at
        others,
        sandbox.hide,
        frozenset(runtime_paths()),  # real paths that exist already
        frozenset(r for r in map(existing_real_path, wanted) if r is not None),
    )


def _parents(paths: Iterable[str]) -> list[str]:
    """``--dir`` options making every folder on the way to ``paths`` that bwrap would
    otherwise make (``/etc``, ``/run``, a home, the scratch's folders, also inside
    the writable ``/tmp``) readable and unwritable (0555): bwrap makes them 0700, its
    own uid's (as root: root's, closed to the sandbox's uid), and nothing at a host
    path outside the scratch may be written, even privately."""
    parents = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in parents and parent not in ("/", "/tmp"):  # seen: its own are in
            if _in_system_tree(parent):
                break
            parents.add(parent)
            parent = os.path.dirname(parent)
    argv: list[str] = []
    for parent in sorted(parents):  # outer first
        argv += ["--perms", "0555", "--dir", parent]
    return argv


def _namespaces(sandbox: Sandbox, *, as_root: bool) -> list[str]:
    """bwrap's namespace and capability options. By a user: a user namespace mapping
    the user to ``SANDBOX_UID``. As root: none (the supervisor makes it once it has
    dropped to ``host_ids``), and of root's capabilities only the two that drop."""
    if not as_root:
        uid = str(SANDBOX_UID)
        argv = ["--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid]
        return [*argv, "--share-net"] if sandbox.network == "host" else argv
    argv = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if sandbox.network != "host":
        argv.append("--unshare-net")
    return [*argv, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def bwrap_argv(
    supervised: Sequence[str],
    *,
    program: Sequence[str],
    scratch: Path,
    cwd: Path,
    sandbox: Sandbox,
    model_socket: str | None,
    search_path: str | None = None,
    info_fd: int | None = None,
    user: tuple[int, int] | None = None,
    cgroup: Path | None = None,
    resolved: Layout | None = None,
) -> list[str]:
    """``bwrap`` options then ``--`` and ``supervised`` (the supervisor's argv around
    ``program``, the agent's own, whose install tree is bound): see the module
    docstring. ``model_socket``: the host's interception socket, mounted at
    ``MODEL_SOCKET``; ``search_path``: the ``PATH`` the program is started with;
    ``info_fd``: where bwrap writes its JSON info (``child-pid``: the host pid of the
    sandbox's first process, the PID namespace's init); ``user``: ``host_ids()`` when
    the eval runs as root (``supervised`` then drops to them and changes to ``cwd``
    itself: its ``--user``); ``cgroup``: the tree's cgroup v2 (``limits.tree_cgroup``),
    which bwrap is started in (``ENTER``: the interpreter writes its own pid into it,
    then executes bwrap, so every process of the tree is in it from its start);
    ``resolved``: ``layout(sandbox, program[0], search_path, scratch's folder, user)``
    kept from an earlier start (None: resolved here)."""
    own = real_path(scratch)
    if resolved is None:
        command = program[0] if program else None
        resolved = layout(sandbox, command, search_path, os.path.dirname(own), user)
    argv = list(resolved.head)
    if cgroup is not None:
        enter = [real_path(sys.executable), "-I", "-S", "-c", ENTER]
        argv = [*enter, str(cgroup / "cgroup.procs"), *argv]
    readable = resolved.readable(program[1:])
    socket = [MODEL_SOCKET] if model_socket is not None else []
    argv += _parents([*resolved.etc, *readable, own, *socket])
    for path in [*resolved.etc, *readable]:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", own, own]
    if model_socket is not None:
        argv += ["--bind", model_socket, MODEL_SOCKET]
    argv += ["--remount-ro", "/"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if user is None:  # else the supervisor changes to it once it is that uid
        argv += ["--chdir", real_path(cwd)]
    return [*argv, "--", *supervised]
