"""Library code leaves process state alone: ``run_eval`` called from a user's program
changes no garbage-collector setting (the CLI, which owns its process, tunes it around
the eval with ``tuned_gc``, which is reentrant and thread-safe); and episodes run in the
same task shape at every concurrency."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import trio

from taketurns import (
    AgentConfig,
    Agents,
    Env,
    EnvConfig,
    RunDir,
    Task,
    load_eval_config,
    register_env,
    run_eval,
)
from taketurns._cli.main import main
from taketurns._gc import tuned_gc


@pytest.fixture
def user_gc() -> Iterator[tuple[int, int, int]]:
    """A user's own GC settings, restored after the test."""
    before = gc.get_threshold()
    gc.set_threshold(555, 7, 3)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


@attrs.define
class ShapeConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=lambda: AgentConfig(model="builtin/echo"))


@register_env("test-task-shape")
class TaskShape(Env):
    """One trivial session per episode; records the task each episode ran in and the
    GC thresholds seen while it ran."""

    config_class = ShapeConfig
    seen: ClassVar[list[tuple[Any, tuple[int, int, int], Any]]] = []

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, f"t{i}", prompt="hi") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        current = trio.lowlevel.current_task()
        TaskShape.seen.append((current, gc.get_threshold(), current.parent_nursery))
        async with agents.player.chat(task) as session:
            await session.turn()


def _config(n: int, concurrency: int) -> Any:
    return load_eval_config(
        ShapeConfig,
        file_data={"env_id": "test-task-shape", "num_tasks": n, "concurrency": concurrency},
    )


async def _run(tmp_path: Path, n: int, concurrency: int) -> None:
    run_dir = RunDir(tmp_path / f"c{concurrency}")
    run_dir.prepare(resume=False, overwrite=False)
    await run_eval(_config(n, concurrency), run_dir, progress=False, report=False)


async def test_run_eval_changes_no_gc_setting(
    tmp_path: Path, user_gc: tuple[int, int, int]
) -> None:
    TaskShape.seen.clear()
    frozen = gc.get_freeze_count()
    await _run(tmp_path, 6, 2)
    assert gc.get_threshold() == user_gc
    assert gc.get_freeze_count() == frozen
    assert {thresholds for _, thresholds, _ in TaskShape.seen} == {user_gc}


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_one_task_shape_for_every_concurrency(tmp_path: Path, concurrency: int) -> None:
    TaskShape.seen.clear()
    await _run(tmp_path, 5, concurrency)
    tasks = [task for task, _, _ in TaskShape.seen]
    nurseries = {id(nursery) for _, _, nursery in TaskShape.seen}
    assert len({id(t) for t in tasks}) == 5  # each episode in a task of its own
    assert len(nurseries) == 1  # all children of the episodes nursery
    assert trio.lowlevel.current_task() not in tasks


def test_the_cli_tunes_its_own_process_and_restores_it(
    tmp_path: Path, user_gc: tuple[int, int, int]
) -> None:
    TaskShape.seen.clear()
    out = tmp_path / "run"
    assert main(["eval", "test-task-shape", "-n", "3", "-o", str(out), "--no-progress"]) == 0
    tuned = {thresholds for _, thresholds, _ in TaskShape.seen}
    assert tuned == {(1_000_000, 20, 20)}
    assert gc.get_threshold() == user_gc


def test_tuned_gc_is_reentrant(user_gc: tuple[int, int, int]) -> None:
    frozen = gc.get_freeze_count()
    with tuned_gc():
        assert gc.get_threshold() == (1_000_000, 20, 20)
        with tuned_gc():
            assert gc.get_threshold() == (1_000_000, 20, 20)
        assert gc.get_threshold() == (1_000_000, 20, 20)  # the outer scope still holds
    assert gc.get_threshold() == user_gc
    assert gc.get_freeze_count() == frozen


def test_tuned_gc_overlapping_in_threads_restores_the_first_settings(
    user_gc: tuple[int, int, int],
) -> None:
    entered = threading.Barrier(2)
    leave_first = threading.Event()
    seen: list[tuple[int, int, int]] = []

    def first() -> None:
        with tuned_gc():
            entered.wait()
            leave_first.wait()
        seen.append(gc.get_threshold())  # the second scope is still open

    def second() -> None:
        entered.wait()
        with tuned_gc():
            leave_first.set()
            while len(seen) < 1:
                pass
        seen.append(gc.get_threshold())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [(1_000_000, 20, 20), user_gc]
    assert gc.get_threshold() == user_gc
