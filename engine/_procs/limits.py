"""Resource limits of one sandboxed process tree: ``TreeLimits``, what a role's
``sandbox_limits.*`` (``taketurns._config.options.SandboxLimits``, validated there)
become.

On by default in every bubblewrap sandbox; each field overridable per role
(``--env.<role>.sandbox_limits.memory_mb=2048``). How they are enforced:

- by cgroup v2, where the machine delegates it (``delegated_cgroup``: this process's
  cgroup is writable and enables the ``memory`` and ``pids`` controllers for its
  children; not on a cgroup v1 host, nor on most hosts an eval runs on): every tree
  runs in a cgroup of its own (``tree_cgroup``) whose ``pids.max`` (twice
  ``processes``) and ``memory.max`` (twice ``memory_mb``, plus the two tmpfs' sizes,
  which it is charged for) are the kernel's backstop behind the supervisor's counts;
  an empty one (its tree gone) is removed when the next is made;
- by the kernel: ``/dev/shm`` and ``/tmp`` are tmpfs capped at ``shm_mb`` and
  ``scratch_mb`` (a write past the cap fails with ``ENOSPC``); the rlimits
  ``RLIMIT_NOFILE`` (``open_files``), ``RLIMIT_CPU`` (``cpu_s``, per process),
  ``RLIMIT_FSIZE`` (``scratch_mb``: no one file larger) and ``RLIMIT_NPROC`` (twice
  ``processes``: a backstop, counted per sandbox since each has its own user
  namespace and an unprivileged uid) are set on the sandbox's first process, and
  every process inherits them;
- by the supervisor, the PID namespace's init, which sees exactly the tree's
  processes: every ``POLL_S`` it counts them (``processes``), sums their resident
  memory (``memory_mb``) and CPU time (``cpu_s``, the reaped ones' included), and
  every ``DISK_POLL_S`` the size of the rollout's scratch (``scratch_mb``) and the
  fill of ``/dev/shm`` and ``/tmp``. Past one, it kills the whole tree and reports
  which limit on its report pipe. A tree can overshoot between two polls (tens of
  milliseconds of forking or allocating).

A tree killed so ends its rollout with stop condition ``resource_limit``, the
limit's name in ``trace.info["resource_limit"]``: an outcome of the agent's
behaviour, not an infrastructure failure.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from pathlib import Path
from typing import Any

import attrs

__all__ = ["LIMIT_NAMES", "TreeLimits", "delegated_cgroup", "tree_cgroup"]

LIMIT_NAMES = ("processes", "memory_mb", "open_files", "cpu_s", "scratch_mb", "shm_mb")


@attrs.frozen
class TreeLimits:
    """Per sandboxed process tree (one segment's program, or one long-lived one):
    ``processes`` alive at once, ``memory_mb`` resident in all, ``open_files`` per
    process, ``cpu_s`` CPU seconds in all, ``scratch_mb`` written to its scratch
    (and the size of its ``/tmp``), ``shm_mb`` the size of its ``/dev/shm``."""

    processes: int = 256
    memory_mb: int = 4096
    open_files: int = 4096
    cpu_s: int = 3600
    scratch_mb: int = 2048
    shm_mb: int = 256

    def argument(self) -> str:
        """The supervisor's ``--limits`` value: ``name=value,...``."""
        return ",".join(f"{name}={getattr(self, name)}" for name in LIMIT_NAMES)

    def record(self) -> dict[str, Any]:
        """How the trace records them (``info["sandbox_limits"]``), with what enforced
        them: ``cgroup2+rlimits+supervisor`` or ``rlimits+supervisor``."""
        by = "cgroup2+rlimits+supervisor" if delegated_cgroup() else "rlimits+supervisor"
        return {"enforced_by": by, **attrs.asdict(self)}


def _cgroup2_mount() -> str | None:
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                return fields[4]
    return None


@functools.cache
def delegated_cgroup() -> Path | None:
    """This process's cgroup v2 folder, when the machine delegates it: writable, the
    ``memory`` and ``pids`` controllers enabled for its children. None on a cgroup
    v1 host or where v2 is not delegated (the rlimits and the supervisor enforce
    alone). Looked up once per process."""
    mount = _cgroup2_mount()
    own = None
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        own = next((ln.split("::", 1)[1].strip() for ln in f if ln.startswith("0::")), None)
    if mount is None or own is None:
        return None
    folder = Path(mount) / own.lstrip("/")
    try:
        enabled = set((folder / "cgroup.subtree_control").read_text().split())
    except OSError:
        return None
    if not {"memory", "pids"} <= enabled or not os.access(folder, os.W_OK):
        return None
    return folder


def tree_cgroup(limits: TreeLimits) -> Path | None:
    """A new cgroup for one sandboxed tree in ``delegated_cgroup()``, capped (module
    docstring); None where none is delegated, or it cannot be made. The empty ones
    of trees gone are removed first (the kernel removes only an empty cgroup)."""
    parent = delegated_cgroup()
    if parent is None:
        return None
    for old in parent.glob("taketurns-*"):
        with contextlib.suppress(OSError):
            old.rmdir()
    folder = parent / f"taketurns-{uuid.uuid4().hex[:12]}"
    memory = (2 * limits.memory_mb + limits.scratch_mb + limits.shm_mb) * 1024 * 1024
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(f"{2 * limits.processes}\n")
        (folder / "memory.max").write_text(f"{memory}\n")
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    return folder
