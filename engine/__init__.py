"""taketurns: a trio-based structured-concurrency engine for multi-turn LLM rollouts.

The package in tiers. ``taketurns`` itself holds what an env author and an eval user
write with (``__all__``): the nouns (``Agent``, ``Task``, ``Env``, ``Trace``, ...), the
decorators, ``run_eval`` and ``open_rollouts``, and the errors one catches. The
public modules below it:

- ``taketurns.harness``  what a harness (or env, or taskset) author needs beyond that:
                         ``Rollout``, the model contract, messages on the wire, trace
                         records, tools and MCP, processes and the sandbox, registries
- ``taketurns.train``    for RL trainers: samples, groups, advantages, export
- ``taketurns.http``     the wire dialects, the interception server, ``serve``
- ``taketurns.testing``  test doubles (the built-in model, a scripted model) and
                         ``run_episode``
- ``taketurns.errors``   the whole error tree
- ``taketurns.report``   what an env draws its own part of the report with
- ``taketurns.envs``, ``taketurns.harnesses``  the built-in envs and harnesses, written
                         against these public modules exactly as a plugin would be

Everything else is private, one subpackage per concept: ``_exchange`` (the exchange:
Agent, ChatSession, harness, model boundary, rubric, tools, task, trace), ``_models``
(messages, their wire shape, the model clients), ``_http`` (the HTTP face), ``_procs``
(process owner, sandbox), ``_config`` (options, TOML, registries), ``_eval`` (Env,
Taskset, episodes, plan, play), ``_output`` (records, run directory, summary,
progress), ``_backends`` (worker processes, Ray), ``_report`` (the HTML report),
``_train`` (trainer support), ``_cli`` (the ``taketurns`` command).
"""

# first: a Ctrl-C while the ``taketurns`` command imports the package is one line
from taketurns import _startup  # noqa: F401, I001  (before every other import)

import typing

from taketurns._config.options import (
    AgentConfig,
    EnvConfig,
    EvalConfig,
    Limits,
    Sampling,
    Timeouts,
)
from taketurns._errors import (
    ConfigError,
    HarnessError,
    Interrupted,
    ModelEndpointError,
    OptionError,
    SessionClosed,
    SessionOver,
    TaketurnsError,
    TurnError,
)
from taketurns._eval.env import Env, register_env
from taketurns._eval.episode import Episode
from taketurns._eval.taskset import (
    Resources,
    Taskset,
    TasksetConfig,
    TasksetEnv,
    register_taskset,
)
from taketurns._exchange.agent import Agent, Agents
from taketurns._exchange.judge import Judge, JudgeConfig
from taketurns._exchange.outcome import is_failure
from taketurns._exchange.rubric import Rubric, metric, reward, stop
from taketurns._exchange.session import ChatSession, Reply
from taketurns._exchange.task import Task
from taketurns._exchange.tools import Tool
from taketurns._exchange.trace import Trace
from taketurns._models.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

if typing.TYPE_CHECKING:  # the lazy names below, for type checkers
    from taketurns._config.settings import load_eval_config
    from taketurns._output.records import read_episodes
    from taketurns._output.rundir import RunDir
    from taketurns._runner import EvalRun, run_eval
    from taketurns._train.rollouts import open_rollouts

# Names whose modules pull in the eval runner (rich, the backends, the HTTP stack) or
# the eval's plan and model clients (``open_rollouts``): imported on first use, so
# `import taketurns` stays light for in-process work.
_LAZY = {
    "EvalRun": "taketurns._runner",
    "RunDir": "taketurns._output.rundir",
    "load_eval_config": "taketurns._config.settings",
    "open_rollouts": "taketurns._train.rollouts",
    "read_episodes": "taketurns._output.records",
    "run_eval": "taketurns._runner",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taketurns' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Agent",
    "AgentConfig",
    "Agents",
    "AssistantMessage",
    "ChatSession",
    "ConfigError",
    "Env",
    "EnvConfig",
    "Episode",
    "EvalConfig",
    "EvalRun",
    "HarnessError",
    "Interrupted",
    "Judge",
    "JudgeConfig",
    "Limits",
    "Message",
    "ModelEndpointError",
    "OptionError",
    "Reply",
    "Resources",
    "Rubric",
    "RunDir",
    "Sampling",
    "SessionClosed",
    "SessionOver",
    "SystemMessage",
    "TaketurnsError",
    "Task",
    "Taskset",
    "TasksetConfig",
    "TasksetEnv",
    "Timeouts",
    "Tool",
    "ToolMessage",
    "Trace",
    "TurnError",
    "UserMessage",
    "is_failure",
    "load_eval_config",
    "metric",
    "open_rollouts",
    "read_episodes",
    "register_env",
    "register_taskset",
    "reward",
    "run_eval",
    "stop",
]
