"""``bfcl-multi-turn``: the Berkeley Function Calling Leaderboard's multi-turn
categories on the exchange, scored by BFCL's own checker.

One agent (``agent``) chats each task; the env is the user. Each of the task's
user turns is one ``session.turn(...)``; inside a turn the agent's harness (``tools``
by default) runs its own loop of model calls and tool calls until the model answers
without a call. The tools are the task's BFCL functions, run against the episode's
own backend instances (``taketurns.envs.bfcl_backends.Backends``: fresh per episode,
never shared). ``miss_func``: at the turn where BFCL adds the held-back function, the
function joins the offered tools and the turn's message is BFCL's ("I have updated
some more functions you can choose from. What about now?"). ``miss_param`` tasks
withhold a parameter in their own wording, as BFCL ships them. A turn is cut after
BFCL's step limit (``MAXIMUM_STEP_LIMIT`` + 1 model calls: stop condition
``step_limit``), and the run then counts as force-terminated, as in BFCL.

With ``tools = "mcp"`` the same functions are served over MCP from the eval's process
(``taketurns.envs.bfcl_mcp``, held by ``services()``): for agents that call tools
themselves (``codex``, ``claude-code``). A function held back by ``miss_func`` joins
the offered tools through the session's ``rollout.tools`` (the harness lists them at
every segment) and, over MCP, the server's listing.

Scoring: BFCL's ``multi_turn_checker`` replays the calls the backends executed (per
user turn, per model call) and the ground truth on fresh instances and compares their
state and results after every turn. Reward ``valid`` is its verdict (1.0 or 0.0);
metrics ``calls`` (executed calls) and ``turns`` (user turns played).
``trace.info["bfcl"]`` keeps BFCL's verdict: ``id``, ``valid``, and when invalid
``error_type``, ``error_message``, the state ``differences`` (model vs ground truth,
by attribute) or the ``missing_items``; then ``calls`` (the BFCL call strings).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs

from taketurns import (
    AgentConfig,
    Agents,
    Env,
    EnvConfig,
    OptionError,
    Task,
    Trace,
    UserMessage,
    metric,
    reward,
    stop,
)
from taketurns.envs.bfcl_backends import CATEGORIES, Backends, bfcl, check, entries
from taketurns.envs.bfcl_mcp import McpFace
from taketurns.envs.episode_mcp import McpService, python_or_mcp
from taketurns.errors import ScoringError
from taketurns.harness import McpTool

__all__ = ["BfclConfig", "BfclMultiTurn"]


def _category(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in CATEGORIES:
        raise OptionError(attribute.name, value, f"one of {', '.join(CATEGORIES)}")


@attrs.define
class BfclConfig(EnvConfig):
    """``category``: BFCL's multi-turn category (200 tasks each). ``tools``: ``python``
    (the functions as in-process tools) or ``mcp`` (served over MCP from the eval's
    process, for agents that call tools themselves: ``codex``, ``claude-code``)."""

    agent: AgentConfig = attrs.field(factory=AgentConfig)
    category: str = attrs.field(default="base", validator=_category)
    tools: str = attrs.field(default="python", validator=python_or_mcp)


async def _offered(backends: Backends, mcp: Any) -> list[Any]:
    """The tools offered now: in process, or listed from the episode's MCP server."""
    if mcp is None:
        return list(backends.tools())
    listed = await mcp.client.list_tools()
    return [McpTool(mcp, tool) for tool in listed.tools]


class BfclMultiTurn(Env):
    id = "bfcl-multi-turn"
    config_class = BfclConfig
    config: BfclConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.entries = entries(self.config.category)  # ConfigError without bfcl-eval
        self.step_limit_calls = bfcl().prompts.MAXIMUM_STEP_LIMIT + 1
        self.mcp = McpService(McpFace, "tools")

    def default_harness(self, role: str) -> str:
        return "tools"

    def tasks(self, num_tasks: int) -> list[Task]:
        """The category's first ``num_tasks`` tasks (at most 200), in BFCL's order."""
        return [self._task(i) for i in range(min(num_tasks, len(self.entries)))]

    def _task(self, idx: int) -> Task:
        entry, _ = self.entries[idx]
        info = {
            "id": entry["id"],
            "category": self.config.category,
            "involved_classes": list(entry["involved_classes"]),
            "turns": len(entry["question"]),
        }
        return Task(idx=idx, name=entry["id"], info=info)

    def _entry(self, task: Task) -> tuple[dict[str, Any], list[list[str]]]:
        entry, truth = self.entries[task.idx]
        if entry["id"] != task.info.get("id"):
            raise ScoringError(
                f"task {task.idx} is {task.info.get('id')!r} but this env's "
                f"{self.config.category} task {task.idx} is {entry['id']!r}"
            )
        return entry, truth

    def services(self) -> contextlib.AbstractAsyncContextManager[None]:
        """With ``tools = "mcp"``: the MCP server of this eval's episodes."""
        return self.mcp.services(self.config.tools == "mcp")

    async def run(self, task: Task, agents: Agents) -> None:
        backends = Backends(self._entry(task)[0])
        if self.config.tools == "python":
            await self._play(task, backends, agents, None)
            return
        async with self.mcp.open(backends, "bfcl") as (_, connections):
            await self._play(task, backends, agents, connections["bfcl"])

    async def _play(self, task: Task, backends: Backends, agents: Agents, mcp: Any) -> None:
        """The exchange: each user turn one ``session.turn``; ``mcp``: the episode's
        MCP connection (the tools are listed from it), or None for in-process tools."""
        more = bfcl().prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
        state = {"bfcl": backends}
        tools = await _offered(backends, mcp)
        async with agents.agent.chat(task, tools=tools, state=state) as session:
            trace = session.trace
            backends.step = lambda: len(trace.turns)  # a call's step: the model call made it
            for turn, messages in enumerate(backends.entry["question"]):
                if backends.offer_held_back(turn):
                    session.rollout.tools = tuple(await _offered(backends, mcp))
                    messages = [{"role": "user", "content": more}]
                backends.start_turn(turn)
                said = [UserMessage(m["content"]) for m in messages]
                reply = await session.turn(said)
                if reply.stopped:
                    return

    def _verdict(self, task: Task, trace: Trace) -> dict[str, Any]:
        """BFCL's verdict on the trace (computed once, kept on ``trace.info``)."""
        known = trace.info.get("bfcl")
        if known is not None:
            return dict(known)
        backends = trace.state.get("bfcl")
        if not isinstance(backends, Backends):
            raise ScoringError(
                "trace.state has no 'bfcl' backends: run bfcl-multi-turn tasks through "
                "BfclMultiTurn.run"
            )
        entry, truth = self._entry(task)
        verdict = {"id": entry["id"], **check(entry, truth, backends)}
        verdict["calls"] = backends.model_result(len(backends.calls))
        trace.info["bfcl"] = verdict
        return verdict

    @reward
    def valid(self, task: Task, trace: Trace) -> float:
        """1.0 when BFCL's multi-turn checker accepts the run, else 0.0."""
        return float(self._verdict(task, trace)["valid"])

    @metric
    def calls(self, task: Task, trace: Trace) -> float:
        """How many function calls the backends executed."""
        turns: Sequence[Sequence[Sequence[str]]] = self._verdict(task, trace)["calls"]
        return float(sum(len(step) for steps in turns for step in steps))

    @metric
    def turns(self, task: Task, trace: Trace) -> float:
        """How many of the task's user turns were played."""
        return float(len(self._verdict(task, trace)["calls"]))

    @stop
    def step_limit(self, trace: Trace) -> bool:
        """BFCL's per-turn cap: no model call past ``MAXIMUM_STEP_LIMIT`` + 1 in one
        user turn (counted as recorded model calls, so an agent CLI's own loop and
        sub-agents count too)."""
        backends = trace.state.get("bfcl")
        if not isinstance(backends, Backends):
            return False
        return len(trace.turns) - backends.turn_began >= self.step_limit_calls
