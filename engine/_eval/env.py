"""``Env``: how one task becomes one episode.

An env declares its roles as ``AgentConfig`` fields of its attrs config class
(``config_class``), makes its tasks, and runs one task with its agents::

    @attrs.define
    class MyConfig(EnvConfig):
        player: AgentConfig = attrs.field(factory=AgentConfig)

    @register_env("my-env")
    class MyEnv(Env):
        config_class = MyConfig
        def tasks(self, num_tasks): ...
        async def run(self, task, agents): ...

``run`` may raise: the episode is then recorded as failed, every session it opened is
closed and scored, and the eval carries on. Rewards come from ``@reward`` /
``@metric`` / ``@stop`` methods on the env (see ``rubric``).

Optional hooks: ``default_harness`` (what a role runs when its config names no
harness), ``setup`` / ``services`` / ``finalize`` (what an eval holds around its
episodes), ``judges``, and the env's own part of the report (``report_figures``,
``report_sections``: drawn with ``taketurns.report``).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs

from taketurns._config.options import AgentConfig, EnvConfig
from taketurns._config.registry import envs
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.seeds import DEFAULT_SEED
from taketurns._exchange.task import Task

if TYPE_CHECKING:
    from taketurns._exchange.agent import Agents
    from taketurns._exchange.judge import Judge
    from taketurns._report.episode_view import EpisodeView
    from taketurns._report.parts import Figure, Section

__all__ = ["Env", "register_env", "roles_of"]

E = TypeVar("E", bound=type)


def register_env(id: str) -> Callable[[E], E]:
    """Class decorator registering an env under ``id`` (entry points do the same)."""
    return envs.register(id)


def roles_of(config: Any) -> dict[str, AgentConfig]:
    """The ``AgentConfig`` fields of an env config, by role name, in field order."""
    return {
        f.name: getattr(config, f.name)
        for f in attrs.fields(type(config))
        if isinstance(getattr(config, f.name), AgentConfig)
    }


class Env(abc.ABC):
    """Subclass, set ``config_class``, implement ``tasks`` and ``run``.

    Randomness: ``seed`` is the run's seed (``--seed``; the eval sets it before
    ``tasks``): derive the tasks' random choices from it (an env config's own ``seed``
    option, when set, may stand in for it). In ``run``, draw from ``agents.rng``, the
    episode's RNG. Never use the global ``random``: a run must replay the same
    whatever the concurrency and the backend."""

    id: ClassVar[str] = ""
    config_class: ClassVar[type] = EnvConfig
    seed: int = DEFAULT_SEED  # the run's seed, set per instance by the eval

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.config_class()

    def seed_of(self, own: int | None) -> int:
        """The seed the tasks derive from: the env config's own ``seed`` option when it
        is set (``own``), else the run's (``self.seed``)."""
        return self.seed if own is None else own

    @property
    def roles(self) -> dict[str, AgentConfig]:
        return roles_of(self.config)

    @abc.abstractmethod
    def tasks(self, num_tasks: int) -> Sequence[Task]:
        """The first ``num_tasks`` tasks (deterministic: task i is the same every run)."""

    @abc.abstractmethod
    async def run(self, task: Task, agents: Agents) -> None:
        """Play one episode. Sessions opened with ``async with agents[r].chat(...)``
        close themselves; any left open are closed when ``run`` returns."""

    def rubric(self, role: str) -> Rubric:
        """The rubric scoring ``role``'s traces: by default every ``@reward``,
        ``@metric`` and ``@stop`` method of this env."""
        return Rubric.of(self)

    def default_harness(self, role: str) -> str:
        """The harness ``role`` runs when its config names none."""
        return "null"

    def default_model(self, role: str) -> str | None:
        """The model ``role`` runs when neither its config (``--env.<role>.model``) nor
        the eval (``--model``, ``model`` in a config file) names one: an env whose
        seats need a built-in policy of their own to run with no flags says so here,
        and an explicit ``--model`` still reaches every seat. None (the default): the
        engine's default, ``builtin/bracket``."""
        return None

    async def setup(self) -> None:  # noqa: B027 - optional hook
        """Called once per eval before the first episode."""

    async def finalize(self) -> None:  # noqa: B027 - optional hook
        """Called once per eval after the last episode (also on error or cancel)."""

    def services(self) -> contextlib.AbstractAsyncContextManager[None]:
        """What the env holds open for a whole eval, in the eval's trio loop (each
        worker's, on a worker backend): entered after ``setup``, left before
        ``finalize``, also on error or cancellation (shared tool servers). The
        judges' model clients (``judges()``) are closed by the eval after it.
        Default: nothing."""
        return contextlib.nullcontext()

    def judges(self) -> Sequence[Judge]:
        """The LLM judges among this env's rewards: the eval preflights their
        endpoints with the agents' before the first episode. Default: none."""
        return ()

    def report_figures(self, episodes: Iterable[EpisodeView]) -> Sequence[Figure]:
        """Figures of this env's own, drawn in the report's Plots grid after the
        built-in ones (``taketurns.report``: ``Figure``, ``bar_chart``...).
        ``episodes``: every episode of the run, read back from ``episodes.jsonl``
        one at a time as ``taketurns.report.EpisodeView`` values (the parsed record,
        read like an ``Episode``: fields beyond the view's own structure it on first
        use); iterate once, keep running sums, not the episodes; failed ones too
        (``episode.ok`` is False: leave them out of what measures the model).
        Called on an env built from the run's ``config.toml``; an error leaves the
        env's part out with a note, never the report. Default: none."""
        return ()

    def report_sections(self, episodes: Iterable[EpisodeView]) -> Sequence[Section]:
        """Sections of this env's own, after the plots and before the transcripts
        (``taketurns.report``: ``Section``, ``table``...): what a reader of this
        env's runs looks at besides the transcripts. ``episodes`` as for
        ``report_figures``, from the same pass over the file: an env with both
        hooks has this one called in a thread of its own, run only while the pass
        waits for it (never at the same time as ``report_figures``). Default: none."""
        return ()
