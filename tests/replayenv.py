"""An env holding two sessions of one role at once, for ``taketurns replay`` tests: each
episode opens chat ``A`` and chat ``B`` for ``player`` and asks them in turn, ``rounds``
times, to pick one of two bracketed options (the built-in ``bracket`` model answers)."""

from __future__ import annotations

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task, Trace, reward


@attrs.define
class TwoChatsConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    rounds: int = 3


class TwoChats(Env):
    config_class = TwoChatsConfig
    config: TwoChatsConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(idx=i, name=f"two-{i}", prompt=None) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        views = [
            Task(task.idx, task.name, None, f"You are chat {name} of task {task.idx}.")
            for name in "AB"
        ]
        async with agents.player.chat(views[0]) as a, agents.player.chat(views[1]) as b:
            for r in range(self.config.rounds):
                for session in (a, b):
                    reply = await session.turn(f"Round {r}: pick [left{r}] or [right{r}].")
                    picks = session.trace.info.setdefault("picks", [])
                    picks.append(reply.text)

    @reward
    def lefts(self, task: Task, trace: Trace) -> float:
        return float(sum("left" in p for p in trace.info.get("picks", [])))
