"""``single-agent``: one agent, one shot, over any taskset.

What a taskset runs under when no multi-agent env is named: ``taketurns eval jsonl
--env.taskset.path=f.jsonl`` is ``taketurns eval single-agent --env.taskset=jsonl
--env.taskset.path=f.jsonl``. Each episode is one ``agent.run(task)`` with the task's
per-rollout tools and state, its MCP servers' tools included (stop condition
``agent_completed``), scored by the taskset's rubric. The agent's harness defaults to
the one the taskset is meant for (``null``, or ``tools`` for a taskset that hands out
tools or has MCP servers).

A taskset that plays its own episode (a ``Plays``: an ``async def play(agent, task,
resources)`` method, such as ``reasoning-gym`` re-asking after a wrong answer) is
handed the agent instead: it may run a conversation (``agent.chat``) rather than one
shot.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import attrs

from taketurns import Agent, AgentConfig, Agents, EnvConfig, Resources, Task, TasksetEnv

__all__ = ["Plays", "SingleAgentConfig", "SingleAgentEnv"]


@runtime_checkable
class Plays(Protocol):
    """A taskset that plays its own single-agent episode (one shot or a conversation)
    with ``agent`` on ``task`` and the rollout's ``resources``."""

    async def play(self, agent: Agent, task: Task, resources: Resources) -> None: ...


@attrs.define
class SingleAgentConfig(EnvConfig):
    """``taskset``: a taskset id or a table ``{id = "jsonl", path = "..."}`` (on the
    command line ``--env.taskset=jsonl --env.taskset.path=f.jsonl``); ``agent``: the
    one role."""

    taskset: Any = None
    agent: AgentConfig = attrs.field(factory=AgentConfig)


class SingleAgentEnv(TasksetEnv):
    id = "single-agent"
    config_class = SingleAgentConfig
    config: SingleAgentConfig

    async def run(self, task: Task, agents: Agents) -> None:
        async with self.taskset.open_resources(task) as resources:
            if isinstance(self.taskset, Plays):
                await self.taskset.play(agents.agent, task, resources)
                return
            await agents.agent.run(task, tools=resources.tools, state=resources.state)
