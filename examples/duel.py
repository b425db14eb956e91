"""The README's "Writing an env" example: two agents trade lines for a few rounds.

Run it without packaging it:

    taketurns eval ./examples/duel.py:Duel -n 3
"""

import attrs

from taketurns import AgentConfig, Env, EnvConfig, Task, reward


@attrs.define
class DuelConfig(EnvConfig):
    left: AgentConfig = attrs.field(factory=AgentConfig)
    right: AgentConfig = attrs.field(factory=AgentConfig)
    rounds: int = 3


class Duel(Env):
    config_class = DuelConfig

    def tasks(self, num_tasks):
        return [Task(idx=i, prompt=f"Open round {i}") for i in range(num_tasks)]

    async def run(self, task, agents):
        async with (
            agents.left.chat(task) as left,
            agents.right.chat(task, mask_prompt=True) as right,
        ):
            reply = await left.turn()
            for _ in range(self.config.rounds):
                reply = await right.turn(reply.text)
                if reply.stopped:
                    break
                reply = await left.turn(reply.text)
                if reply.stopped:
                    break

    @reward
    def spoke(self, task, trace):
        return float(bool(trace.last_text))
