"""``engine.run_asyncio``: asyncio coroutine functions inside trio code and episodes.

Real asyncio library calls (stdlib streams against a trio TCP echo server on
loopback), cancellation both ways, errors, and no loop or thread left behind. Real
sockets, so the real clock (docs/design.md "Testing": autojump + sockets gives false timeouts).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio_asyncio

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
from taketurns._eval.aio import open_asyncio_host
from taketurns.errors import AsyncioCancelled
from taketurns.harness import run_asyncio


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        async for data in stream:
            await stream.send_all(data)


async def _echo_server(nursery: trio.Nursery) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    port: int = listeners[0].socket.getsockname()[1]
    return port


async def aio_echo(port: int, payload: bytes) -> tuple[bytes, int]:
    """An asyncio-only client: stdlib streams. Returns the echo and its loop's id."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        data = await reader.readexactly(len(payload))
    finally:
        writer.close()
        await writer.wait_closed()
    return data, id(asyncio.get_running_loop())


def _open_loops() -> list[Any]:
    return [
        obj
        for obj in gc.get_objects()
        # the type itself, never isinstance: that reads ``__class__``, which some
        # objects in a process answer with a warning (torch's deprecated aliases)
        if issubclass(type(obj), trio_asyncio.BaseTrioEventLoop) and not obj.is_closed()
    ]


async def test_streams_echo_through_one_shared_loop() -> None:
    async with trio.open_nursery() as nursery:
        port = await _echo_server(nursery)
        results: list[tuple[bytes, int]] = []

        async def call(i: int) -> None:
            results.append(await run_asyncio(aio_echo, port, f"hello {i}".encode()))

        async with open_asyncio_host(), trio.open_nursery() as calls:
            for i in range(20):
                calls.start_soon(call, i)
        nursery.cancel_scope.cancel()
    assert sorted(data for data, _ in results) == sorted(f"hello {i}".encode() for i in range(20))
    assert len({loop for _, loop in results}) == 1  # the run's loop, opened once
    gc.collect()
    assert _open_loops() == []


async def test_no_loop_is_opened_until_asked_and_none_is_left() -> None:
    threads = threading.active_count()
    async with open_asyncio_host():
        await trio.lowlevel.checkpoint()
        assert _open_loops() == []  # a run that never calls run_asyncio opens none
        loops = {await run_asyncio(_loop_id) for _ in range(300)}
        assert len(loops) == 1
        assert len(_open_loops()) == 1
    gc.collect()
    assert _open_loops() == []
    assert threading.active_count() <= threads  # none left behind (another test's may end)


async def _loop_id() -> int:
    await asyncio.sleep(0)
    return id(asyncio.get_running_loop())


async def test_outside_a_run_each_call_gets_its_own_loop_and_closes_it() -> None:
    threads = threading.active_count()
    loops = [await run_asyncio(_loop_id) for _ in range(50)]
    assert all(isinstance(loop, int) for loop in loops)
    gc.collect()
    assert _open_loops() == []
    assert threading.active_count() == threads


async def test_a_loop_the_caller_opened_is_used() -> None:
    async with trio_asyncio.open_loop() as loop:
        assert await run_asyncio(_loop_id) == id(loop)
        async with open_asyncio_host():
            assert await run_asyncio(_loop_id) == id(loop)


async def test_trio_cancellation_cancels_the_asyncio_task() -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # asyncio-side cleanup still runs, and is awaited
            seen.append("cancelled, cleaned up")
            raise

    async with open_asyncio_host():
        start = trio.current_time()
        with trio.move_on_after(0.05) as scope:
            await run_asyncio(slow)
        assert scope.cancelled_caught
        assert seen == ["cancelled, cleaned up"]
        assert trio.current_time() - start < 5
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(0.05):
                await run_asyncio(slow)
        assert len(seen) == 2


async def test_asyncio_side_cancellation_is_an_error_on_the_trio_side() -> None:
    async def cancels_itself() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    async with open_asyncio_host():
        with pytest.raises(AsyncioCancelled, match="cancels_itself") as info:
            await run_asyncio(cancels_itself)
        assert isinstance(info.value.__cause__, asyncio.CancelledError)
        # the loop is still usable after it
        assert isinstance(await run_asyncio(_loop_id), int)


async def test_asyncio_errors_propagate_unchanged() -> None:
    async def fails(message: str) -> None:
        await asyncio.sleep(0)
        raise ValueError(message)

    async def times_out() -> None:
        await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)

    async with open_asyncio_host():
        with pytest.raises(ValueError, match="bad input"):
            await run_asyncio(fails, "bad input")
        with pytest.raises(TimeoutError):
            await run_asyncio(times_out)
        # an asyncio timeout that does fire in time
        assert await run_asyncio(asyncio.wait_for, _loop_id(), 5) is not None


# --- inside episodes, through run_eval ------------------------------------------------


@attrs.define
class AioConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    port: int = 0


class AioEnv(Env):
    """Each episode echoes through asyncio streams in ``run`` and in its reward; task 3
    hits an asyncio-side cancellation (an env error for that episode only)."""

    id = "aio-test"
    config_class = AioConfig
    config: AioConfig
    loops: set[int] = set()  # noqa: RUF012 - a test probe, per class

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [Task(idx=i, prompt=f"say [a] or [b] #{i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        data, loop = await run_asyncio(aio_echo, self.config.port, f"task {task.idx}".encode())
        assert data == f"task {task.idx}".encode()
        self.loops.add(loop)
        if task.idx == 3:
            await run_asyncio(_cancel_self)
        await agents.player.run(task)

    @reward
    async def echoed(self, task: Task, trace: Trace) -> float:
        data, loop = await run_asyncio(aio_echo, self.config.port, b"score")
        self.loops.add(loop)
        return float(data == b"score")


async def _cancel_self() -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(1)


async def test_episodes_share_the_runs_loop_and_an_asyncio_cancel_fails_one(
    tmp_path: Path,
) -> None:
    AioEnv.loops = set()
    async with trio.open_nursery() as nursery:
        port = await _echo_server(nursery)
        config = EvalConfig(
            env_id="aio-test", num_tasks=24, concurrency=8, env=AioConfig(port=port)
        )
        env = AioEnv(config.env)
        run = await run_eval(config, RunDir(tmp_path), env=env, progress=False, report=False)
        nursery.cancel_scope.cancel()
    episodes = {e["task"]["idx"]: e for e in read_episodes(tmp_path / "episodes.jsonl")}
    assert run.written == 24
    assert len(episodes) == 24
    assert episodes[3]["stop"] == "env_error"
    assert "AsyncioCancelled" in str(episodes[3]["errors"])
    for idx, e in episodes.items():
        if idx != 3:
            assert e["ok"], e["errors"]
            assert e["traces"][0]["rewards"] == {"echoed": 1.0}
    assert len(AioEnv.loops) == 1
    gc.collect()
    assert _open_loops() == []


async def test_cancelling_the_run_cancels_asyncio_work_inside_episodes(tmp_path: Path) -> None:
    class Hangs(AioEnv):
        async def run(self, task: Task, agents: Agents) -> None:
            await run_asyncio(asyncio.sleep, 30)

    config = EvalConfig(env_id="aio-test", num_tasks=4, concurrency=4, env=AioConfig())
    with trio.move_on_after(0.3) as scope:
        await run_eval(config, RunDir(tmp_path), env=Hangs(config.env), progress=False)
    assert scope.cancelled_caught
    episodes = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert [e["stop"] for e in episodes] == ["cancelled"] * 4
    gc.collect()
    assert _open_loops() == []


async def anyio_gather() -> list[int]:
    """asyncio code built on anyio (as httpx2, mcp and pydantic-ai are): a task group."""
    import anyio

    results: list[int] = []

    async def one(n: int) -> None:
        await anyio.lowlevel.checkpoint()
        results.append(n)

    async with anyio.create_task_group() as group:
        for n in range(3):
            group.start_soon(one, n)
    return sorted(results)


async def test_anyio_task_groups_run_although_anyio_was_imported_first() -> None:
    import sys

    # pytest's anyio plugin imports anyio's asyncio backend at start-up, before
    # trio_asyncio patched asyncio's loop lookups
    assert "anyio._backends._asyncio" in sys.modules
    assert await run_asyncio(anyio_gather) == [0, 1, 2]
    async with open_asyncio_host():
        assert await run_asyncio(anyio_gather) == [0, 1, 2]
