"""An env that draws from the episode's RNG (``agents.rng``), for the seed tests: each
episode deals the player a shuffled menu and records its draws and ``agents.seed`` on
the trace, so two runs that hand episodes the same RNG write the same records."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task

MENU = ("tea", "coffee", "juice", "water", "soda")


@attrs.define
class RngConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)


class RngEnv(Env):
    id = "rng-env"
    config_class = RngConfig

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [Task(idx=i, name=f"menu-{i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        menu = list(MENU)
        agents.rng.shuffle(menu)
        offered = menu[: agents.rng.randint(2, 4)]
        options = " or ".join(f"[{item}]" for item in offered)
        async with agents.player.chat(task) as session:
            session.trace.info.update(offered=offered, episode_seed=agents.seed)
            reply = await session.turn(f"Order #{task.idx}: {options}?")
            session.trace.info["ordered"] = reply.text
