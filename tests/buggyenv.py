"""Buggy user code, run by reference (``./tests/buggyenv.py:Class``) in tests of what a
user sees when their code fails: an env whose ``run`` raises ``KeyError``
(``BuggyEnv``; ``--env.bug=reward`` makes its reward divide by zero instead), and a
taskset whose reward divides by zero (``BuggyTasks``)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task, Taskset, TasksetConfig, reward


@attrs.define
class BuggyConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    bug: str = "run"  # "run": run raises KeyError; "reward": the reward divides by 0


class BuggyEnv(Env):
    config_class = BuggyConfig
    config: BuggyConfig

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [Task(idx=i, prompt=f"choose [left] or [right] #{i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        await agents.player.run(task)
        if self.config.bug == "run":
            looked_up = {"present": 1}
            looked_up[f"missing-{task.idx}"] += 1  # the bug: a key that is not there

    @reward
    def share(self, task: Task, trace: object) -> float:
        if self.config.bug == "reward":
            return 1 / (task.idx - task.idx)  # the bug: a division by zero
        return 1.0


class BuggyTasks(Taskset):
    config_class = TasksetConfig

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [Task(idx=i, prompt=f"say {i}", answer=str(i)) for i in range(num_tasks)]

    @reward
    def ratio(self, task: Task, trace: object) -> float:
        return len(str(task.answer)) / 0
