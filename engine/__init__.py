"""taketurns: a trio-based structured-concurrency engine for multi-turn LLM rollouts.

Everything public is re-exported here (``__all__``); the subpackages are private:

- ``_exchange``  the exchange: Agent, ChatSession, harness (+ null), model boundary,
                 rubric, tools, task, trace
- ``_models``    what a model reads and writes (messages, their OpenAI wire shape) and
                 the clients: the built-in model, any OpenAI-compatible endpoint
- ``_http``      the HTTP face: wire dialects, the interception server, ``serve``
- ``_procs``     the process owner, its supervisor and the rollout sandbox (bwrap)
- ``_config``    options (attrs), TOML + dotted overrides, the id registries
- ``_eval``      how a task becomes an episode: Env, Taskset, episodes, the plan, play
- ``_output``    episode records, the run directory, summary, progress
- ``_backends``  worker processes and Ray
- ``_report``    the self-contained HTML report
- ``_train``     for RL trainers: token-level samples, group advantages, streaming
                 rollouts, dataset export
- ``_cli``       the ``taketurns`` command

Public submodules: ``taketurns.testing`` (the built-in model and a scripted model for
tests), ``taketurns.report`` (what an env draws its own part of the report with),
``taketurns.envs`` and ``taketurns.harnesses`` (built-in envs and harnesses,
written against this public API exactly as a plugin would be).
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
    at_least,
    int_between,
    one_of,
)
from taketurns._config.registry import dialects as dialect_registry
from taketurns._config.registry import envs as env_registry
from taketurns._config.registry import harnesses as harness_registry
from taketurns._config.registry import tasksets as taskset_registry
from taketurns._errors import (
    AsyncioCancelled,
    BadRequest,
    ConfigError,
    HarnessError,
    Interrupted,
    ModelEndpointError,
    ModelServerError,
    OptionError,
    OutputError,
    ReplayDiverged,
    RolloutStopped,
    ScoringError,
    SessionClosed,
    SessionError,
    SessionOver,
    TaketurnsError,
    ToolArgumentError,
    TurnError,
    WorkerDied,
    WorkerError,
    WorkerLost,
)
from taketurns._eval.aio import run_asyncio
from taketurns._eval.env import Env, register_env, roles_of
from taketurns._eval.episode import Episode, run_episode
from taketurns._eval.taskset import (
    Resources,
    Taskset,
    TasksetConfig,
    TasksetEnv,
    open_taskset,
    register_taskset,
)
from taketurns._exchange.agent import Agent, Agents
from taketurns._exchange.harness import Harness, Prompt, Rollout, can_chat
from taketurns._exchange.judge import Judge, JudgeConfig, parse_verdict
from taketurns._exchange.mcp_servers import McpConnection, McpServer, McpTool, open_mcp_servers
from taketurns._exchange.null import NullHarness
from taketurns._exchange.outcome import is_failure
from taketurns._exchange.rubric import Rubric, metric, reward, stop
from taketurns._exchange.session import ChatSession, Reply, SessionState
from taketurns._exchange.task import Task
from taketurns._exchange.tools import Tool, as_tools, tool_schema
from taketurns._exchange.trace import (
    AgentStamp,
    EpisodeInfo,
    ErrorInfo,
    JudgeCall,
    Trace,
    Turn,
    TurnReward,
    Usage,
)
from taketurns._models.builtin import BuiltinModel
from taketurns._models.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    text_of,
)
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse
from taketurns._models.wire import from_wire, messages_from_wire, messages_to_wire, to_wire
from taketurns._procs.owner import Captured, OwnedProcess
from taketurns._procs.owner import run as run_owned
from taketurns._procs.owner import start as start_owned
from taketurns._procs.sandbox import Sandbox
from taketurns._train.advantages import TraceAdvantage, group_advantages
from taketurns._train.groups import Group, make_group
from taketurns._train.rollouts import GroupStream, RolloutSource, open_rollouts
from taketurns._train.samples import (
    Sample,
    TurnTokens,
    episode_samples,
    trace_samples,
    turn_tokens,
)

if typing.TYPE_CHECKING:  # the lazy names below, for type checkers
    from taketurns._config.settings import load_eval_config
    from taketurns._http.dialect import Dialect
    from taketurns._http.interception import (
        Endpoint,
        EndpointState,
        InterceptionServer,
        open_interception_server,
    )
    from taketurns._http.served import ServedHarness
    from taketurns._models.openai import OpenAIClient
    from taketurns._output.records import read_episodes
    from taketurns._output.rundir import RunDir
    from taketurns._replay.model import ReplayDivergence
    from taketurns._replay.run import ReplayResult, replay_episode
    from taketurns._runner import EvalRun, run_eval
    from taketurns._train.export import export_samples

# Names whose modules pull in the HTTP stack (hypercorn, quart, httpx2) or the eval
# runner (rich, the backends): imported on first use, so `import taketurns` stays light
# for in-process work.
_LAZY = {
    "EvalRun": "taketurns._runner",
    "RunDir": "taketurns._output.rundir",
    "load_eval_config": "taketurns._config.settings",
    "read_episodes": "taketurns._output.records",
    "replay_episode": "taketurns._replay.run",
    "ReplayDivergence": "taketurns._replay.model",
    "ReplayResult": "taketurns._replay.run",
    "export_samples": "taketurns._train.export",
    "run_eval": "taketurns._runner",
    "Dialect": "taketurns._http.dialect",
    "Endpoint": "taketurns._http.interception",
    "EndpointState": "taketurns._http.interception",
    "InterceptionServer": "taketurns._http.interception",
    "OpenAIClient": "taketurns._models.openai",
    "ServedHarness": "taketurns._http.served",
    "open_interception_server": "taketurns._http.interception",
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
    "AgentStamp",
    "Agents",
    "AssistantMessage",
    "AsyncioCancelled",
    "BadRequest",
    "BuiltinModel",
    "Captured",
    "ChatSession",
    "ConfigError",
    "Dialect",
    "Endpoint",
    "EndpointState",
    "Env",
    "EnvConfig",
    "Episode",
    "EpisodeInfo",
    "ErrorInfo",
    "EvalConfig",
    "EvalRun",
    "Group",
    "GroupStream",
    "Harness",
    "HarnessError",
    "ImagePart",
    "InterceptionServer",
    "Interrupted",
    "Judge",
    "JudgeCall",
    "JudgeConfig",
    "Limits",
    "McpConnection",
    "McpServer",
    "McpTool",
    "Message",
    "ModelClient",
    "ModelEndpointError",
    "ModelRequest",
    "ModelResponse",
    "ModelServerError",
    "NullHarness",
    "OpenAIClient",
    "OptionError",
    "OutputError",
    "OwnedProcess",
    "Prompt",
    "ReplayDiverged",
    "ReplayDivergence",
    "ReplayResult",
    "Reply",
    "Resources",
    "Rollout",
    "RolloutSource",
    "RolloutStopped",
    "Rubric",
    "RunDir",
    "Sample",
    "Sampling",
    "Sandbox",
    "ScoringError",
    "ServedHarness",
    "SessionClosed",
    "SessionError",
    "SessionOver",
    "SessionState",
    "SystemMessage",
    "TaketurnsError",
    "Task",
    "Taskset",
    "TasksetConfig",
    "TasksetEnv",
    "TextPart",
    "Timeouts",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolMessage",
    "Trace",
    "TraceAdvantage",
    "Turn",
    "TurnError",
    "TurnReward",
    "TurnTokens",
    "Usage",
    "UserMessage",
    "WorkerDied",
    "WorkerError",
    "WorkerLost",
    "as_tools",
    "at_least",
    "can_chat",
    "dialect_registry",
    "env_registry",
    "episode_samples",
    "export_samples",
    "from_wire",
    "group_advantages",
    "harness_registry",
    "int_between",
    "is_failure",
    "load_eval_config",
    "make_group",
    "messages_from_wire",
    "messages_to_wire",
    "metric",
    "one_of",
    "open_interception_server",
    "open_mcp_servers",
    "open_rollouts",
    "open_taskset",
    "parse_verdict",
    "read_episodes",
    "register_env",
    "register_taskset",
    "replay_episode",
    "reward",
    "roles_of",
    "run_asyncio",
    "run_episode",
    "run_eval",
    "run_owned",
    "start_owned",
    "stop",
    "taskset_registry",
    "text_of",
    "to_wire",
    "tool_schema",
    "trace_samples",
    "turn_tokens",
]
