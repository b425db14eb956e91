"""An asyncio trainer consuming taketurns' streamed rollouts from a thread-hosted
trio loop (no GPU, no network).

taketurns runs on trio. An asyncio program (most trainer stacks) runs the rollout
side with ``trio.run`` in a worker thread and receives each group over a bounded
``asyncio.Queue``: the trio side waits (in a trio worker thread, so its loop keeps
running episodes) until the queue has room, so a slow trainer pauses admission just
as it would in trio. The alternative is ``trio_asyncio`` (``trio_asyncio.open_loop``)
to host asyncio code inside the trio loop instead.

    python examples/asyncio_trainer.py --steps 6 --per-task 4
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import trio

from taketurns import EvalConfig, open_rollouts
from taketurns.envs.kuhn import KuhnPoker
from taketurns.train import Group


def produce(
    args: argparse.Namespace, queue: asyncio.Queue[Group | None], loop: asyncio.AbstractEventLoop
) -> None:
    """The rollout side: its own trio loop, in this (worker) thread."""

    def put(item: Group | None) -> None:  # blocks this trio worker thread until room
        asyncio.run_coroutine_threadsafe(queue.put(item), loop).result()

    async def run() -> None:
        config = EvalConfig(env_id="kuhn-poker", concurrency=args.concurrency)
        env = KuhnPoker()
        try:
            async with open_rollouts(env, config) as source:
                async for group in source.groups(env.tasks(args.steps), per_task=args.per_task):
                    await trio.to_thread.run_sync(put, group)
        finally:
            await trio.to_thread.run_sync(put, None)

    trio.run(run)


async def train(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Group | None] = asyncio.Queue(maxsize=2)
    producer = loop.run_in_executor(None, produce, args, queue, loop)
    steps = 0
    while (group := await queue.get()) is not None:
        advantages = [s.advantage for s in group.samples() if s.advantage is not None]
        print(
            f"asyncio step {steps} task {group.task.idx}: {len(advantages)} samples, "
            f"advantage std {statistics.pstdev(advantages) if advantages else 0.0:.3f}",
            flush=True,
        )
        await asyncio.sleep(0)  # the optimizer step would run here
        steps += 1
    await producer
    print(f"done: {steps} steps", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--per-task", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    asyncio.run(train(parser.parse_args()))


if __name__ == "__main__":
    main()
