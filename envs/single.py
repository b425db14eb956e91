"""``single-agent``: one agent, one shot, over any taskset.

What a taskset runs under when no multi-agent env is named: ``taketurns eval jsonl
--env.taskset.path=f.jsonl`` is ``taketurns eval single-agent --env.taskset=jsonl
--env.taskset.path=f.jsonl``. Each episode is one ``agent.run(task)`` with the task's
per-rollout tools and state, its MCP servers' tools included (stop condition
``agent_completed``), scored by the taskset's rubric. The agent's harness defaults to
the one the taskset is meant for (``null``, or ``tools`` for a taskset that hands out
tools or has MCP servers).
"""

from __future__ import annotations

from typing import Any

import attrs

from taketurns import AgentConfig, Agents, EnvConfig, Task, TasksetEnv

__all__ = ["SingleAgentConfig", "SingleAgentEnv"]


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
            await agents.agent.run(task, tools=resources.tools, state=resources.state)
