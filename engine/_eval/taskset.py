"""``Taskset``: a configurable source of tasks plus the rubric that scores a trace
against its task.

A taskset knows nothing of who plays it: the single-agent env runs it one-shot
(``agent.run``), ``user-sim`` runs it as a conversation with a modeled user. Per
rollout it may hand out ``Resources``: Python tools for the agent and a live ``state``
(kept on ``trace.state``, never written to disk) that its rubric reads at scoring::

    @register_taskset("my-tasks")
    class MyTasks(Taskset):
        config_class = MyConfig          # attrs; its fields are --env.taskset.<field>
        def tasks(self, num_tasks): ...
        @reward
        def correct(self, task, trace): ...
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs

from taketurns._config.registry import tasksets
from taketurns._errors import ConfigError
from taketurns._eval.env import Env
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.task import Task

__all__ = [
    "Resources",
    "Taskset",
    "TasksetConfig",
    "TasksetEnv",
    "open_taskset",
    "register_taskset",
]

T = TypeVar("T", bound=type)


@attrs.define
class TasksetConfig:
    """Base of every taskset's config."""


@attrs.frozen
class Resources:
    """What one rollout of a task gets: ``tools`` for the agent, ``state`` for the
    rubric (and the tools, which usually close over it)."""

    tools: tuple[Callable[..., Any], ...] = ()
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

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.config_class()

    @abc.abstractmethod
    def tasks(self, num_tasks: int) -> Sequence[Task]:
        """The first ``num_tasks`` tasks, deterministically."""

    def rubric(self) -> Rubric:
        """Every ``@reward`` / ``@metric`` / ``@stop`` method of this taskset."""
        return Rubric.of(self)

    def resources(self, task: Task) -> Resources:
        """Fresh per-rollout tools and state for ``task`` (default: none)."""
        return Resources()


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
        return self.taskset.tasks(num_tasks)

    def rubric(self, role: str) -> Rubric:
        return self.taskset.rubric()

    def default_harness(self, role: str) -> str:
        return self.taskset.harness
