"""The sandbox of one rollout's processes: a bubblewrap (``bwrap``) command line.

What a sandboxed process sees (``bwrap_argv``):

- the host filesystem read-only (``--ro-bind / /``), with the host's home
  directories, ``/tmp``, ``/var/tmp``, ``/run``, the temp directory, the directory
  holding the rollout's scratch (so every other rollout's scratch), the eval's working
  directory (the project checkout, say) and the run directory replaced by empty,
  read-only tmpfs: invisible, not merely unwritable;
- bound back read-only: what the program needs to run (the Python interpreter's
  prefixes, ``sys.path``'s directories, the ``taketurns`` package, and every absolute
  path on the program's command line, with the installation a linked ``argv[0]``
  resolves into);
- writable: only the rollout's scratch directory (its working directory, HOME and
  TMPDIR live there), at the same path as on the host;
- its own PID, IPC, UTS, cgroup and network namespaces (``--unshare-all``): it sees
  only its own processes, and its network is its own loopback. Its first process
  (the supervisor) is the namespace's init (``--as-pid-1``): when it exits, the kernel
  kills every process left in the namespace. The model endpoint is
  the interception server's Unix socket, bind-mounted at ``MODEL_SOCKET`` and bridged
  to ``127.0.0.1:PORT`` inside by the supervisor (``taketurns._procs.supervisor``).
  ``network = "host"`` keeps the host's network instead (``--share-net``);
- no capabilities (bwrap drops them all), a new session (no terminal injection).

What it cannot hide: the sandbox shares the host's kernel and runs as the eval's
user. A kernel exploit, or a host file that is readable and not hidden (``/etc``,
``/usr``, ``/opt``, other top-level trees), stays in reach; CPU, memory and disk are
not limited; with ``network = "host"`` every host port is reachable.
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

__all__ = ["MODEL_SOCKET", "SANDBOXES", "Sandbox", "bwrap_argv", "bwrap_path", "missing_bwrap"]

SANDBOXES = ("bwrap", "none")
NETWORKS = ("endpoint", "host")
MODEL_SOCKET = "/run/taketurns/model.sock"
INSTALL_HINT = "install Debian's bubblewrap (apt-get install bubblewrap)"


@attrs.frozen
class Sandbox:
    """One agent's containment: ``kind`` ``bwrap`` (the default) or ``none``;
    ``network`` ``endpoint`` (only the model endpoint, the default) or ``host``;
    ``hide``: more host paths to hide (the run directory); ``readable``: more to keep
    readable (the rollout's MCP servers' programs)."""

    kind: str = "bwrap"
    network: str = "endpoint"
    hide: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()  # more host paths to bind back read-only

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


def hidden_paths(scratch: Path, extra: Iterable[str]) -> list[str]:
    """What gets an empty tmpfs, outermost first, nested ones dropped."""
    wanted = {*_homes(), "/tmp", "/var/tmp", "/run", tempfile.gettempdir(), str(scratch.parent)}
    cwd = os.getcwd()
    if cwd != "/":
        wanted.add(cwd)
    wanted.update(extra)
    real = sorted({os.path.realpath(p) for p in wanted if os.path.isdir(p)})
    out: list[str] = []
    for path in real:
        if path != "/" and not any(_inside(path, kept) for kept in out):
            out.append(path)
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _package_dirs() -> list[str]:
    dirs = []
    for name in ("taketurns", "taketurns.harnesses", "taketurns.envs"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return dirs


def _runtime_paths() -> list[str]:
    """What any sandboxed Python needs: the interpreter's prefixes, ``sys.path`` and
    the ``taketurns`` package (wherever the checkout is: under the temp directory too,
    beside the rollouts' scratch directories)."""
    wanted = [sys.base_prefix, sys.prefix, sys.exec_prefix, *_package_dirs()]
    wanted += [p for p in sys.path if p and os.path.isabs(p)]
    return sorted({os.path.realpath(p) for p in wanted if os.path.exists(p)})


def readable_paths(program: Sequence[str]) -> list[str]:
    """What is bound back read-only: see the module docstring."""
    wanted = _runtime_paths()
    for arg in program:
        if os.path.isabs(arg) and os.path.exists(arg):
            wanted.append(arg)
    if program and os.path.isabs(program[0]):
        target = Path(os.path.realpath(program[0]))
        wanted.append(str(target.parent.parent))  # .../bin/prog -> its installation
    return sorted({os.path.realpath(p) for p in wanted if os.path.exists(p)})


def bwrap_argv(
    program: Sequence[str],
    *,
    scratch: Path,
    cwd: Path,
    sandbox: Sandbox,
    model_socket: str | None,
    info_fd: int | None = None,
) -> list[str]:
    """``bwrap`` options then ``--`` and ``program``: see the module docstring.
    ``model_socket``: the host's interception socket, mounted at ``MODEL_SOCKET``;
    ``info_fd``: where bwrap writes its JSON info (``child-pid``: the host pid of the
    sandbox's first process, the PID namespace's init)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError(INSTALL_HINT)
    # --as-pid-1: the program (the supervisor) is the PID namespace's init, so when it
    # exits the kernel kills everything left in the namespace. bwrap's own init would
    # wait for every process in it instead (measured: a setsid child kept it alive).
    argv = [bwrap, "--unshare-all", "--as-pid-1", "--new-session", "--ro-bind", "/", "/"]
    if sandbox.network == "host":
        argv.append("--share-net")
    argv += ["--dev", "/dev", "--proc", "/proc"]
    scratch_real = os.path.realpath(scratch)
    hidden = hidden_paths(Path(scratch_real), sandbox.hide)
    for path in hidden:
        argv += ["--tmpfs", path]
    others = os.path.dirname(scratch_real)  # every rollout's scratch lives there
    runtime = set(_runtime_paths())
    for path in readable_paths([*program, *sandbox.readable]):
        # never re-expose what is hidden, nor (through a path on the command line)
        # another rollout's scratch; the runtime is bound wherever it lies (a checkout
        # under the temp directory shares its parent with every scratch directory)
        if any(_inside(h, path) for h in hidden):
            continue
        if _inside(path, others) and path not in runtime:
            continue
        argv += ["--ro-bind", path, path]
    argv += ["--bind", scratch_real, scratch_real]
    if model_socket is not None:
        argv += ["--dir", os.path.dirname(MODEL_SOCKET), "--bind", model_socket, MODEL_SOCKET]
    for path in hidden:  # empty, and unwritable: the scratch is the one writable place
        argv += ["--remount-ro", path]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--chdir", os.path.realpath(cwd), "--", *program]
    return argv
