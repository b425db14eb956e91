"""``ProgramPool``: the warm serving programs of one ``program`` harness instance
(``persistent = true``), shared by all of its rollouts.

The harness is stateless (every segment carries the whole conversation and its
rollout's endpoint), so a program belongs to no rollout: a segment takes an idle one,
or starts one when none is idle, and gives it back once it answered. A program whose
protocol state is unknown (the segment was cancelled or timed out, or the program
answered garbage or nothing) is discarded: killed, reaped, its files removed. An idle
program found dead when taken is discarded the same way and the next one taken (it
is not the segment's fault).

Files live in one temp directory per pool (``taketurns-pool-*``): per program a
working directory ``<n>/`` (its HOME and TMPDIR, and in a sandbox the one place it
may write; the sandbox and network are those of the rollout that opened the pool)
and its stderr ``<n>.stderr``. Each program is owned (``taketurns.harness.start_owned``):
``aclose`` kills and reaps every program's whole tree, idle or busy, and removes the
directory; the harness calls it from ``shutdown``. A parent that dies without closing
the pool leaves no program behind either (the supervisor's lifeline).
"""

from __future__ import annotations

import enum
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from taketurns import HarnessError
from taketurns.harnesses.program_process import ProgramProcess


class PoolState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class ProgramPool:
    """Programs running ``command`` with ``env``; at most ``max_programs`` at once
    (None: as many as segments run at once: a segment that finds none idle starts
    one). With a cap, a segment waits for a program like a model call waits for the
    model-call limiter: held for one segment, never while waiting on a peer."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        max_programs: int | None,
        containment: Mapping[str, Any],
    ) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.containment = dict(containment)
        self.state = PoolState.OPEN
        self.starts = 0  # programs started so far
        self.idle: list[ProgramProcess] = []  # the most recently used last
        self.programs: set[ProgramProcess] = set()  # every live program, idle or busy
        self._slots = trio.Semaphore(max_programs) if max_programs is not None else None
        self._dir: Path | None = None

    @property
    def directory(self) -> Path | None:
        """The pool's temp directory (None until the first program starts)."""
        return self._dir

    async def take(self) -> ProgramProcess:
        """An idle program, or a new one; the caller must ``give_back`` or ``discard``
        it. A checkpoint; with ``max_programs``, waits while that many are busy."""
        if self._slots is None:
            await trio.lowlevel.checkpoint()
        else:
            await self._slots.acquire()
        try:
            return await self._idle_or_new()
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise

    async def _idle_or_new(self) -> ProgramProcess:
        if self.state is PoolState.CLOSED:
            raise HarnessError("the harness's program pool is shut down")
        while self.idle:
            program = self.idle.pop()
            if program.alive:
                program.mark_stderr()  # a fresh program's failure quotes all of it
                return program
            await self._reap(program)  # died while idle: not this segment's fault
        return await self._start()

    async def _start(self) -> ProgramProcess:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="taketurns-pool-"))
        n = self.starts
        self.starts += 1
        workdir, stderr_path = self._dir / str(n), self._dir / f"{n}.stderr"
        workdir.mkdir()
        try:
            program = await ProgramProcess.start(
                self.command,
                cwd=workdir,
                env=self.env,
                stderr_path=stderr_path,
                containment=self.containment,
            )
        except BaseException:  # no such command, say: leave no files behind
            shutil.rmtree(workdir, ignore_errors=True)
            stderr_path.unlink(missing_ok=True)
            raise
        self.programs.add(program)
        if self.state is PoolState.CLOSED:  # shut down while it was starting
            await self._reap(program)
            raise HarnessError("the harness's program pool is shut down")
        return program

    def give_back(self, program: ProgramProcess) -> None:
        """Return a program that answered its line: it serves the next segment."""
        if program in self.programs:  # else it was killed by ``aclose`` meanwhile
            self.idle.append(program)
        if self._slots is not None:
            self._slots.release()

    async def discard(self, program: ProgramProcess) -> None:
        """Kill and reap a taken program whose protocol state is unknown, and remove
        its files. Shielded: cleanup must finish."""
        try:
            await self._reap(program)
        finally:
            if self._slots is not None:
                self._slots.release()

    async def _reap(self, program: ProgramProcess) -> None:
        self.programs.discard(program)
        await program.aclose()
        shutil.rmtree(program.workdir, ignore_errors=True)
        program.stderr_path.unlink(missing_ok=True)

    async def aclose(self) -> None:
        """Kill and reap every program, idle or busy, and remove the pool's directory;
        later ``take`` calls fail. Idempotent; shielded."""
        self.state = PoolState.CLOSED
        programs, self.idle = list(self.programs), []
        self.programs.clear()
        for program in programs:
            program.kill()  # all at once; then reap each
        with trio.CancelScope(shield=True):
            for program in programs:
                await program.aclose()
            await trio.lowlevel.checkpoint()  # also when there were none
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
