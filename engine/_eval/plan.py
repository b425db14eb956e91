"""What an eval builds before its first episode: each role's resolved config, one
model client per distinct endpoint, a harness and limiters per role (``Plan``), and the
preflight call that turns a wrong URL, key or model into one ``ConfigError``.

Nothing here starts a task: a ``Plan`` is plain objects, closed by ``aclose``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig, EvalConfig, Sampling
from taketurns._config.registry import envs
from taketurns._errors import ConfigError
from taketurns._eval.env import Env
from taketurns._exchange.agent import Agent, make_harness
from taketurns._exchange.trace import EpisodeInfo, Trace
from taketurns._models.builtin import BuiltinModel, is_builtin
from taketurns._models.model import ModelClient
from taketurns._procs.sandbox import bwrap_path, missing_bwrap

__all__ = ["Plan", "env_class", "make_env", "preflight", "resolve_role"]


def resolve_role(config: EvalConfig, env: Env, role: str, agent: AgentConfig) -> AgentConfig:
    """The role's config with its unset endpoint fields taken from the eval."""
    return attrs.evolve(
        agent,
        harness=agent.harness or env.default_harness(role),
        model=agent.model or config.model,
        base_url=agent.base_url if agent.base_url is not None else config.base_url,
        api_key_var=agent.api_key_var or config.api_key_var,
        sampling=agent.sampling.over(config.sampling),
    )


def _client_for(config: EvalConfig, role: str, agent: AgentConfig) -> ModelClient:
    if agent.base_url is None:
        if not is_builtin(agent.model):
            raise ConfigError(
                f"env.{role}.model = {agent.model!r}: an endpoint model needs a base URL "
                f"(--base-url or --env.{role}.base_url); without one use builtin/<policy>"
            )
        return BuiltinModel.from_model_name(agent.model, field=f"env.{role}.model")
    from taketurns._models.openai import OpenAIClient

    return OpenAIClient(
        agent.base_url,
        api_key_var=agent.api_key_var,
        timeout=config.request_timeout_s,
        retries=config.request_retries,
        backoff=config.request_backoff_s,
        concurrency=config.concurrency * 2,
    )


async def preflight(
    config: EvalConfig, env: Env, *, say: Callable[[str], None] | None = None
) -> None:
    """Call every distinct endpoint once with throwaway clients (their connections
    belong to this trio run), each check bounded by ``config.preflight_timeout_s``
    (retries included); ``say`` hears which endpoint is being checked; then the env's
    judges. Raises ``ConfigError`` naming the failing endpoint."""
    seen = set()
    limit = config.preflight_timeout_s
    for role, agent in env.roles.items():
        agent = resolve_role(config, env, role, agent)
        key = (agent.model, agent.base_url, agent.api_key_var)
        if agent.base_url is None or key in seen:
            continue
        seen.add(key)
        model = agent.model or config.model
        if say is not None:
            say(f"checking {agent.base_url} (model {model}; up to {limit:g} s)")
        client = _client_for(config, role, agent)
        try:
            with trio.move_on_after(limit) as scope:
                await client.preflight(model)
        finally:
            await client.aclose()
        if scope.cancelled_caught:
            raise ConfigError(
                f"preflight: model {model!r} at {agent.base_url} did not answer within "
                f"{limit:g} s; check that the server is up and not overloaded, or allow "
                "it longer with --preflight-timeout S"
            )
    for judge in env.judges():
        await judge.preflight()


class Plan:
    """Clients, harnesses and limiters per role, built (and validated, raising
    ``ConfigError``) before any episode starts; ``run_eval`` builds one if not given."""

    def __init__(self, config: EvalConfig, env: Env) -> None:
        self.env = env
        self.roles = {r: resolve_role(config, env, r, a) for r, a in env.roles.items()}
        self.clients: dict[tuple[Any, ...], ModelClient] = {}  # one per distinct endpoint
        self.services: dict[str, Any] = {}  # filled by the runner (interception server)
        shared = config.max_concurrent_calls
        shared_limiter = trio.CapacityLimiter(shared) if shared else None
        # one prototype agent per role; each episode binds its own copy
        self.agents: dict[str, Agent] = {}
        for role, agent in self.roles.items():
            key = (agent.model, agent.base_url, agent.api_key_var)
            if key not in self.clients:
                self.clients[key] = _client_for(config, role, agent)
            cap = agent.max_concurrent_calls
            self.agents[role] = Agent(
                role,
                agent,
                client=self.clients[key],
                harness=make_harness(
                    agent.harness or "null", agent.harness_options, field=f"env.{role}"
                ),
                rubric=env.rubric(role),
                limiter=trio.CapacityLimiter(cap) if cap else shared_limiter,
                services=self.services,
            )
        self._check_sandboxes()

    def make_agent(
        self, role: str, _config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        prototype = self.agents[role]
        # rollouts of the (deterministic) built-in model differ by seed = rollout index
        seeded = isinstance(prototype.client, BuiltinModel) and info.rollout > 0
        sampling = Sampling(seed=info.rollout) if seeded else None
        return prototype.bind(info, on_close=on_close, sampling=sampling)

    @property
    def needs_interception(self) -> bool:
        from taketurns._http.served import ServedHarness

        return any(isinstance(a.harness, ServedHarness) for a in self.agents.values())

    def _out_of_process(self) -> list[str]:
        """The roles whose harness runs the agent out of process."""
        from taketurns._http.served import ServedHarness

        return [r for r, a in self.agents.items() if isinstance(a.harness, ServedHarness)]

    def _check_sandboxes(self) -> None:
        """Refuse (before any episode) a sandboxed out-of-process role where bubblewrap
        is missing, naming the package and the way out."""
        for role in self._out_of_process():
            if self.roles[role].sandbox == "bwrap" and bwrap_path() is None:
                raise ConfigError(missing_bwrap(f"env.{role}"))

    def sandbox_warnings(self) -> list[str]:
        """One warning per out-of-process role that runs unsandboxed."""
        return [
            f"warning: env.{role}.sandbox = none: its agents run unsandboxed, as this "
            "user, with the host's files, processes and network in reach"
            for role in self._out_of_process()
            if self.roles[role].sandbox == "none"
        ]

    async def aclose(self) -> None:
        """Close the model clients, then shut each distinct harness down; shielded."""
        with trio.CancelScope(shield=True):
            for client in self.clients.values():
                await client.aclose()
            for harness in {id(a.harness): a.harness for a in self.agents.values()}.values():
                await harness.shutdown()


def env_class(env_id: str, *, field: str = "env_id") -> type[Env]:
    """The env class ``env_id`` names: a registered id or a reference
    (``./file.py:Class``, ``package.module:Class``). Raises ``ConfigError`` naming
    ``field`` for an unknown id, a bad reference, or a class that is not an ``Env``."""
    cls = envs.get(env_id, field=field)
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise ConfigError(
            f"{field} = {env_id!r}: {cls!r} is not an Env subclass (nor a Taskset, which "
            "runs under single-agent); see the README, Writing an env"
        )
    return cls


def make_env(config: EvalConfig) -> Env:
    """The eval's env, built from ``config.env``; ``ConfigError`` as ``env_class``."""
    return env_class(config.env_id)(config.env)
