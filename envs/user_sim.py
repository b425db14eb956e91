"""``user-sim``: an assistant talks with a modeled user over any taskset.

The task's prompt is the user's *scenario*. The modeled user (``user``) is an agent
whose system prompt is the ``persona`` template with ``{scenario}`` and ``{done}``
filled in; it never sees anything else of the task. The assistant (``assistant``)
chats the same task with its prompt masked (the scenario never reaches its wire), its
``system_prompt`` and the taskset's per-rollout tools and state. The env relays::

    greeting -> user -> assistant -> user -> assistant -> ...

The greeting opens the user's side only. The conversation ends when the user's reply,
stripped of surrounding whitespace, is exactly ``done_marker`` (the marker is not
relayed), or when either side's run stops instead of answering (a limit, a timeout,
an error). The user's ``limits.max_turns`` (default 8) caps the conversation.

The taskset's rubric scores the assistant's trace against the real task row (and,
with ``judge.model`` set, an LLM judge's verdict on the whole conversation, rendered
from the real row: the scenario the assistant never saw), plus two metrics:
``user_turns`` (user messages relayed to the assistant) and ``user_done`` (1.0 when
the user said the done marker). The user's trace gets no rewards. Both
traces record how the conversation ended in ``info["ended_by"]``: ``done``,
``user_stopped`` or ``assistant_stopped``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    EnvConfig,
    Judge,
    JudgeConfig,
    Limits,
    OptionError,
    Rubric,
    Task,
    TasksetEnv,
    Trace,
    metric,
)
from taketurns.env import at_least

__all__ = [
    "DEFAULT_PERSONA",
    "GREETING",
    "JUDGE_PROMPT",
    "UserAgentConfig",
    "UserLimits",
    "UserSim",
    "UserSimConfig",
    "UserSimJudgeConfig",
    "render_persona",
]

GREETING = "Hello! How can I help you today?"
DONE_MARKER = "###DONE###"
DEFAULT_PERSONA = """\
You are role-playing a user (a customer) who is talking with an AI assistant. \
This is your situation and what you want:

{scenario}

How to play:
- Speak only as the user, one short message at a time, in your own words. Share the \
details of your situation when the assistant needs them.
- Do not do the assistant's work yourself: do not solve the task, answer your own \
request or write the assistant's replies. Ask, and let the assistant do the work.
- When your goal has been met, reply with exactly {done} and nothing else."""

JUDGE_PROMPT = """\
You are grading how well an AI assistant served a user.

<scenario>
{prompt}
</scenario>

<reference>
{answer}
</reference>

<conversation>
{conversation}
</conversation>

<response>
{response}
</response>

Did the assistant meet the user's goal (the reference, when given, is the expected \
outcome)? Think briefly, then end with exactly one line: VERDICT: CORRECT or \
VERDICT: INCORRECT"""

_PLACEHOLDER = re.compile(r"\{(scenario|done)\}")


def render_persona(template: str, *, scenario: str, done: str) -> str:
    """``template`` with ``{scenario}`` and ``{done}`` replaced in one pass over the
    template: text that came from the scenario (or the marker) is never rewritten,
    and any other braces are left as they are."""
    values = {"scenario": scenario, "done": done}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _non_blank(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise OptionError(attribute.name, value, "a non-empty string")


def _persona(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or any(f"{{{p}}}" not in value for p in ("scenario", "done")):
        raise OptionError(
            attribute.name,
            value,
            "a template containing {scenario} (the user's goal) and {done} (the marker "
            "the user answers with when the goal is met)",
        )


@attrs.define
class UserLimits(Limits):
    """The user's limits: ``max_turns`` (default 8) caps the conversation."""

    max_turns: int | None = attrs.field(default=8, validator=at_least(0, exclusive=True))


@attrs.define
class UserAgentConfig(AgentConfig):
    """The modeled user's role: not trainable and capped at 8 turns unless told
    otherwise (a partial override such as ``--env.user.model=M`` keeps both)."""

    limits: UserLimits = attrs.field(factory=UserLimits)
    trainable: bool = False


@attrs.define
class UserSimJudgeConfig(JudgeConfig):
    """The assistant's judge: as ``JudgeConfig``, its template ``JUDGE_PROMPT`` (the
    scenario, the reference and the whole conversation) unless told otherwise."""

    prompt: str = attrs.field(
        default=JUDGE_PROMPT, validator=attrs.fields(JudgeConfig).prompt.validator
    )


@attrs.define
class UserSimConfig(EnvConfig):
    """``taskset``: an id or a table ``{id = "jsonl", path = "..."}``; ``assistant`` and
    ``user``: the two roles; ``persona``: the user's system prompt template;
    ``done_marker``: what the user says to end the conversation; ``greeting``: the
    first message the user receives; ``judge``: an LLM judge rewarding the assistant
    (none while ``judge.model`` is unset; its default template is ``JUDGE_PROMPT``)."""

    taskset: Any = None
    assistant: AgentConfig = attrs.field(factory=AgentConfig)
    user: UserAgentConfig = attrs.field(factory=UserAgentConfig)
    persona: str = attrs.field(default=DEFAULT_PERSONA, validator=_persona)
    done_marker: str = attrs.field(default=DONE_MARKER, validator=_non_blank)
    greeting: str = attrs.field(default=GREETING, validator=_non_blank)
    judge: UserSimJudgeConfig = attrs.field(factory=lambda: UserSimJudgeConfig())


class UserSim(TasksetEnv):
    id = "user-sim"
    config_class = UserSimConfig
    config: UserSimConfig

    def __init__(self, config: UserSimConfig | None = None) -> None:
        super().__init__(config)
        self.judge = Judge.of(self.config.judge)

    def user_view(self, task: Task) -> Task:
        """What the user's session runs on: the persona as its system prompt, no
        prompt (the greeting opens it), nothing else of the task but its idx and name."""
        persona = render_persona(
            self.config.persona, scenario=task.prompt_text(), done=self.config.done_marker
        )
        return Task(idx=task.idx, name=task.name, system_prompt=persona)

    async def run(self, task: Task, agents: Agents) -> None:
        if task.prompt is None:
            raise ValueError(
                f"task {task.idx} has no prompt: user-sim needs a prompted task "
                "(its prompt is the user's scenario)"
            )
        async with (
            self.taskset.open_resources(task) as resources,
            agents.user.chat(self.user_view(task)) as user,
            agents.assistant.chat(
                task, mask_prompt=True, tools=resources.tools, state=resources.state
            ) as assistant,
        ):
            ended_by = await self._relay(user, assistant)
            user.trace.info["ended_by"] = assistant.trace.info["ended_by"] = ended_by

    async def _relay(self, user: ChatSession, assistant: ChatSession) -> str:
        """Relay until the user is done or a side stops; how it ended."""
        marker = self.config.done_marker.strip()
        assistant.trace.info["user_turns"] = 0
        said = await user.turn(self.config.greeting)
        while True:
            if said.stopped:
                return "user_stopped"
            if said.text.strip() == marker:
                return "done"
            answer = await assistant.turn(said.text)
            assistant.trace.info["user_turns"] += 1
            if answer.stopped:
                return "assistant_stopped"
            said = await user.turn(answer.text)

    def rubric(self, role: str) -> Rubric:
        if role == "user":
            return Rubric()
        judged = self.judge.rubric() if self.judge is not None else Rubric()
        return super().rubric(role) + judged + Rubric.of(self)

    def judges(self) -> Sequence[Judge]:
        own = () if self.judge is None else (self.judge,)
        return (*super().judges(), *own)

    def default_harness(self, role: str) -> str:
        return "null" if role == "user" else super().default_harness(role)

    @metric
    def user_turns(self, task: Task, trace: Trace) -> float:
        """User messages relayed to the assistant (the done marker is not one)."""
        return float(trace.info.get("user_turns", 0))

    @metric
    def user_done(self, task: Task, trace: Trace) -> float:
        """1.0 when the user ended the conversation with the done marker."""
        return 1.0 if trace.info.get("ended_by") == "done" else 0.0
