"""The process owner with real processes, when the supervisor itself does not finish:
SIGKILLed by someone else, or stopped so that ``aclose`` has to hard-kill it. On both
paths ``aclose`` leaves no process of the program's group alive. Processes are
counted by a marker in their environment (``/proc/*/environ``)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
import trio
from procs import marked

from taketurns._procs import owner
from taketurns._procs.sandbox import Sandbox

LIMIT = 30


async def settled(mark: str, count: int, within: float = 10.0) -> list[int]:
    """``marked(mark)`` once it holds ``count`` processes (or ``within`` passed)."""
    with trio.move_on_after(within):
        while len(marked(mark)) != count:  # noqa: ASYNC110 - /proc sends no event
            await trio.sleep(0.02)
    return marked(mark)


async def start_sleep(tmp_path: Path, mark: str) -> owner.OwnedProcess:
    """``sleep 300`` owned without a sandbox; returns once it runs (the supervisor
    and ``sleep`` both carry the marker)."""
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    owned = await owner.start(
        ["sleep", "300"], cwd=tmp_path, env=env, sandbox=Sandbox(kind="none"), scratch=tmp_path
    )
    assert len(await settled(f"TT_OWNER_MARK={mark}", 2)) == 2
    return owned


async def test_a_sigkilled_supervisor_leaves_no_program_after_aclose(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with trio.fail_after(LIMIT):
        owned = await start_sleep(tmp_path, mark)
        os.kill(owned.pid, signal.SIGKILL)  # someone else kills the supervisor
        await owned.wait()
        await owned.aclose()
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_a_stuck_supervisor_is_hard_killed_with_its_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(owner, "KILL_S", 0.2)
    mark = uuid.uuid4().hex
    with trio.fail_after(LIMIT):
        owned = await start_sleep(tmp_path, mark)
        os.kill(owned.pid, signal.SIGSTOP)  # it cannot act on the cut lifeline
        await owned.aclose()  # past KILL_S: SIGKILL
        assert owned.process.returncode == -signal.SIGKILL
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []
