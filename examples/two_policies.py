"""Training two policies from one stream of rollouts (no GPU, no network).

``open_rollouts(..., policies="role" | "model")`` makes each task's episodes into one
group per policy: every trainable role (``"role"``), or every model name a trainable
role runs on (``"model"``), gets its own group, advantages and samples from the same
episodes, and its own version tag (``source.policy_versions[policy]``), so a
trainer steps two policies on one stream.

- ``user-sim``: the modeled user and the assistant both trainable (one policy per
  role). user-sim pays only the assistant; here the user is also paid (1.0 when it
  ends the conversation with the done marker) so its advantages are not all zero.
- ``kuhn``: two different models in self-play, ``player0`` on ``builtin/bracket`` and
  ``player1`` on ``builtin/echo`` (one policy per model name).

    python examples/two_policies.py user-sim --steps 4 --per-task 3
    python examples/two_policies.py kuhn --steps 4 --per-task 3
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import trio

from taketurns import AgentConfig, Env, EvalConfig, Rubric, Task, Trace, open_rollouts
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker
from taketurns.envs.user_sim import UserAgentConfig, UserSim, UserSimConfig
from taketurns.train import Group

QA = Path(__file__).resolve().parent / "qa.jsonl"


def user_done(task: Task, trace: Trace) -> float:
    """The user's reward: 1.0 when it ended the conversation with the done marker."""
    return 1.0 if trace.info.get("ended_by") == "done" else 0.0


class PaidUserSim(UserSim):
    """user-sim whose modeled user is rewarded too."""

    def rubric(self, role: str) -> Rubric:
        return Rubric.from_functions([user_done]) if role == "user" else super().rubric(role)


def make_env(name: str) -> tuple[Env, str]:
    """The env and how its policies are keyed."""
    if name == "user-sim":
        user = UserAgentConfig(trainable=True)
        return PaidUserSim(
            UserSimConfig(taskset={"id": "jsonl", "path": str(QA)}, user=user)
        ), "role"
    players = {
        "player0": AgentConfig(model="builtin/bracket"),
        "player1": AgentConfig(model="builtin/echo"),
    }
    return KuhnPoker(KuhnConfig(**players)), "model"


def step_line(group: Group) -> str:
    samples = group.samples()
    advantages = [s.advantage for s in samples if s.advantage is not None]
    rewards = [s.reward for s in samples]
    roles = sorted({s.agent for s in samples})
    return (
        f"policy {group.policy} v{group.policy_version} task {group.task.idx}: "
        f"roles {','.join(roles)}, {len(samples)} samples, "
        f"reward mean {statistics.fmean(rewards) if rewards else 0.0:+.3f}, "
        f"advantage sum {sum(advantages):+.3f}"
    )


async def train(args: argparse.Namespace) -> None:
    env, policies = make_env(args.env)
    config = EvalConfig(env_id=env.id, concurrency=args.concurrency)
    steps: dict[str | None, int] = {}
    async with open_rollouts(
        env, config, policies=policies, max_staleness=args.max_staleness
    ) as source:
        source.policy_versions = {p: 0 for p in source.policy_keys if p is not None}
        async for group in source.groups(env.tasks(args.steps), per_task=args.per_task):
            print(step_line(group), flush=True)
            assert group.policy is not None
            steps[group.policy] = steps.get(group.policy, 0) + 1
            source.policy_versions[group.policy] += 1  # this policy's new weights
    counts = ", ".join(f"{p}: {n} steps" for p, n in steps.items())
    versions = source.policy_versions
    print(f"done: {counts}; versions {versions}; {len(source.stale)} stale groups dropped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", choices=["user-sim", "kuhn"])
    parser.add_argument("--steps", type=int, default=4, help="tasks (one group per policy each)")
    parser.add_argument("--per-task", type=int, default=3, help="episodes per group")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-staleness", type=int, default=2)
    trio.run(train, parser.parse_args())


if __name__ == "__main__":
    main()
