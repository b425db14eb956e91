"""Helpers for the agent CLI tests (a helper module, not a conftest): a rollout's
leftover scratch directories, the live members of a killed process group (read from
/proc), and a scripted model that says when the agent's first call arrived."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from scripted import ScriptedModel

from taketurns.env import ModelRequest, ModelResponse


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("taketurns-"))


def live_members(pgid: int) -> list[int]:
    """The pids of live (not zombie) processes in process group ``pgid``. A killed
    agent's orphaned children stay zombies where PID 1 reaps nobody (a container)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


async def dead_after_kill(pgid: int) -> list[int]:
    """``live_members(pgid)`` once every member died (SIGKILL is delivered at once, but
    a loaded machine may take a moment to finish the members off); waits up to 10 s."""
    with trio.move_on_after(10):
        while live_members(pgid):  # noqa: ASYNC110 - a dying process sends no event
            await trio.sleep(0.05)
    return live_members(pgid)


class Arrival(ScriptedModel):
    """A scripted model that says when the first request arrived."""

    def __init__(self, *script: Any) -> None:
        super().__init__(*script)
        self.arrived = trio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.arrived.set()
        return await super().complete(request)
