"""A child process started from the event loop's own thread: ``open_process``.

``trio.lowlevel.open_process`` runs ``subprocess.Popen`` in a worker thread (a fork
of a large process can take a while). Here ``Popen`` runs in the calling task's
thread: CPython starts the child with ``vfork`` (no ``preexec_fn``, no user or group
change), so the loop waits only while the child sets itself up and ``exec``\\s
(tenths of a millisecond), and the thread hop's own cost (~0.2 ms of CPU a start,
``benchmarks/results/http_kuhn.txt``) is gone. Everything else is ``trio.Process``'s
contract, of which the process owner (``taketurns._procs.owner``) uses:

- ``open_process`` is a checkpoint: cancelled before the start, it raises
  ``trio.Cancelled`` and nothing was started; once started it returns the process
  (no cancellation after the start, so the caller always owns what was started).
  It raises ``OSError`` when ``Popen`` does (a missing program or ``cwd``).
- ``stdin``/``stdout``/``stderr``: trio streams when ``subprocess.PIPE`` was asked,
  else None.
- ``wait`` (a checkpoint) waits for the exit through a pidfd (Linux >= 5.3), or
  where there is none through ``waitid`` in a worker thread; concurrent waits take
  turns; ``poll`` never blocks. Both reap.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

import trio
import trio.lowlevel

__all__ = ["Process", "open_process"]


class Process:
    """A started child (``open_process``), as ``trio.Process`` has it (``OwnedProcess``
    hands it out): ``args``, ``pid``, ``returncode`` (None until reaped), ``poll``,
    ``wait``, ``send_signal``, ``terminate``, ``kill`` and its piped streams."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: trio.lowlevel.FdStream | None,
        stdout: trio.lowlevel.FdStream | None,
        stderr: trio.lowlevel.FdStream | None,
    ) -> None:
        self._popen = popen
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.pid = popen.pid
        self.args = popen.args
        self._wait_lock = trio.Lock()
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):  # no pidfd: waitid in a thread
            self._pidfd = os.pidfd_open(popen.pid)

    def __repr__(self) -> str:
        return f"<Process {self.pid}: returncode {self.returncode}>"

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (``-n``: killed by signal ``n``), else None."""
        return self._popen.returncode

    def poll(self) -> int | None:
        """Reap the child if it has exited (never blocks); ``returncode``."""
        code = self._popen.poll()
        if code is not None:
            self._close_pidfd()
        return code

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; its ``returncode``. A checkpoint:
        taking the lock is one (``trio.Lock.acquire``), so a child reaped already costs
        no second yield."""
        async with self._wait_lock:
            if self.poll() is None:
                if self._pidfd is not None:
                    # closed under us by a ``poll`` that reaped it: it has exited
                    with contextlib.suppress(trio.ClosedResourceError):
                        await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    await trio.to_thread.run_sync(_wait_exiting, self.pid, abandon_on_cancel=True)
                self._popen.wait()
                self._close_pidfd()
        code = self._popen.returncode
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        """Send ``sig``, unless the child was reaped (its pid may be reused by then)."""
        self._popen.send_signal(sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None


def _wait_exiting(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # reaped by someone else already
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def _pipe(*, to_child: bool) -> tuple[trio.lowlevel.FdStream, int]:
    """A pipe: (the parent's end as a trio stream, the child's end)."""
    read_end, write_end = os.pipe()
    if to_child:
        return trio.lowlevel.FdStream(write_end), read_end
    return trio.lowlevel.FdStream(read_end), write_end


async def open_process(
    command: Sequence[str],
    *,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    **options: Any,
) -> Process:
    """Start ``command`` (``subprocess.Popen``'s keyword ``options``; ``stdin``,
    ``stdout``, ``stderr``: ``PIPE`` for a trio stream, a descriptor, a file,
    ``DEVNULL`` or None) from this thread. A checkpoint before the start only (module
    docstring)."""
    await trio.lowlevel.checkpoint()
    streams: list[trio.lowlevel.FdStream | None] = [None, None, None]
    ends: list[int] = []  # the child's ends, closed here once it has them
    given = [stdin, stdout, stderr]
    try:
        for i in range(3):
            if given[i] == subprocess.PIPE:
                streams[i], end = _pipe(to_child=i == 0)
                ends.append(end)
                given[i] = end
        popen = subprocess.Popen(  # noqa: ASYNC220 - from this thread: the module docstring
            command, stdin=given[0], stdout=given[1], stderr=given[2], **options
        )
    except BaseException:
        for stream in streams:
            if stream is not None:
                stream.close()
        raise
    finally:
        for end in ends:
            os.close(end)
    return Process(popen, *streams)
