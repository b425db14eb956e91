"""``Taskset``: a configurable source of tasks plus the rubric that scores a trace
against its task.

A taskset knows nothing of who plays it: the single-agent env runs it one-shot
(``agent.run``), a conversational env may run it against a modeled user. Per
rollout it may hand out ``Resources``: Python tools for the agent and a live ``state``
(kept on ``trace.state``, never written to disk) that its rubric reads at scoring.
Every taskset also takes ``mcp_servers`` (``[[env.taskset.mcp_servers]]`` tables, or
its own ``mcp_servers(task)`` in code): MCP tool servers whose tools are offered beside
its Python tools, per rollout or shared by the eval (``_exchange.mcp_servers``)::

    @register_taskset("my-tasks")
    class MyTasks(Taskset):
        config_class = MyConfig          # attrs; its fields are --env.taskset.<field>
        def tasks(self, num_tasks): ...
        @reward
        def correct(self, task, trace): ...
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
import trio

from taketurns._config.registry import tasksets
from taketurns._errors import ConfigError, HarnessError
from taketurns._eval.env import Env
from taketurns._exchange.judge import Judge
from taketurns._exchange.mcp_servers import McpConnection, McpServer, McpTool, open_mcp_servers
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.seeds import DEFAULT_SEED
from taketurns._exchange.task import Task
from taketurns._exchange.tools import Tool

__all__ = [
    "Resources",
    "Taskset",
    "TasksetConfig",
    "TasksetEnv",
    "offers_tools",
    "open_taskset",
    "register_taskset",
]

T = TypeVar("T", bound=type)


@attrs.define
class TasksetConfig:
    """Base of every taskset's config. ``mcp_servers``: MCP tool servers whose tools
    every rollout is offered (keyword-only, so subclasses add fields freely)."""

    mcp_servers: list[McpServer] = attrs.field(factory=list, kw_only=True)


@attrs.frozen
class Resources:
    """What one rollout of a task gets: ``tools`` for the agent, ``state`` for the
    rubric (and the tools, which usually close over it)."""

    tools: tuple[Callable[..., Any] | Tool, ...] = ()  # functions, or Tools (e.g. MCP)
    state: Mapping[str, Any] = attrs.field(factory=dict)


def register_taskset(id: str) -> Callable[[T], T]:
    """Class decorator registering a taskset under ``id`` (entry points do the same)."""
    return tasksets.register(id)


class Taskset(abc.ABC):
    id: ClassVar[str] = ""
    config_class: ClassVar[type] = TasksetConfig
    # the harness its tasks are meant for when the config names none ("tools" for a
    # taskset whose resources offer tools)
    harness: ClassVar[str] = "null"
    # the run's seed (``--seed``), set by the env that plays it before ``tasks``: as
    # for ``Env.seed``, the tasks' random choices derive from it
    seed: int = DEFAULT_SEED

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.config_class()
        # the shared MCP servers' (tools, connections) while services() is entered
        self._shared: tuple[tuple[McpTool, ...], dict[str, McpConnection]] | None = None

    @abc.abstractmethod
    def tasks(self, num_tasks: int) -> Sequence[Task]:
        """The first ``num_tasks`` tasks, deterministically (for one ``seed``)."""

    def seed_of(self, own: int | None) -> int:
        """The seed the tasks derive from: the config's own ``seed`` option when it is
        set (``own``), else the run's (``self.seed``)."""
        return self.seed if own is None else own

    def rubric(self) -> Rubric:
        """Every ``@reward`` / ``@metric`` / ``@stop`` method of this taskset."""
        return Rubric.of(self)

    def resources(self, task: Task) -> Resources:
        """Fresh per-rollout tools and state for ``task`` (default: none)."""
        return Resources()

    def judges(self) -> Sequence[Judge]:
        """The LLM judges among this taskset's rewards (preflighted by the eval)."""
        return ()

    def mcp_servers(self, task: Task | None) -> Sequence[McpServer]:
        """The MCP servers of a rollout of ``task`` (``task`` is None when the eval asks
        for the ``shared`` ones). Default: ``config.mcp_servers``."""
        return tuple(getattr(self.config, "mcp_servers", ()))

    @contextlib.asynccontextmanager
    async def services(self) -> AsyncIterator[None]:
        """What this taskset holds for a whole eval (in each eval process): its
        ``shared`` MCP servers, and its judges' model clients, closed on leaving. The
        eval runner enters it through ``TasksetEnv``; outside an eval, ``async with
        taskset.services():`` around the rollouts."""
        try:
            async with self._shared_servers():
                yield
        finally:
            for judge in self.judges():
                await judge.aclose()  # shielded, idempotent

    @contextlib.asynccontextmanager
    async def _shared_servers(self) -> AsyncIterator[None]:
        shared = [s for s in self.mcp_servers(None) if s.placement == "shared"]
        if not shared:
            await trio.lowlevel.checkpoint()
            yield
            return
        if getattr(self, "_shared", None) is not None:
            raise HarnessError("this taskset's services() are already entered")
        async with open_mcp_servers(shared) as (tools, connections):
            self._shared = (tools, connections)
            try:
                yield
            finally:
                self._shared = None

    @contextlib.asynccontextmanager
    async def open_resources(self, task: Task) -> AsyncIterator[Resources]:
        """``resources(task)`` plus the tools of the task's MCP servers: its
        ``per_rollout`` servers are started for the body and stopped on exit (also on
        error or cancellation); ``state["mcp"]`` holds every connection by server
        name. Raises ``HarnessError`` when a server fails to start."""
        base = self.resources(task)
        servers = self.mcp_servers(task)
        if not servers:
            await trio.lowlevel.checkpoint()
            yield base
            return
        shared: tuple[tuple[McpTool, ...], dict[str, McpConnection]] = ((), {})
        if any(s.placement == "shared" for s in servers):
            shared = getattr(self, "_shared", None) or _no_shared()
        own = [s for s in servers if s.placement == "per_rollout"]
        async with open_mcp_servers(own) as (tools, connections):
            state = {**base.state, "mcp": {**shared[1], **connections}}
            yield Resources(tools=(*base.tools, *shared[0], *tools), state=state)


def _no_shared() -> Any:
    raise HarnessError(
        "shared MCP servers are opened once per eval: run under `taketurns eval`, or "
        "wrap the rollouts in `async with taskset.services():`"
    )


def offers_tools(taskset: Taskset) -> bool:
    """Whether ``taskset`` may hand its rollouts tools: it has MCP servers, or its class
    overrides ``resources`` (asked without a task: the hook is per task, and whatever
    it returns, a rollout on the ``tools`` harness without tools is a ``null`` one)."""
    if taskset.mcp_servers(None):
        return True
    return type(taskset).resources is not Taskset.resources


def open_taskset(ref: Any, *, field: str = "env.taskset") -> Taskset:
    """Build a taskset from a config value: an id (``"jsonl"``) or a table with an
    ``id`` and the taskset's own options. Raises ``ConfigError`` naming ``field``."""
    from taketurns._config.settings import structure

    if isinstance(ref, Taskset):
        return ref
    if isinstance(ref, str):
        ref = {"id": ref}
    if not isinstance(ref, Mapping) or not isinstance(ref.get("id"), str):
        raise ConfigError(
            f"{field}: name a taskset (--{field}=ID); known tasksets: {', '.join(tasksets.ids())}"
        )
    cls = tasksets.get(ref["id"], field=f"{field}.id")
    if not (isinstance(cls, type) and issubclass(cls, Taskset)):
        raise ConfigError(f"{field}.id = {ref['id']!r}: {cls!r} is not a Taskset subclass")
    options = {k: v for k, v in ref.items() if k != "id"}
    config = structure(options, cls.config_class, path=field)
    taskset: Taskset = cls(config)
    return taskset


class TasksetEnv(Env):
    """Base of envs that play any taskset (its config has a ``taskset`` field: an id or
    a table). The taskset is opened in ``__init__``, so a bad one is refused before any
    episode; its tasks, rubric and harness are the env's defaults."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.taskset = open_taskset(self.config.taskset, field="env.taskset")

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        self.taskset.seed = self.seed
        return self.taskset.tasks(num_tasks)

    def rubric(self, role: str) -> Rubric:
        return self.taskset.rubric()

    def default_harness(self, role: str) -> str:
        """The taskset's harness; ``tools`` for a ``null`` taskset that offers tools
        (``offers_tools``): a taskset's tools are never dropped for want of a harness
        that calls them."""
        if self.taskset.harness == "null" and offers_tools(self.taskset):
            return "tools"
        return self.taskset.harness

    def services(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.taskset.services()

    def judges(self) -> Sequence[Judge]:
        return self.taskset.judges()
