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
  network is its own loopback (``network = "host"`` keeps the host's,
  ``--share-net``). Its first process (the supervisor) is the namespace's init
  (``--as-pid-1``): when it exits, the kernel kills every process left in it;
- no capabilities (bwrap drops them all), a new session (no terminal injection).

What it cannot hide: the kernel is the host's; inside, files keep their host owners
mapped (the user namespace maps the sandbox's uid to the eval's user, so what that
user owns in the bound trees is the sandbox's by owner bits: a reason nothing of the
user's own is bound); with ``network = "host"`` every host port is reachable.
"""

from __future__ import annotations

import contextlib
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

__all__ = ["MODEL_SOCKET", "SANDBOXES", "Sandbox", "bwrap_argv", "bwrap_path", "missing_bwrap"]

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


def _homes() -> set[str]:
    homes = {"/root", "/home"}
    with contextlib.suppress(OSError):
        homes.update(p.pw_dir for p in pwd.getpwall() if p.pw_dir.startswith(("/home", "/root")))
    if "HOME" in os.environ:
        homes.add(os.environ["HOME"])
    return homes


def forbidden_paths(scratch: Path, extra: Iterable[str]) -> list[str]:
    """What no bind may contain (real paths): the cwd, the homes, the temp directories,
    the directory of every rollout's scratch, and ``extra`` (the run directory)."""
    wanted = {*_homes(), "/tmp", "/var/tmp", "/run", tempfile.gettempdir(), str(scratch.parent)}
    wanted.add(os.getcwd())
    wanted.update(extra)
    return sorted({os.path.realpath(p) for p in wanted} - {"/"})


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _package_dirs() -> list[str]:
    dirs = []
    for name in ("taketurns", "taketurns.harnesses", "taketurns.envs"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return dirs


def runtime_paths() -> list[str]:
    """What any sandboxed Python needs: the interpreter's prefixes (the base one, the
    venv) and the ``taketurns`` package's directories. Not ``sys.path``: the cwd or a
    script's folder is on it whenever a user runs ``python -m`` or an env by file."""
    wanted = [sys.base_prefix, sys.prefix, sys.exec_prefix, *_package_dirs()]
    return sorted({os.path.realpath(p) for p in wanted if os.path.exists(p)})


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
    named as ``.../bin/prog``, the installation the name itself lies in."""
    real = os.path.realpath(program)
    found = [program, real]
    parts = Path(real).parts
    if "node_modules" in parts:
        found.append(str(Path(*parts[: parts.index("node_modules") + 1])))
    else:
        found.append(str(Path(real).parent.parent))
    if Path(program).parent.name == "bin":
        # a link's own installation too: a venv's ``bin/python`` links into the base
        # interpreter, and the venv (its pyvenv.cfg, its site-packages) is the link's
        found.append(str(Path(program).parent.parent))
    return found


def agent_paths(program: Sequence[str], search_path: str | None) -> list[str]:
    """What the agent program needs (from the agent's argv, never the supervisor's):
    its install tree and its ``#!`` interpreter's, and every absolute path on its
    command line."""
    wanted: list[str] = [a for a in program[1:] if os.path.isabs(a) and os.path.exists(a)]
    first = _resolve(program[0], search_path) if program else None
    if first is not None:
        wanted += install_tree(first)
        for interpreter in _shebang(os.path.realpath(first)):
            resolved = _resolve(interpreter, search_path)
            if resolved is not None:
                wanted += install_tree(resolved)
    return wanted


def _allowed(path: str, forbidden: Sequence[str], others: str | None) -> bool:
    """Whether ``path`` may be bound: it contains no forbidden place, and lies in no
    other rollout's scratch (``others``: where every scratch lies, None: not asked)."""
    if any(_inside(f, path) for f in forbidden):
        return False
    return others is None or not _inside(path, others)


def _system_binds() -> list[str]:
    argv: list[str] = []
    for tree in SYSTEM_TREES:
        if os.path.islink(tree):
            argv += ["--symlink", os.readlink(tree), tree]
        elif os.path.isdir(tree):
            argv += ["--ro-bind", tree, tree]
    for name in ETC:
        path = f"/etc/{name}"
        if os.path.exists(path):  # a link is bound as what it points at
            argv += ["--ro-bind", path, path]
    return argv


def _tmpfs(path: str, size_mb: int, perms: str) -> list[str]:
    return ["--perms", perms, "--size", str(size_mb * 1024 * 1024), "--tmpfs", path]


def readable_binds(
    program: Sequence[str], own: str, sandbox: Sandbox, search_path: str | None
) -> list[str]:
    """The host paths bound read-only beside the system trees (module docstring),
    outermost first, none inside another. The runtime is bound wherever it lies (a
    checkout under the temp directory shares its parent with every scratch
    directory); what the agent's command line names is not, when it lies in another
    rollout's scratch."""
    forbidden = forbidden_paths(Path(own), sandbox.hide)
    others = os.path.dirname(own)  # every rollout's scratch lives there
    runtime = set(runtime_paths())
    wanted = {*runtime, *agent_paths(program, search_path), *sandbox.readable}
    bound: list[str] = [*SYSTEM_TREES]
    for path in sorted({os.path.realpath(p) for p in wanted if os.path.exists(p)}):
        if any(_inside(path, b) for b in bound):
            continue  # bound already (sorted: an outer path comes first)
        if _allowed(path, forbidden, None if path in runtime else others):
            bound.append(path)
    return bound[len(SYSTEM_TREES) :]


def _sealed_parents(paths: Iterable[str]) -> list[str]:
    """``--dir`` options making the folders bwrap would create on the way to
    ``paths`` inside the writable ``/tmp`` (the scratch under ``TMPDIR=/tmp/...``)
    unwritable (0555), so that nothing at a host path outside the scratch can be
    written, even privately."""
    parents = set()
    for path in paths:
        parent = os.path.dirname(path)
        while _inside(parent, "/tmp") and parent != "/tmp":
            parents.add(parent)
            parent = os.path.dirname(parent)
    argv: list[str] = []
    for parent in sorted(parents):  # outer first
        argv += ["--perms", "0555", "--dir", parent]
    return argv


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
) -> list[str]:
    """``bwrap`` options then ``--`` and ``supervised`` (the supervisor's argv around
    ``program``, the agent's own, whose install tree is bound): see the module
    docstring. ``model_socket``: the host's interception socket, mounted at
    ``MODEL_SOCKET``; ``search_path``: the ``PATH`` the program is started with;
    ``info_fd``: where bwrap writes its JSON info (``child-pid``: the host pid of
    the sandbox's first process, the PID namespace's init)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(INSTALL_HINT)
    uid = str(SANDBOX_UID)
    # --as-pid-1: the program (the supervisor) is the PID namespace's init, so when it
    # exits the kernel kills everything left in the namespace. bwrap's own init would
    # wait for every process in it instead (measured: a setsid child kept it alive).
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid]
    argv += ["--as-pid-1", "--new-session"]
    if sandbox.network == "host":
        argv.append("--share-net")
    argv += _system_binds()
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += _tmpfs("/dev/shm", sandbox.limits.shm_mb, "1777")
    argv += _tmpfs("/tmp", sandbox.limits.scratch_mb, "1777")
    own = os.path.realpath(scratch)
    readable = readable_binds(program, own, sandbox, search_path)
    argv += _sealed_parents([*readable, own])
    for path in readable:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", own, own]
    if model_socket is not None:
        argv += ["--dir", os.path.dirname(MODEL_SOCKET), "--bind", model_socket, MODEL_SOCKET]
    argv += ["--remount-ro", "/"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--chdir", os.path.realpath(cwd), "--", *supervised]
    return argv
