"""What an eval builds before its first episode: each role's resolved config, one
model client per distinct endpoint, a harness and limiters per role (``Plan``), and the
preflight call that turns a wrong URL, key or model into one ``ConfigError``.

Roles with no base URL whose model is ``llamacpp/...``, or any non-built-in model when
``model_server`` is set, are served by a model server the eval owns
(``Plan.servers``, one per distinct server; started by ``_eval.servers``); their
client is a ``ServedModel`` that points at it once it is up.

Nothing here starts a task: a ``Plan`` is plain objects, closed by ``aclose``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any

import attrs
import orjson
import trio

from taketurns._config.options import DEFAULT_MODEL, AgentConfig, EvalConfig, Sampling
from taketurns._config.registry import envs
from taketurns._errors import ConfigError
from taketurns._eval.env import Env
from taketurns._exchange.agent import Agent, make_harness
from taketurns._exchange.trace import EpisodeInfo, Trace
from taketurns._models.builtin import BuiltinModel, is_builtin
from taketurns._models.local import (
    chat_format_in,
    gguf_path,
    is_llamacpp,
    llamacpp_server,
    served_sampling,
    tools_format,
)
from taketurns._models.model import ModelClient
from taketurns._models.server import ModelServer, ServedModel, parse_command
from taketurns._procs.sandbox import bwrap_path, missing_bwrap

_SERVED = "taketurns._http.served"


def _served(harness: object) -> bool:
    """Whether ``harness`` is a ``ServedHarness``, asked without importing its module
    (the interception server's, and quart's: a seventh of an in-process eval's start):
    no object is an instance of a class whose module was never imported."""
    module = sys.modules.get(_SERVED)
    return module is not None and isinstance(harness, module.ServedHarness)


__all__ = [
    "Plan",
    "env_class",
    "make_env",
    "preflight",
    "resolve_role",
    "seeded",
    "server_key",
]

MODEL_SERVER = "model-server"  # Plan.servers key of --model-server


def resolve_role(config: EvalConfig, env: Env, role: str, agent: AgentConfig) -> AgentConfig:
    """The role's config with its unset endpoint fields taken from the eval (and, for
    a llamacpp/ model, its explicit sampling and the logprobs its token ids come
    with: ``taketurns._models.local.served_sampling``). The model: the role's
    own, else the eval's (``--model``), else the env's default for the role
    (``Env.default_model``), else ``DEFAULT_MODEL``."""
    model = agent.model or config.model or env.default_model(role) or DEFAULT_MODEL
    sampling = agent.sampling.over(config.sampling)
    if is_llamacpp(model):
        defaults = served_sampling()
        named = {f: defaults.pop(f) for f in ("logprobs", "max_tokens", "temperature", "top_p")}
        served = Sampling(**named, extra=defaults)
        sampling = sampling.over(served)
    return attrs.evolve(
        agent,
        harness=agent.harness or env.default_harness(role),
        model=model,
        base_url=agent.base_url if agent.base_url is not None else config.base_url,
        api_key_var=agent.api_key_var or config.api_key_var,
        sampling=sampling,
    )


def server_key(config: EvalConfig, agent: AgentConfig) -> str | None:
    """Which model server the eval starts for this (resolved) role, if any: its
    llamacpp/ model, or ``MODEL_SERVER`` (``config.model_server``)."""
    if agent.base_url is not None:
        return None
    if is_llamacpp(agent.model):
        return agent.model
    if config.model_server is not None and not is_builtin(agent.model):
        return MODEL_SERVER
    return None


def _make_server(
    config: EvalConfig, role: str, agent: AgentConfig, key: str, chat_format: str | None
) -> ModelServer:
    if key == MODEL_SERVER:
        argv = parse_command(config.model_server or "", field="model_server")
        return ModelServer(argv, f"--model-server {argv[0]}", config.model_server_timeout_s)
    return llamacpp_server(
        key,
        args=config.model_server_args,
        timeout_s=config.model_server_timeout_s,
        field=f"env.{role}.model",
        chat_format=chat_format,
    )


def chat_formats(config: EvalConfig, env: Env, roles: dict[str, AgentConfig]) -> dict[str, Any]:
    """The chat format each llamacpp/ model is served with: ``--chat_format`` in
    ``model_server_args``, else ``TOOLS_FORMAT`` when a role of it takes tools (its
    harness is ``tools``) and its own template ignores them, else None (the GGUF's
    template). Raises ``ConfigError`` for a model whose template cannot carry tools
    given to a tools role, before any episode."""
    from taketurns._models.gguf import gguf_tokens

    asked = chat_format_in(config.model_server_args)
    formats: dict[str, Any] = {}
    for role, agent in roles.items():
        model = agent.model or ""
        if not is_llamacpp(model) or agent.base_url is not None:
            continue  # not a server this eval starts
        formats.setdefault(model, asked)
        tools = agent.harness == "tools" or env.default_harness(role) == "tools"
        if tools and asked is None and formats[model] is None:
            field = f"env.{role}.model"
            template = gguf_tokens(gguf_path(model, field=field)).chat_template
            formats[model] = tools_format(model, template, field=field)
    return formats


def _client_for(
    config: EvalConfig,
    role: str,
    agent: AgentConfig,
    server: ModelServer | None = None,
    chat_format: str | None = None,
) -> ModelClient:
    from taketurns._models.openai import OpenAIClient

    tokens = None
    if is_llamacpp(agent.model):
        from taketurns._models.gguf import gguf_tokens

        path = gguf_path(agent.model or "", field=f"env.{role}.model")
        tokens = gguf_tokens(path, chat_format)

    def client(base_url: str) -> OpenAIClient:
        return OpenAIClient(
            base_url,
            api_key_var=agent.api_key_var,
            timeout=config.request_timeout_s,
            retries=config.request_retries,
            backoff=config.request_backoff_s,
            concurrency=config.concurrency * 2,
            tokens=tokens,
            # llama-cpp-python's server takes only strings as system and assistant content
            text_parts="join" if tokens is not None else "keep",
        )

    if server is not None:
        return ServedModel(server, client)
    if agent.base_url is None:
        if not is_builtin(agent.model) and agent.model == config.model:
            raise ConfigError(
                f"model = {agent.model!r} (--model): an endpoint model needs its server's "
                "URL: --base-url URL (base_url in a config file), e.g. "
                "--base-url http://localhost:8000/v1; without one use builtin/<policy>"
            )
        if not is_builtin(agent.model):
            raise ConfigError(
                f"env.{role}.model = {agent.model!r}: an endpoint model needs a base URL "
                f"(--base-url or --env.{role}.base_url) or a server to start "
                "(--model-server CMD, or a llamacpp/ model); without one use builtin/<policy>"
            )
        return BuiltinModel.from_model_name(agent.model, field=f"env.{role}.model")
    return client(agent.base_url)


def _unset_key(config: EvalConfig, own: AgentConfig, agent: AgentConfig) -> str | None:
    """The warning for an API key variable the user named (``--api-key-var``, or the
    role's ``api_key_var``) that is not set: the requests go without a key."""
    named = own.api_key_var is not None or config.api_key_var != _DEFAULT_KEY_VAR
    var = agent.api_key_var
    if not named or not var or os.environ.get(var):
        return None
    return (
        f"warning: ${var} (the API key variable named) is not set: requests to "
        f"{agent.base_url} go without a key"
    )


_DEFAULT_KEY_VAR = attrs.fields(EvalConfig).api_key_var.default


async def preflight(
    config: EvalConfig,
    env: Env,
    *,
    say: Callable[[str], None] | None = None,
    owned: Collection[str] = (),
) -> None:
    """Call every distinct endpoint once with throwaway clients (their connections
    belong to this trio run), each check bounded by ``config.preflight_timeout_s``
    (retries included); ``say`` hears which endpoint is being checked; then the env's
    judges. Raises ``ConfigError`` naming the failing endpoint. Roles served by a
    model server the eval starts are checked once it is up (``_eval.servers``);
    roles whose model is ``owned`` (in-process clients, ``Plan``'s ``models``), never."""
    seen = set()
    limit = config.preflight_timeout_s
    for role, agent in env.roles.items():
        agent = resolve_role(config, env, role, agent)
        key = (agent.model, agent.base_url, agent.api_key_var)
        if agent.base_url is None or key in seen or agent.model in owned:
            continue  # the built-in model, or served by a server not started yet
        seen.add(key)
        model = agent.model or DEFAULT_MODEL
        if say is not None:
            say(f"checking {agent.base_url} (model {model}; up to {limit:g} s)")
            unset = _unset_key(config, env.roles[role], agent)
            if unset is not None:
                say(unset)
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
        judge.take_request_options(config)
        await judge.preflight()


class Plan:
    """Clients, harnesses and limiters per role, built (and validated, raising
    ``ConfigError``) before any episode starts; ``run_eval`` builds one if not given.
    ``models``: in-process clients the caller owns, by model name (a trainer's live
    policy, ``taketurns.train.LocalPolicy``): a role whose model is one of these
    names calls that client (no endpoint, no server, no preflight); ``aclose`` leaves
    them open."""

    def __init__(
        self, config: EvalConfig, env: Env, *, models: Mapping[str, ModelClient] | None = None
    ) -> None:
        self.env = env
        self.roles = {r: resolve_role(config, env, r, a) for r, a in env.roles.items()}
        _refuse_dropped_tools(env, self.roles)
        self.clients: dict[tuple[Any, ...], ModelClient] = {}  # one per distinct endpoint
        self.owned = dict(models or {})  # the caller's, by model name: never closed here
        self.services: dict[str, Any] = {}  # filled by the runner (interception server)
        self.servers: dict[str, ModelServer] = {}  # started by _eval.servers
        formats = chat_formats(config, env, self.roles)
        for judge in env.judges():  # an endpoint judge's requests follow the run's
            judge.take_request_options(config)
        shared = config.max_concurrent_calls
        shared_limiter = trio.CapacityLimiter(shared) if shared else None
        # one prototype agent per role; each episode binds its own copy
        self.agents: dict[str, Agent] = {}
        for role, agent in self.roles.items():
            if agent.model in self.owned:
                agent = self.roles[role] = attrs.evolve(agent, base_url=None)
            served = None if agent.model in self.owned else server_key(config, agent)
            if served is not None and served not in self.servers:
                chat_format = formats.get(agent.model or "")
                self.servers[served] = _make_server(config, role, agent, served, chat_format)
            key = (agent.model, agent.base_url, agent.api_key_var, served)
            if agent.model in self.owned:
                self.clients[key] = self.owned[agent.model]
            elif key not in self.clients:
                server = self.servers[served] if served is not None else None
                chat_format = formats.get(agent.model or "")
                self.clients[key] = _client_for(config, role, agent, server, chat_format)
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
        for role, built in self.agents.items():  # a missing program: before any episode
            lacking = built.harness.missing()
            if lacking is not None:
                raise ConfigError(f"env.{role}.harness = {built.harness_id!r}: {lacking}")

        if self.servers and config.backend != "local":
            raise ConfigError(
                f"backend = {config.backend!r}: a model server the eval starts "
                "(llamacpp/ models, --model-server) runs with --backend local; for "
                "workers, start the server yourself and pass --base-url"
            )

    def served(self, server: ModelServer) -> list[tuple[str, ServedModel]]:
        """The clients (and their model names) ``server`` serves."""
        return [
            (key[0], client)
            for key, client in self.clients.items()
            if isinstance(client, ServedModel) and client.server is server
        ]

    def make_agent(
        self, role: str, _config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        # rollouts differ by their episode's seed (info.seed), from which every model
        # call's seed derives (the built-in model's choices too)
        return self.agents[role].bind(info, on_close=on_close)

    def notes(self) -> list[str]:
        """What the model clients noted during the run (each once), in client order."""
        return [note for client in self.clients.values() for note in client.notes()]

    @property
    def needs_interception(self) -> bool:
        return bool(self._out_of_process())

    def _out_of_process(self) -> list[str]:
        """The roles whose harness runs the agent out of process (a ``ServedHarness``)."""
        return [r for r, a in self.agents.items() if _served(a.harness)]

    def _check_sandboxes(self) -> None:
        """Refuse (before any episode) a sandboxed out-of-process role where bubblewrap
        is missing, naming the package and the way out."""
        for role in self._out_of_process():
            if self.roles[role].sandbox == "bwrap" and bwrap_path() is None:
                raise ConfigError(missing_bwrap(f"env.{role}"))

    def sampling_note(self) -> str:
        """``config.toml``'s closing comment: the sampling fields each role's requests
        are sent (its own, the eval's, its model's defaults; the per-call seed aside),
        so that a run says which sampler produced it. A comment: resuming reads the
        config above it, which gives the same fields again."""
        lines = [
            "",
            "# Sent: each role's requests carry this sampling (the role's own, the eval's,",
            "# its model's defaults; a program harness may add fields). Every turn records",
            "# what it was sent: episodes.jsonl, traces[].turns[].sampling.",
        ]
        for role, agent in self.roles.items():
            fields = {k: v for k, v in agent.sampling.request_fields().items() if k != "seed"}
            shown = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in fields.items())
            lines.append(f"# env.{role} ({agent.model}): {shown or 'the endpoint defaults'}")
        return "\n".join(lines) + "\n"

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
            owned = {id(c) for c in self.owned.values()}
            for client in self.clients.values():
                if id(client) not in owned:
                    await client.aclose()
            for harness in {id(a.harness): a.harness for a in self.agents.values()}.values():
                await harness.shutdown()


def _refuse_dropped_tools(env: Env, roles: dict[str, AgentConfig]) -> None:
    """A role the env gives tools (its default harness is ``tools``) set to the
    ``null`` harness, which calls none, is refused: tools are never dropped silently."""
    for role, agent in roles.items():
        if agent.harness == "null" and env.default_harness(role) == "tools":
            raise ConfigError(
                f"env.{role}.harness = 'null': this env offers {role} tools, which the null "
                f"harness never calls; use --env.{role}.harness=tools (the default here) or "
                "another harness that takes tools"
            )


def env_class(env_id: str, *, field: str = "env_id") -> type[Env]:
    """The env class ``env_id`` names: a registered id or a reference
    (``./file.py:Class``, ``package.module:Class``). Raises ``ConfigError`` naming
    ``field`` for an unknown id, a bad reference, or a class that is not an ``Env``."""
    cls = envs.get(env_id, field=field)
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise ConfigError(
            f"{field} = {env_id!r}: {cls!r} is not an Env subclass (nor a Taskset, which "
            "runs under single-agent); see docs/writing-envs.md"
        )
    return cls


def make_env(config: EvalConfig) -> Env:
    """The eval's env, built from ``config.env`` and given the run's seed
    (``env.seed``); ``ConfigError`` as ``env_class``."""
    return seeded(env_class(config.env_id)(config.env), config)


def seeded(env: Env, config: EvalConfig) -> Env:
    """``env`` given the run's seed (``env.seed = config.seed``), returned."""
    env.seed = config.seed
    return env
