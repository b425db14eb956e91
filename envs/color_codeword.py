"""``color-codeword``: read colored squares, keep the codeword they spell.

One agent (``player``) chats one task; the env plays the user. The system prompt
maps nine colours to the letters A-I. Each turn the user sends a text part and one
PNG image (a ``data:image/png;base64,...`` URL) per new square, never naming the
colours; the model appends their letters and answers the whole codeword so far as
``CODEWORD: <letters>``. The ``exact_match`` reward is 1.0 when the answer to the last
turn is the full codeword; the ``partial_match`` metric is the mean over the task's
turns of the fraction of positions right in that turn's answer (turns not played score
0). A reply that stops instead of answering ends the episode. Per-turn answers and
scores go on ``trace.info`` before the session closes. Rules live in
``taketurns.envs.color_codeword_rules``.
"""

from __future__ import annotations

import random

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, OptionError, Task, Trace, metric, reward
from taketurns.env import int_between
from taketurns.envs import color_codeword_rules as rules

__all__ = ["ColorCodeword", "ColorCodewordConfig"]

_MAX_TURNS = 20
_MAX_SQUARES = 9
_MAX_SIZE = 512


@attrs.define
class ColorCodewordConfig(EnvConfig):
    """Each task has ``min_turns``..``max_turns`` user turns (seeded), each showing
    ``min_squares``..``max_squares`` new squares of ``square_size`` pixels. ``seed``
    varies the tasks (unset: the run's ``--seed``)."""

    player: AgentConfig = attrs.field(factory=AgentConfig)
    min_turns: int = attrs.field(default=2, validator=int_between(1, _MAX_TURNS))
    max_turns: int = attrs.field(default=4, validator=int_between(1, _MAX_TURNS))
    min_squares: int = attrs.field(default=1, validator=int_between(1, _MAX_SQUARES))
    max_squares: int = attrs.field(default=2, validator=int_between(1, _MAX_SQUARES))
    square_size: int = attrs.field(default=32, validator=int_between(1, _MAX_SIZE))
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0)),
        metadata={"unset": "the run's --seed"},
    )

    def __attrs_post_init__(self) -> None:
        if self.min_turns > self.max_turns:
            raise OptionError("min_turns", self.min_turns, f"at most max_turns ({self.max_turns})")
        if self.min_squares > self.max_squares:
            raise OptionError(
                "min_squares", self.min_squares, f"at most max_squares ({self.max_squares})"
            )


class ColorCodeword(Env):
    id = "color-codeword"
    config_class = ColorCodewordConfig
    config: ColorCodewordConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [self.task(i) for i in range(num_tasks)]

    def task(self, idx: int) -> Task:
        """Task ``idx``: the same every run for the same config. Its prompt is the
        first turn's message (text + images); ``info["squares"]`` the letters by turn."""
        c = self.config
        seed = rules.task_seed(self.seed_of(c.seed), idx)
        rng = random.Random(seed)
        num_turns = rng.randint(c.min_turns, c.max_turns)
        squares = rules.generate_squares(rng, num_turns, c.min_squares, c.max_squares)
        return Task(
            idx=idx,
            name=f"color-codeword-{idx}",
            prompt=[rules.turn_message(squares, 0, c.square_size)],
            system_prompt=rules.system_prompt(),
            answer="".join(squares),
            info={"seed": seed, "squares": squares},
        )

    async def run(self, task: Task, agents: Agents) -> None:
        squares = task.info["squares"]
        async with agents.player.chat(task) as session:
            info = session.trace.info
            info.update(answers=[], position_scores=[], stopped_at=None)
            for turn in range(len(squares)):
                if turn == 0:
                    reply = await session.turn()
                else:
                    message = rules.turn_message(squares, turn, self.config.square_size)
                    reply = await session.turn(message)
                if reply.stopped:
                    info["stopped_at"] = turn
                    return
                answer = rules.parse_codeword(reply.text)
                info["answers"].append(answer)
                expected = "".join(squares[: turn + 1])
                info["position_scores"].append(rules.position_score(answer, expected))

    @reward
    def exact_match(self, task: Task, trace: Trace) -> float:
        """1.0 when the answer to the last turn is the whole codeword."""
        answers = trace.info.get("answers", [])
        done = len(answers) == len(task.info["squares"])
        return 1.0 if done and answers[-1] == task.answer else 0.0

    @metric
    def partial_match(self, task: Task, trace: Trace) -> float:
        """Mean over the task's turns of the fraction of positions right."""
        scores = trace.info.get("position_scores", [])
        return sum(scores) / len(task.info["squares"])
