"""Resource limits of one sandboxed process tree: ``TreeLimits``, what a role's
``sandbox_limits.*`` (``taketurns._config.options.SandboxLimits``, validated there)
become.

On by default in every bubblewrap sandbox; each field overridable per role
(``--env.<role>.sandbox_limits.memory_mb=2048``). How they are enforced (no cgroup
v2 is delegated on most hosts an eval runs on):

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

from typing import Any

import attrs

__all__ = ["LIMIT_NAMES", "TreeLimits"]

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
        """How the trace records them (``info["sandbox_limits"]``)."""
        return {"enforced_by": "rlimits+supervisor", **attrs.asdict(self)}
