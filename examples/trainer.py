"""A trainer-shaped loop over streamed rollouts (no GPU, no network).

Each step takes one task's group of episodes as soon as it completes, reads its
token-level samples (one masked sequence per seat's trace, the group advantage on
each), "trains" on them (here: prints advantage statistics), and tags the next policy
version; groups that fall more than ``--max-staleness`` versions behind are dropped.

    python examples/trainer.py --steps 8 --per-task 4

Against a vLLM server (token ids and logprobs asked for by default)::

    python examples/trainer.py --model my-policy --base-url http://localhost:8000/v1
"""

from __future__ import annotations

import argparse
import statistics

import trio

from taketurns import EvalConfig, open_rollouts
from taketurns.envs.kuhn import KuhnPoker
from taketurns.train import Group


def step_line(step: int, group: Group, version: int | None) -> str:
    samples = group.samples()
    advantages = [s.advantage for s in samples if s.advantage is not None]
    trained = sum(sum(s.completion_mask) for s in samples)
    spread = statistics.pstdev(advantages) if advantages else 0.0
    mean = statistics.fmean(advantages) if advantages else 0.0
    return (
        f"step {step} task {group.task.idx} policy v{version}: "
        f"{len(group.ok_episodes)}/{len(group.episodes)} ok, {len(samples)} samples, "
        f"{trained} trained tokens, advantage mean {mean:+.3f} std {spread:.3f} "
        f"min {min(advantages, default=0.0):+.3f} max {max(advantages, default=0.0):+.3f}"
    )


async def train(args: argparse.Namespace) -> None:
    config = EvalConfig(
        env_id="kuhn-poker", concurrency=args.concurrency, model=args.model, base_url=args.base_url
    )
    env = KuhnPoker()
    tasks = env.tasks(args.steps)
    async with open_rollouts(env, config, max_staleness=args.max_staleness) as source:
        source.policy_version = 0
        step = 0
        async for group in source.groups(tasks, per_task=args.per_task):
            print(step_line(step, group, group.policy_version), flush=True)
            await trio.sleep(args.step_s)  # the optimizer step would run here
            step += 1
            source.policy_version += 1  # new weights pushed to the server
    print(f"done: {step} steps, {len(source.stale)} stale groups dropped", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="task groups to train on")
    parser.add_argument("--per-task", type=int, default=4, help="episodes per group")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="builtin/bracket")
    parser.add_argument("--base-url")
    parser.add_argument("--max-staleness", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.0, help="seconds per fake step")
    trio.run(train, parser.parse_args())


if __name__ == "__main__":
    main()
