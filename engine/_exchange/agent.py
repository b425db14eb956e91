"""``Agent``: harness x model endpoint x sampling x limits.

``agent.chat(task)`` opens the exchange (a ``ChatSession``); ``agent.run(task)`` is
the one-call special case. Inside an eval, the episode builds its agents (stamped
with the shared ``EpisodeInfo``, joined to the episode at close); in a script or
test, build one directly: ``Agent("me", AgentConfig(model="builtin/echo"))``.
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, ValuesView
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig, Sampling
from taketurns._config.registry import harnesses
from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError, HarnessError, TurnError
from taketurns._exchange.boundary import ModelBoundary
from taketurns._exchange.harness import Harness, Rollout, can_chat
from taketurns._exchange.null import NullHarness as NullHarness  # registers "null"
from taketurns._exchange.outcome import is_failure
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.seeds import session_seed
from taketurns._exchange.session import ChatSession
from taketurns._exchange.task import Task
from taketurns._exchange.tools import Tool
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, Trace
from taketurns._models.builtin import BuiltinModel, is_builtin
from taketurns._models.model import ModelClient
from taketurns._procs.limits import TreeLimits
from taketurns._procs.sandbox import Sandbox

__all__ = ["Agent", "Agents"]


def make_harness(id: str, options: Mapping[str, Any], *, field: str) -> Harness:
    """A fresh harness ``id`` built with ``options``; ``ConfigError`` names ``field``."""
    cls = harnesses.get(id, field=f"{field}.harness")
    try:
        harness: Harness = cls(**options)
    except (TypeError, ValueError, HarnessError) as exc:
        hint = ""
        if any(isinstance(v, str) and "," in v for v in options.values()):
            # harness options are untyped: a command-line value is read as a TOML value
            hint = (
                "; on the command line a list is written as TOML/JSON, e.g. "
                """--env.<role>.harness_options.command='["python", "prog.py"]'"""
            )
        hint = _option_hint(cls, options) or hint
        raise ConfigError(
            f"{field}.harness_options = {dict(options)!r}: refused by harness {id!r} ({exc})" + hint
        ) from None
    return harness


def _option_hint(cls: Any, options: Mapping[str, Any]) -> str:
    """``; did you mean 'command'? (options of harness 'program': ...)`` for an option
    the harness does not take; "" when every option is one it takes."""
    try:
        known = [n for n in inspect.signature(cls).parameters if n not in ("self", "kwargs")]
    except (TypeError, ValueError):
        return ""
    unknown = [name for name in options if name not in known]
    if not unknown:
        return ""
    hint = did_you_mean(unknown[0], known)
    return f"; {hint + ' ' if hint else ''}its options: {', '.join(known) or 'none'}"


class Agent:
    """One role. ``client`` defaults to the built-in model named by ``config.model``
    (an endpoint model needs an explicit client: the eval runner builds those);
    ``harness`` defaults to the registered harness ``config.harness``."""

    def __init__(
        self,
        name: str,
        config: AgentConfig | None = None,
        *,
        client: ModelClient | None = None,
        harness: Harness | None = None,
        rubric: Rubric | None = None,
        episode: EpisodeInfo | None = None,
        sampling: Sampling | None = None,
        limiter: trio.CapacityLimiter | None = None,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        services: Mapping[str, Any] | None = None,
        on_close: Callable[[Trace], None] | None = None,
    ) -> None:
        self.name = name
        self.config = config = config if config is not None else AgentConfig()
        self.model = config.model or "builtin/bracket"
        if client is None:
            if not is_builtin(self.model) or config.base_url is not None:
                raise ConfigError(
                    f"{name}.model: {self.model!r} is served by an endpoint; "
                    "pass client=OpenAIClient(...) or use builtin/<policy>"
                )
            client = BuiltinModel.from_model_name(self.model, field=f"{name}.model")
        self.client = client
        if harness is None:
            harness = make_harness(config.harness or "null", config.harness_options, field=name)
        self.harness: Harness = harness
        self.limits = config.limits
        if config.limits.max_segment_turns is None and harness.segment_turns is not None:
            self.limits = attrs.evolve(config.limits, max_segment_turns=harness.segment_turns)
        # a harness class with no `id` is named by its class (never "null": that is
        # the built-in null harness)
        self.harness_id: str = config.harness or type(harness).id or type(harness).__qualname__
        self.rubric = rubric if rubric is not None else Rubric()
        self._stamp = AgentStamp(self.name, self.model, self.harness_id, config.trainable)
        self.episode = episode
        self.sampling = config.sampling.over(sampling) if sampling else config.sampling
        self._request_fields = self.sampling.request_fields()
        self.limiter = limiter
        self.tools = tuple(tools)
        self.services = services
        limits = TreeLimits(**attrs.asdict(config.sandbox_limits))
        self._sandbox = Sandbox(config.sandbox or "none", config.sandbox_network, limits=limits)
        self._on_close = on_close
        self._open_sessions: dict[int, ChatSession] = {}
        # sessions opened so far on each task (by task idx): a session's seed is its
        # task's and its rank among that task's sessions, never the opening order
        self._opened: dict[int, int] = {}
        # what a cancellation that closes one of this agent's sessions means
        self.cancel_reason: Callable[[ChatSession], str] = _cancelled

    def bind(
        self,
        episode: EpisodeInfo,
        *,
        on_close: Callable[[Trace], None] | None = None,
        sampling: Sampling | None = None,
    ) -> Agent:
        """A copy of this agent for one episode: the same client, harness, rubric,
        limiter and tools, its own sessions. Cheap: the eval runner builds one agent
        per role and binds it per episode. ``sampling`` fills unset sampling fields."""
        agent = object.__new__(Agent)
        agent.__dict__.update(self.__dict__)
        agent.episode = episode
        agent._on_close = on_close
        agent._open_sessions = {}
        agent._opened = {}
        agent.cancel_reason = _cancelled
        if sampling is not None:
            agent.sampling = self.sampling.over(sampling)
            agent._request_fields = agent.sampling.request_fields()
        return agent

    @property
    def sessions(self) -> list[ChatSession]:
        """This agent's sessions not yet closed."""
        return list(self._open_sessions.values())

    @property
    def stamp(self) -> AgentStamp:
        return self._stamp

    def chat(
        self,
        task: Task,
        *,
        mask_prompt: bool = False,
        tools: Sequence[Callable[..., Any] | Tool] | None = None,
        state: Mapping[str, Any] | None = None,
        seed_key: int | str | None = None,
    ) -> ChatSession:
        """Open a session on ``task``; use as ``async with agent.chat(task) as s``.

        With ``mask_prompt=True`` the task's prompt never reaches the model and the
        trace keeps a masked view (``task.idx`` for provenance); the rubric still
        scores the real row. ``tools`` (default: the agent's) are offered to tool
        harnesses; ``state`` goes on ``trace.state`` for the rubric (never persisted).
        The session's model-call seeds derive from the episode's, the task and how
        many sessions this agent opened on that task before (``_exchange.seeds``);
        sessions opened concurrently on one task give each a ``seed_key`` of its
        own so their seeds never depend on which opened first. Raises
        ``HarnessError`` at once when the harness cannot hold a multi-turn session
        (``can_chat``: as its class declares)."""
        if not can_chat(self.harness):
            raise HarnessError(
                f"harness {self.harness_id!r} cannot chat: it has no native resume (its "
                "class does not declare resumes = True) and its launch takes text "
                "(takes_text = True); use agent.run(task) or a chat-capable harness"
            )
        return self._open(
            task, mask_prompt=mask_prompt, tools=tools, state=state, seed_key=seed_key
        )

    def _open(
        self,
        task: Task,
        *,
        mask_prompt: bool,
        tools: Sequence[Callable[..., Any] | Tool] | None,
        state: Mapping[str, Any] | None,
        seed_key: int | str | None = None,
    ) -> ChatSession:
        episode = self.episode or EpisodeInfo("", "", task.idx)
        view = attrs.evolve(task, prompt=None) if mask_prompt else task
        trace = Trace(self.stamp, episode, view, masked=mask_prompt)
        if state:
            trace.state.update(state)
        trace.timing.started_at = time.time()
        # the model calls' seeds derive from the episode's, unless the role pins one
        seed = None
        opened = self._opened.get(task.idx, 0)
        self._opened[task.idx] = opened + 1
        if "seed" not in self._request_fields:
            own = task.idx == episode.task_idx  # the episode's task: its pinned seeds
            seed = session_seed(
                episode.seed, self.name, opened, None if own else task.idx, seed_key
            )
        boundary = ModelBoundary(
            trace,
            self.client,
            model=self.model,
            sampling=self._request_fields,
            limits=self.limits,
            rubric=self.rubric,
            limiter=self.limiter,
            seed=seed,
        )
        offered = self.tools if tools is None else tuple(tools)
        rollout = Rollout(
            trace, boundary, task=view, tools=offered, services=self.services, sandbox=self._sandbox
        )
        session = ChatSession(
            task,
            trace,
            rollout,
            self.harness,
            self.rubric,
            self.config.timeouts,
            mask_prompt=mask_prompt,
            on_close=self._closed,
        )
        session.cancel_reason = self.cancel_reason
        self._open_sessions[id(session)] = session
        return session

    def _closed(self, session: ChatSession) -> None:
        self._open_sessions.pop(id(session), None)
        if self._on_close is not None and not session.discard:
            self._on_close(session.trace)

    async def run(
        self,
        task: Task,
        *,
        tools: Sequence[Callable[..., Any] | Tool] | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> Trace:
        """One shot: open, one segment on the prompt, close with ``agent_completed``.
        A run whose segment failed (a harness or model error) is retried up to
        ``config.retries`` times; only the last attempt's trace is kept (and scored).
        ``tools`` and ``state`` as for ``chat`` (the same state for every attempt)."""
        if task.prompt is None:
            raise TurnError("agent.run(task) needs a prompted task; use agent.chat(task)")
        attempts = self.config.retries + 1
        for attempt in range(attempts):
            session = self._open(task, mask_prompt=False, tools=tools, state=state)
            async with session:
                await session.turn()
                if attempt < attempts - 1 and _failed(session.trace):
                    session.discard = True  # a retried attempt never joins the episode
                    await session.close(reason="retried")
                    continue
                session.trace.info["attempts"] = attempt + 1
                await session.close(reason="agent_completed")
            return session.trace
        raise AssertionError("unreachable")  # pragma: no cover


_OWN = ("_agents", "_rng", "seed")  # instance attributes a role cannot shadow


def _cancelled(session: ChatSession) -> str:
    return "cancelled"


def _failed(trace: Trace) -> bool:
    return is_failure(trace.stop_condition)


class Agents(Mapping[str, Agent]):
    """The agents of one episode by role: ``agents["player0"]`` or ``agents.player0``
    (a role named like an attribute below, ``rng`` say, only as ``agents["rng"]``).

    The episode's randomness comes from here, never from the global ``random``:
    ``agents.seed`` is the episode's seed (``_exchange.seeds.episode_seed``: the run's
    ``--seed``, the task and the rollout; the same whatever the concurrency, backend or
    scheduling order) and ``agents.rng`` a ``random.Random`` seeded with it, made on
    first use, private to the episode."""

    def __init__(self, agents: Mapping[str, Agent], *, seed: int = 0) -> None:
        self._agents = dict(agents)
        self.seed = seed
        self._rng: random.Random | None = None
        for role, agent in self._agents.items():
            if role.isidentifier() and not hasattr(type(self), role) and role not in _OWN:
                self.__dict__[role] = agent  # plain attribute access, once per episode

    @property
    def rng(self) -> random.Random:
        """The episode's RNG (seeded with ``seed``): draw every random choice from it."""
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng

    def __getitem__(self, role: str) -> Agent:
        return self._agents[role]

    def __getattr__(self, role: str) -> Agent:
        try:
            return self._agents[role]
        except KeyError:
            raise AttributeError(f"no agent {role!r}; roles: {sorted(self._agents)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._agents)

    def __len__(self) -> int:
        return len(self._agents)

    def values(self) -> ValuesView[Agent]:
        return self._agents.values()
