"""taketurns' engine: the exchange on trio. Everything public is re-exported here."""

from engine.agent import Agent, Agents
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
from engine.trace import AgentStamp, EpisodeInfo, ErrorInfo, Trace, Turn, Usage

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentStamp",
    "Agents",
    "AssistantMessage",
    "BuiltinModel",
    "ChatSession",
    "ConfigError",
    "Env",
    "EnvConfig",
    "Episode",
    "EpisodeInfo",
    "ErrorInfo",
    "EvalConfig",
    "Harness",
    "HarnessError",
    "ImagePart",
    "Limits",
    "Message",
    "ModelClient",
    "ModelEndpointError",
    "ModelRequest",
    "ModelResponse",
    "OptionError",
    "Prompt",
    "Reply",
    "Rollout",
    "RolloutStopped",
    "Rubric",
    "Sampling",
    "ScoringError",
    "SessionClosed",
    "SessionError",
    "SessionOver",
    "SessionState",
    "SystemMessage",
    "Task",
    "TaketurnsError",
    "TextPart",
    "Timeouts",
    "ToolCall",
    "ToolMessage",
    "Trace",
    "Turn",
    "TurnError",
    "Usage",
    "UserMessage",
    "at_least",
    "can_chat",
    "envs",
    "harnesses",
    "metric",
    "register_env",
    "reward",
    "roles_of",
    "run_episode",
    "stop",
    "tasksets",
    "text_of",
]
