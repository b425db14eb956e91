"""``Trace``: one agent's rollout, recorded as it happens.

A trace is created when a session opens (stamped with the agent and the episode),
grows one ``Turn`` per model call, and is scored exactly once when the session closes.
"""

from __future__ import annotations

from typing import Any

import attrs

from taketurns._exchange.task import Task
from taketurns._exchange.tracebacks import format_traceback, where
from taketurns._models.messages import AssistantMessage, Message, last_text
from taketurns._models.model import Usage

__all__ = [
    "AgentStamp",
    "EpisodeInfo",
    "ErrorInfo",
    "JudgeCall",
    "Timing",
    "Trace",
    "Turn",
    "Usage",
]


@attrs.frozen
class AgentStamp:
    """Who produced a trace."""

    name: str
    model: str
    harness: str
    trainable: bool = True


@attrs.frozen
class EpisodeInfo:
    """The episode a trace belongs to, shared by every trace of that episode."""

    id: str
    env: str
    task_idx: int
    rollout: int = 0


@attrs.frozen
class ErrorInfo:
    """An error recorded as data: ``kind`` is one of harness, model, scoring, env,
    timeout, cancelled; ``type`` the exception class name; ``where`` the
    ``file:line in function`` to look at first (the innermost frame in the user's
    code, ``_exchange.tracebacks``) and ``traceback`` the exception as Python prints
    it, capped in size (both empty for an error that was not an exception, and in
    records written before they existed)."""

    kind: str
    message: str
    type: str = ""
    # not compared: two records of one error are equal wherever Python put the frames
    where: str = attrs.field(default="", eq=False)
    traceback: str = attrs.field(default="", eq=False)

    @classmethod
    def of(cls, kind: str, exc: BaseException) -> ErrorInfo:
        """The record of ``exc``, its traceback (and its causes') included."""
        return cls(
            kind,
            str(exc) or type(exc).__name__,
            type(exc).__name__,
            where(exc),
            format_traceback(exc),
        )


@attrs.frozen
class Turn:
    """One model call: exactly what was sent and what came back."""

    index: int
    request: tuple[Message, ...]
    response: AssistantMessage | None
    usage: Usage = Usage()  # noqa: RUF009 - Usage is frozen: one shared default is safe
    finish_reason: str | None = None
    latency_s: float = 0.0
    error: str | None = None
    tools: tuple[str, ...] = ()
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    # the model name the server answered with, or the trainer's version tag
    policy_version: str | None = None


@attrs.frozen
class JudgeCall:
    """One judge's verdict on a trace, recorded apart from the agent's turns: its
    usage is not the agent's (no limit counts it) and it is not trainable data.
    ``score`` is the parsed verdict (None when the call failed or did not parse,
    ``error`` says why); ``cached`` when an identical judgement of this run was
    reused (no call made: empty ``request``)."""

    judge: str
    model: str
    request: tuple[Message, ...] = ()
    response: str | None = None
    score: float | None = None
    usage: Usage = Usage()  # noqa: RUF009 - Usage is frozen: one shared default is safe
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None


@attrs.define
class Timing:
    """Seconds. ``agent_s`` counts only time spent inside this rollout's own segments."""

    started_at: float = 0.0
    ended_at: float = 0.0
    agent_s: float = 0.0
    scoring_s: float = 0.0


@attrs.define(eq=False)
class Trace:
    """One agent's rollout. ``task`` is the view the agent saw: with a masked prompt
    its ``prompt`` is None and ``masked`` is True (``task.idx`` keeps provenance)."""

    agent: AgentStamp
    episode: EpisodeInfo
    task: Task
    masked: bool = False
    turns: list[Turn] = attrs.field(factory=list)
    messages: list[Message] = attrs.field(factory=list)
    rewards: dict[str, float] = attrs.field(factory=dict)
    reward: float = 0.0
    metrics: dict[str, float] = attrs.field(factory=dict)
    stop_condition: str | None = None
    errors: list[ErrorInfo] = attrs.field(factory=list)
    info: dict[str, Any] = attrs.field(factory=dict)
    timing: Timing = attrs.field(factory=Timing)
    usage: Usage = Usage()  # noqa: RUF009 - Usage is frozen: one shared default is safe
    # verdicts of LLM judges on this trace (``_exchange.judge``), not the agent's turns
    judge_calls: list[JudgeCall] = attrs.field(factory=list)
    # live objects for the rubric (a task's store, say); never written to disk
    state: dict[str, Any] = attrs.field(factory=dict, metadata={"persist": False})

    @property
    def last_text(self) -> str:
        """The text of the rollout's last assistant message with content."""
        return last_text(self.messages)
