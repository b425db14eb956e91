"""``Trace``: one agent's rollout, recorded as it happens.

A trace is created when a session opens (stamped with the agent and the episode),
grows one ``Turn`` per model call, and is scored exactly once when the session closes.

Per-turn rewards: an env may pay a turn as it happens with
``trace.record_turn_reward(turn_index, value, name=...)`` (a game round, a step of a
task). They are kept in ``trace.turn_rewards`` (written to ``episodes.jsonl``, carried
per turn into training samples and exports) and are **never summed into
``trace.reward`` by themselves**: the trace reward stays the weighted sum of the
rubric's ``@reward`` functions. An env that wants them in it says so with a reward
that returns ``trace.turn_reward_total(name)``; one that does not (the per-turn
values are shaping or diagnostics only) leaves them out of its rubric.
"""

from __future__ import annotations

import math
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
    "TurnReward",
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
    """The episode a trace belongs to, shared by every trace of that episode.
    ``seed``: the episode's seed (``_exchange.seeds.episode_seed``), from which its
    agents' model-call seeds derive."""

    id: str
    env: str
    task_idx: int
    rollout: int = 0
    seed: int = 0


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
    """One model call: exactly what was sent and what came back. ``seed``: the
    ``seed`` request field the call was sent with (None: none was sent, e.g. the
    endpoint refuses the field). ``sampling``: the other sampling fields the request
    carried (temperature, top_p, max_tokens, logprobs, ...; None in records written
    before it was kept). ``finish_reason``: the endpoint's (``stop``, ``length``:
    cut at ``max_tokens``, ``tool_calls``, ...). ``stop_token``: whether the token
    that ended the reply is the last of ``token_ids`` (``sampled``), was sampled but
    not returned by the server (``dropped``: llama.cpp's), or None (no stop token
    ended it, or the server does not say). ``retokenized``: the completion's tokens
    as the next prompt would re-tokenize it, kept only where that differs from
    ``token_ids`` (checked where the client knows the tokenizer). ``token_gap``: what
    the turn's token data lacks that a trainer would expect and why, where the client
    knows (a tool call the server reports no token ids for, logprobs left out because
    the server sampled under a grammar it does not report); None: nothing known
    missing."""

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
    seed: int | None = None
    sampling: dict[str, Any] | None = None
    stop_token: str | None = None
    retokenized: list[int] | None = None
    token_gap: str | None = None


@attrs.frozen
class TurnReward:
    """A reward an env paid on one turn: ``turn`` is the ``Turn.index`` it pays,
    ``name`` what it is for (several names may pay one turn)."""

    turn: int
    value: float
    name: str = "turn"


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
    # rewards the env paid on single turns, in the order recorded (module docstring)
    turn_rewards: list[TurnReward] = attrs.field(factory=list)
    # live objects for the rubric (a task's store, say); never written to disk
    state: dict[str, Any] = attrs.field(factory=dict, metadata={"persist": False})

    @property
    def last_text(self) -> str:
        """The text of the rollout's last assistant message with content."""
        return last_text(self.messages)

    def record_turn_reward(self, turn_index: int, value: float, *, name: str = "turn") -> None:
        """Pay ``value`` on the turn whose ``index`` is ``turn_index`` (the model call
        that earned it, e.g. ``trace.turns[-1].index`` after a ``turn()``). It is not
        added to ``reward`` (module docstring). Raises ``ValueError`` for a turn this
        trace does not have or a value that is not a finite number."""
        if not any(t.index == turn_index for t in self.turns):
            raise ValueError(
                f"record_turn_reward: turn_index {turn_index} is not a turn of this trace "
                f"(it has {len(self.turns)}); pass the index of a recorded turn, "
                "e.g. trace.turns[-1].index after turn()"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"record_turn_reward: value {value!r} is not a number")
        if not math.isfinite(value):
            raise ValueError(f"record_turn_reward: value {value!r} must be finite")
        self.turn_rewards.append(TurnReward(turn_index, float(value), name))

    def turn_reward_total(self, name: str | None = None) -> float:
        """The sum of the per-turn rewards named ``name`` (all of them when None): what
        an env's ``@reward`` returns to count them in ``reward``."""
        return sum(r.value for r in self.turn_rewards if name is None or r.name == name)
