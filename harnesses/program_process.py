"""``ProgramProcess``: one serving agent program, one JSON line in and one out per
segment (the ``program`` harness's ``persistent`` mode; the line protocol is in
``taketurns.harnesses.program``, the pool that owns these in ``taketurns.harnesses.program_pool``).

The program's stdin and stdout are pipes; its stderr goes to a file, so it can never
fill a pipe nobody reads, and its tail is there to quote when something fails.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from taketurns.harness import OwnedProcess, start_owned

# How long a program that closed its stdout gets to exit before its status is read.
EXIT_GRACE_S = 2.0
_CHUNK = 65536
KEEP_VARS = ("PATH", "LANG", "LC_ALL")  # all a program gets from the host's environment


def scrubbed_environment(scratch: Path) -> dict[str, str]:
    """A program's environment, built from nothing (the host's keys never reach it):
    ``PATH``, ``LANG``, ``LC_ALL`` from the host, ``HOME`` and ``TMPDIR`` its own
    ``scratch`` directory."""
    env = {k: os.environ[k] for k in KEEP_VARS if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(HOME=str(scratch), TMPDIR=str(scratch))
    return env


class ProgramProcess:
    """One running program. ``exchange`` sends a line and returns the program's
    answering line, or None when the program is gone (it exited, or closed a pipe).
    ``aclose`` kills and reaps it."""

    __slots__ = ("_buffer", "_stderr_mark", "owned", "process", "stderr_path", "workdir")

    def __init__(self, owned: OwnedProcess, workdir: Path, stderr_path: Path) -> None:
        self.owned = owned
        self.process = owned.process
        self.workdir = workdir
        self.stderr_path = stderr_path
        self._buffer = bytearray()  # stdout read past the last answered line
        self._stderr_mark = 0  # where the current segment's stderr starts

    @classmethod
    async def start(
        cls,
        command: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stderr_path: Path,
        containment: Mapping[str, Any],
    ) -> ProgramProcess:
        """Start ``command`` in ``cwd`` (its own directory: the only one it may write,
        also its HOME and TMPDIR) with stdin/stdout pipes and stderr to
        ``stderr_path``, owned and contained (``containment``: the keyword arguments
        of ``taketurns.harness.start_owned`` from ``ServedHarness.containment``)."""
        with stderr_path.open("wb") as stderr:  # closed once spawned: the child has a copy
            owned = await start_owned(
                list(command),
                cwd=cwd,
                env={**scrubbed_environment(cwd), **env},
                scratch=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                **containment,
            )
        return cls(owned, cwd, stderr_path)

    @property
    def alive(self) -> bool:
        """Not exited yet (as far as a non-blocking wait can tell)."""
        return self.process.poll() is None

    def mark_stderr(self) -> None:
        """A segment begins: failures quote only what stderr gets from now on (a
        program serves many rollouts; what it wrote for others is not this one's)."""
        try:
            self._stderr_mark = os.stat(self.stderr_path).st_size
        except OSError:
            self._stderr_mark = 0

    async def exchange(self, line: bytes) -> bytes | None:
        """Send ``line`` (newline-terminated) and read one line back, without its
        newline. None: the program is gone."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        try:
            await stdin.send_all(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        start = 0
        while (end := self._buffer.find(b"\n", start)) < 0:
            start = len(self._buffer)
            try:
                chunk = await stdout.receive_some(_CHUNK)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not chunk:
                return None
            self._buffer += chunk
        answer = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return answer

    async def farewell(self) -> str:
        """What became of a program that is gone: its exit status, once it exited
        (waiting up to ``EXIT_GRACE_S``), or that it closed its stdin or stdout."""
        with trio.move_on_after(EXIT_GRACE_S):
            return f"exited with status {await self.owned.wait()}"
        return "closed its stdin or stdout"

    def kill(self) -> None:
        """Start killing the program's whole tree now; ``aclose`` reaps it."""
        self.owned.cut()

    async def aclose(self) -> None:
        """Kill the program's whole tree, reap it and close the pipes; shielded and
        bounded (``taketurns.harness.OwnedProcess.aclose``)."""
        await self.owned.aclose()

    def stderr_tail(self, chars: int, secret: str) -> str:
        """The last ``chars`` characters of what the program wrote to stderr since
        ``mark_stderr``, ``secret`` as ***. Read synchronously: a failure path, a small
        local file."""
        try:
            with self.stderr_path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(self._stderr_mark, size - 4 * chars - len(secret)))
                data = f.read()
        except OSError:
            return ""
        return data.decode("utf-8", "replace").replace(secret, "***")[-chars:]
