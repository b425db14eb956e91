"""``openenv``: one agent plays an OpenEnv environment server (the ``openenv`` extra).

OpenEnv: https://pypi.org/project/openenv-core/.

The server is ``url`` (an existing one), or, when ``url`` is unset, the ASGI app
``app`` (``MODULE:ATTR``; default the small number-guessing game the project ships,
``taketurns.envs.openenv_game``) served on loopback for the eval: the env's ``setup``
starts it and waits until it is healthy, ``finalize`` stops it. Each task is one
``reset`` over one WebSocket session: task *i* resets with ``resets[i % len(resets)]``
when that list is given, else with ``{"seed": seed + i}``.

The observation and the action's JSON schema (from ``/schema``) go to the model; each
reply is read as an action (JSON, fenced JSON, or the bare value for a one-field
action: ``taketurns.envs.openenv_actions``) and stepped; the next observation (with
the step's reward) is the next user turn; ``done`` ends the exchange, as do
``max_steps`` steps. A reply that is empty, unparsable or refused by the server as
invalid is never stepped: the model is re-asked with the current observation and what
was wrong, up to ``invalid_retries`` times per step, then the exchange ends
(``gave_up``). Reward ``total_reward``: the steps' rewards summed; metrics ``steps``,
``done``, ``invalid_replies``.

The server failing to start, the connection dropping, an answer later than
``step_timeout_s`` and a failed reset fail the episode (``OpenEnvError``), as does the
player's run failing (model endpoint or harness): never a score.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import attrs

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    ConfigError,
    Env,
    EnvConfig,
    OptionError,
    Task,
    Trace,
    metric,
    reward,
)
from taketurns.env import at_least, int_between
from taketurns.envs.openenv_actions import ActionSchema, InvalidReply, parse_action
from taketurns.envs.openenv_client import (
    ActionRefused,
    OpenEnvError,
    Result,
    ServerProcess,
    fetch_schema,
    open_env_session,
)

__all__ = ["DEFAULT_APP", "OpenEnv", "OpenEnvConfig", "OpenEnvError"]

DEFAULT_APP = "taketurns.envs.openenv_game:app"
FAILURES = ("model_error", "harness_error")  # the run failed: not the model's play
INTRO = (
    "You act in an environment. Each turn you see its latest observation; "
    "reply with your next action."
)


def _resets(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise OptionError(attribute.name, value, "a list of tables of reset arguments")


def _url(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not str(value).startswith(("http://", "https://")):
        raise OptionError(attribute.name, value, "an http:// or https:// base URL")


def _app(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    module, _, attr = str(value).partition(":")
    if not module or not attr:
        raise OptionError(attribute.name, value, "an ASGI app as MODULE:ATTR")


@attrs.define
class OpenEnvConfig(EnvConfig):
    """``player`` acts; the server is ``url``, else ``app`` served on loopback."""

    player: AgentConfig = attrs.field(factory=AgentConfig)
    url: str | None = attrs.field(default=None, validator=_url)
    app: str = attrs.field(default=DEFAULT_APP, validator=_app)
    resets: list[Any] = attrs.field(factory=list, validator=_resets)
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0)),
        metadata={"unset": "the run's --seed"},
    )
    max_steps: int = attrs.field(default=50, validator=int_between(1))
    invalid_retries: int = attrs.field(default=2, validator=int_between(0))
    start_timeout_s: float = attrs.field(default=120.0, validator=at_least(0, exclusive=True))
    step_timeout_s: float = attrs.field(default=60.0, validator=at_least(0, exclusive=True))


def _show(value: Any) -> str:
    # indented: the lists of a schema span lines, so only the env's own bracketed
    # options read as options on one line
    return json.dumps(value, indent=2, ensure_ascii=False)


class OpenEnv(Env):
    id = "openenv"
    config_class = OpenEnvConfig
    config: OpenEnvConfig

    def __init__(self, config: OpenEnvConfig | None = None) -> None:
        super().__init__(config)
        if self.config.url is None and importlib.util.find_spec("openenv") is None:
            raise ConfigError(
                "env.app: serving an OpenEnv app needs the openenv extra (openenv-core); "
                "install it with: pip install 'taketurns[openenv]', or set env.url"
            )
        self._server: ServerProcess | None = None
        self._url: str | None = self.config.url
        self._schema: ActionSchema | None = None
        self._broken: OpenEnvError | None = None  # why setup could not ready the server

    async def setup(self) -> None:
        """Start the loopback server (unless ``url`` names one) and read the action
        schema. A failure is kept and fails every episode, each with the reason."""
        try:
            if self._url is None:
                self._server = ServerProcess(self.config.app)
                self._url = await self._server.start(timeout=self.config.start_timeout_s)
            await self._ready()
        except OpenEnvError as exc:
            self._broken = exc

    async def finalize(self) -> None:
        """Stop the server ``setup`` started (if any)."""
        if self._server is not None:
            await self._server.stop()

    async def _ready(self) -> tuple[str, ActionSchema]:
        if self._broken is not None:
            raise OpenEnvError(str(self._broken))
        if self._url is None:
            raise OpenEnvError(
                "no OpenEnv server: set env.url, or let the eval run the env's setup() "
                "(it serves env.app on loopback)"
            )
        if self._schema is None:
            schema = await fetch_schema(self._url, timeout=self.config.step_timeout_s)
            self._schema = ActionSchema(schema)
        return self._url, self._schema

    def tasks(self, num_tasks: int) -> list[Task]:
        resets = self.config.resets
        base = self.seed_of(self.config.seed)
        tasks = []
        for i in range(num_tasks):
            args = dict(resets[i % len(resets)]) if resets else {"seed": base + i}
            tasks.append(Task(idx=i, name=f"openenv-{i}", info={"reset": args}))
        return tasks

    async def run(self, task: Task, agents: Agents) -> None:
        url, schema = await self._ready()
        async with agents.player.chat(task) as session:
            info = session.trace.info
            info.update(reset=task.info["reset"], steps=0, done=False, rewards=[])
            info.update(invalid_replies=0, gave_up=False)
            async with open_env_session(url, timeout=self.config.step_timeout_s) as env:
                result = await env.reset(dict(task.info["reset"]))
                await self._play(session, env, result, schema)

    async def _play(
        self, session: ChatSession, env: Any, result: Result, schema: ActionSchema
    ) -> None:
        info = session.trace.info
        message = self._first(result, schema)
        left = self.config.invalid_retries
        while not result.done and info["steps"] < self.config.max_steps:
            reply = await session.turn(message)
            if reply.stopped:
                if reply.stop_condition in FAILURES:
                    raise OpenEnvError(
                        f"the player's run failed ({reply.stop_condition}); see its trace"
                    )
                return
            try:
                result = await env.step(parse_action(reply.text, schema))
            except (InvalidReply, ActionRefused) as exc:
                info["invalid_replies"] += 1
                if left == 0:
                    info["gave_up"] = True
                    return
                message = self._again(str(exc), result, schema, left)
                left -= 1
                continue
            left = self.config.invalid_retries
            info["steps"] += 1
            info["rewards"].append(result.reward)
            info["done"] = result.done
            message = self._next(result)

    def _first(self, result: Result, schema: ActionSchema) -> str:
        single = schema.single_field
        bare = f' (or just the value of "{single}")' if single else ""
        return (
            f"{INTRO}\n\nObservation:\n{_show(result.observation)}\n\n"
            f"Reply with one action: a JSON object{bare} fitting this JSON schema:\n"
            f"{_show(json.loads(schema.describe()))}"
        )

    def _next(self, result: Result) -> str:
        return f"Reward: {result.reward:g}\n\nObservation:\n{_show(result.observation)}"

    def _again(self, problem: str, result: Result, schema: ActionSchema, left: int) -> str:
        tries = "1 try" if left == 1 else f"{left} tries"
        return (
            f"That reply was not stepped: {problem} ({tries} left). Reply with one action "
            f"fitting the schema.\n\nObservation:\n{_show(result.observation)}"
        )

    @reward
    def total_reward(self, task: Task, trace: Trace) -> float:
        """The steps' rewards, summed."""
        return float(sum(trace.info.get("rewards", ())))

    @metric
    def steps(self, task: Task, trace: Trace) -> float:
        """How many actions were stepped."""
        return float(trace.info.get("steps", 0))

    @metric
    def done(self, task: Task, trace: Trace) -> float:
        """1.0 when the environment said the episode is done."""
        return 1.0 if trace.info.get("done") else 0.0

    @metric
    def invalid_replies(self, task: Task, trace: Trace) -> float:
        """Replies that were not stepped (empty, unparsable or refused)."""
        return float(trace.info.get("invalid_replies", 0))
