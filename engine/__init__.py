"""taketurns' engine: the exchange on trio. Everything public is re-exported here."""

import typing

from engine.agent import Agent, Agents
from engine.aio import AsyncioCancelled, run_asyncio
from engine.builtin import BuiltinModel
from engine.config import (
    AgentConfig,
    EnvConfig,
    EvalConfig,
    Limits,
    OptionError,
    Sampling,
    Timeouts,
    at_least,
    int_between,
)
from engine.env import Env, register_env, roles_of
from engine.episode import Episode, run_episode
from engine.errors import (
    ConfigError,
    HarnessError,
    ModelEndpointError,
    RolloutStopped,
    ScoringError,
    SessionClosed,
    SessionError,
    SessionOver,
    TaketurnsError,
    TurnError,
)
from engine.harness import Harness, Prompt, Rollout, can_chat
from engine.messages import (
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
from engine.model import ModelClient, ModelRequest, ModelResponse
from engine.registry import envs, harnesses, tasksets
from engine.rubric import Rubric, metric, reward, stop
from engine.session import ChatSession, Reply, SessionState
from engine.task import Task
from engine.taskset import (
    Resources,
    Taskset,
    TasksetConfig,
    TasksetEnv,
    open_taskset,
    register_taskset,
)
from engine.tools import Tool, as_tools, tool_schema
from engine.trace import AgentStamp, EpisodeInfo, ErrorInfo, Trace, Turn, Usage
from engine.wire import from_wire, messages_from_wire, messages_to_wire, to_wire

if typing.TYPE_CHECKING:  # the lazy names below, for type checkers
    from engine.client import OpenAIClient
    from engine.interception import (
        Endpoint,
        InterceptionServer,
        ServedHarness,
        open_interception_server,
    )

# Names whose modules pull in the HTTP stack (hypercorn, quart, httpx2): imported on
# first use so `import engine` stays light for in-process work.
_LAZY = {
    "Endpoint": "engine.interception",
    "InterceptionServer": "engine.interception",
    "OpenAIClient": "engine.client",
    "ServedHarness": "engine.interception",
    "open_interception_server": "engine.interception",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Agent",
    "AgentConfig",
    "AgentStamp",
    "Agents",
    "AssistantMessage",
    "AsyncioCancelled",
    "BuiltinModel",
    "ChatSession",
    "ConfigError",
    "Endpoint",
    "Env",
    "EnvConfig",
    "Episode",
    "EpisodeInfo",
    "ErrorInfo",
    "EvalConfig",
    "Harness",
    "HarnessError",
    "ImagePart",
    "InterceptionServer",
    "Limits",
    "Message",
    "ModelClient",
    "ModelEndpointError",
    "ModelRequest",
    "ModelResponse",
    "OpenAIClient",
    "OptionError",
    "Prompt",
    "Reply",
    "Resources",
    "Rollout",
    "RolloutStopped",
    "Rubric",
    "Sampling",
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
    "ToolCall",
    "ToolMessage",
    "Trace",
    "Turn",
    "TurnError",
    "Usage",
    "UserMessage",
    "as_tools",
    "at_least",
    "can_chat",
    "envs",
    "from_wire",
    "harnesses",
    "int_between",
    "messages_from_wire",
    "messages_to_wire",
    "metric",
    "open_interception_server",
    "open_taskset",
    "register_env",
    "register_taskset",
    "reward",
    "roles_of",
    "run_asyncio",
    "run_episode",
    "stop",
    "tasksets",
    "text_of",
    "to_wire",
    "tool_schema",
]
