"""Resource hygiene: 1,000 episodes across every harness kind (null and tools in
process, program and stateful as subprocesses behind the interception server) leave
no child process, scratch directory, open file descriptor or trio task behind.

Counts are taken from /proc (psutil is not installed) and from trio's task tree,
after a small warm-up eval (first-use imports, caches) and again after the big one.
"""

from __future__ import annotations

import collections
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
from procs import children, open_fds, scratch_dirs

from taketurns import (
    AgentConfig,
    Agents,
    Env,
    EnvConfig,
    EvalConfig,
    RunDir,
    Task,
    Trace,
    read_episodes,
    reward,
    run_eval,
)

KINDS = ("null", "tools", "program", "stateful")
TURNS = {"null": 2, "tools": 2, "program": 1, "stateful": 2}


def lookup(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: The order's id, such as A17.
    """
    return {"order": order_id, "status": "shipped"}


def seat(harness: str, model: str = "builtin/echo") -> Any:
    return attrs.field(factory=lambda: AgentConfig(model=model, harness=harness))


@attrs.define
class KindsConfig(EnvConfig):
    null: AgentConfig = seat("null")  # noqa: RUF009 - an attrs field with a factory
    tools: AgentConfig = seat("tools", "builtin/tools")  # noqa: RUF009
    program: AgentConfig = seat("program")  # noqa: RUF009
    stateful: AgentConfig = seat("stateful")  # noqa: RUF009


def kind_of(idx: int) -> str:
    """Out of every 100 tasks: 1 program, 1 stateful (subprocesses are slow: ~0.2 s of
    CPU each), 30 tools, 68 null."""
    slot = idx % 100
    if slot == 0:
        return "program"
    if slot == 1:
        return "stateful"
    return "tools" if slot < 32 else "null"


class KindsEnv(Env):
    """Each episode chats with the one seat its task names; counts scoring."""

    config_class = KindsConfig

    def __init__(self, config: KindsConfig | None = None) -> None:
        super().__init__(config)
        self.scored: collections.Counter[tuple[str, str]] = collections.Counter()

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, info={"kind": kind_of(i)}) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        kind = task.info["kind"]
        tools = [lookup] if kind == "tools" else None
        async with agents[kind].chat(task, tools=tools) as session:
            for turn in range(TURNS[kind]):
                reply = await session.turn(f"order_id=A{task.idx}-{turn}")
                assert not reply.stopped, session.trace.errors

    @reward
    def counted(self, task: Task, trace: Trace) -> float:
        self.scored[(trace.episode.id, trace.agent.name)] += 1
        return 1.0


def task_tree() -> list[str]:
    """The names of every live trio task, depth first from the root."""
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
        yield task
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                yield from walk(child)

    for task in walk(trio.lowlevel.current_root_task()):
        names.append(task.name)
    return sorted(names)


@attrs.frozen
class Held:
    children: tuple[tuple[int, str], ...]
    fds: int
    scratch: int
    tasks: tuple[str, ...]


def held(scratch: Path) -> Held:
    return Held(tuple(children()), open_fds(), len(scratch_dirs(scratch)), tuple(task_tree()))


async def run_kinds(num_tasks: int, out: Path) -> list[dict[str, Any]]:
    env = KindsEnv()
    config = EvalConfig("kinds", num_tasks=num_tasks, concurrency=16, env=env.config)
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=False)
    await run_eval(config, run_dir, env=env, progress=False, report=False)
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert sorted(e["task"]["idx"] for e in episodes) == list(range(num_tasks))
    for e in episodes:
        assert e["ok"], e["errors"]
        [trace] = e["traces"]
        assert trace["errors"] == [], trace["errors"]
        assert trace["stop_condition"] == "user_closed"
        assert len(trace["turns"]) >= TURNS[e["task"]["info"]["kind"]]
    assert sorted(env.scored) == sorted((e["id"], e["task"]["info"]["kind"]) for e in episodes)
    assert set(env.scored.values()) == {1}
    return episodes


@pytest.mark.slow
async def test_a_thousand_episodes_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with trio.fail_after(300):
        await run_kinds(100, tmp_path / "warm-up")  # every kind: imports, caches
        before = held(scratch)
        episodes = await run_kinds(1000, tmp_path / "run")
        after = held(scratch)
    kinds = collections.Counter(e["task"]["info"]["kind"] for e in episodes)
    assert kinds == {"null": 680, "tools": 300, "program": 10, "stateful": 10}
    assert after.children == before.children  # (none, unless another test left one)
    assert before.scratch == after.scratch == 0
    assert after.tasks == before.tasks  # only the test's own tasks remain
    assert after.fds - before.fds <= 2, (before.fds, after.fds)
    print(f"FIGURES episodes={len(episodes)} kinds={dict(kinds)} fds={before.fds}->{after.fds}")
