"""``alphabet-sort``: keep a list of names sorted over 1-3 user turns.

One agent (``player``) chats one task; the env plays the user. Turn 0 gives some
names and asks for them sorted by first or last name (a seeded choice per task)
inside ``<alphabetical_sorted>``; each later turn adds names and asks for the combined
list inside ``<combined_alphabetical_sorted>``, the new names marked ``// new name!``.
Each answer scores ``similarity ** power`` (difflib ratio of the answer lines to the
expected lines, 0 when the tag is missing); the ``sort_score`` reward is the mean over
the task's turns. A reply that stops instead of answering ends the episode; the turns
not played score 0. Per-turn scores go on ``trace.info`` before the session closes.
Rules live in ``taketurns.envs.alphabet_sort_rules``.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, OptionError, Task, Trace, metric, reward
from taketurns.env import int_between
from taketurns.envs import alphabet_sort_rules as rules

__all__ = ["AlphabetSort", "AlphabetSortConfig"]

SYSTEM_PROMPT = (
    "You sort lists of people's names alphabetically. Follow the requested answer "
    "format exactly: the requested tags, one name per line."
)
_MAX_TURNS = 10


def _positive_number(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise OptionError(attribute.name, value, "a number > 0")


def _sort_by(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ("random", *rules.SORT_KEYS):
        raise OptionError(attribute.name, value, "one of 'random', 'first', 'last'")


@attrs.define
class AlphabetSortConfig(EnvConfig):
    """Each task has ``min_turns``..``max_turns`` user turns (seeded), each adding
    ``min_names_per_turn``..``max_names_per_turn`` names. ``sort_by``: 'first', 'last'
    or 'random' (a seeded choice per task). ``power`` sharpens each turn's similarity.
    ``seed`` varies the tasks (unset: the run's ``--seed``)."""

    player: AgentConfig = attrs.field(factory=AgentConfig)
    min_turns: int = attrs.field(default=1, validator=int_between(1, _MAX_TURNS))
    max_turns: int = attrs.field(default=3, validator=int_between(1, _MAX_TURNS))
    min_names_per_turn: int = attrs.field(default=1, validator=int_between(1))
    max_names_per_turn: int = attrs.field(default=5, validator=int_between(1))
    power: float = attrs.field(default=4.0, validator=_positive_number)
    sort_by: str = attrs.field(default="random", validator=_sort_by)
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0)),
        metadata={"unset": "the run's --seed"},
    )

    def __attrs_post_init__(self) -> None:
        if self.min_turns > self.max_turns:
            raise OptionError("min_turns", self.min_turns, f"at most max_turns ({self.max_turns})")
        if self.min_names_per_turn > self.max_names_per_turn:
            raise OptionError(
                "min_names_per_turn",
                self.min_names_per_turn,
                f"at most max_names_per_turn ({self.max_names_per_turn})",
            )
        pool = min(len(rules.FIRST_NAMES), len(rules.LAST_NAMES))
        if self.max_turns * self.max_names_per_turn > pool:
            raise OptionError(
                "max_names_per_turn",
                self.max_names_per_turn,
                f"at most {pool // self.max_turns} with max_turns={self.max_turns} "
                f"(a task draws up to max_turns * max_names_per_turn of {pool} names)",
            )


class AlphabetSort(Env):
    id = "alphabet-sort"
    config_class = AlphabetSortConfig
    config: AlphabetSortConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [self.task(i) for i in range(num_tasks)]

    def task(self, idx: int) -> Task:
        """Task ``idx``: the same every run for the same config."""
        c = self.config
        seed = rules.task_seed(self.seed_of(c.seed), idx)
        rng = random.Random(seed)
        num_turns = rng.randint(c.min_turns, c.max_turns)
        sort_by = rng.choice(rules.SORT_KEYS) if c.sort_by == "random" else c.sort_by
        turns = rules.generate_turns(rng, num_turns, c.min_names_per_turn, c.max_names_per_turn)
        return Task(
            idx=idx,
            name=f"alphabet-sort-{idx}",
            prompt=rules.turn_message(turns, 0, sort_by),
            system_prompt=SYSTEM_PROMPT,
            answer=[rules.expected_lines(turns, t, sort_by) for t in range(num_turns)],
            info={"seed": seed, "sort_by": sort_by, "turns": turns},
        )

    async def run(self, task: Task, agents: Agents) -> None:
        turns, sort_by = task.info["turns"], task.info["sort_by"]
        async with agents.player.chat(task) as session:
            info = session.trace.info
            info.update(sort_by=sort_by, similarities=[], turn_scores=[], stopped_at=None)
            for turn in range(len(turns)):
                if turn == 0:
                    reply = await session.turn()
                else:
                    reply = await session.turn(rules.turn_message(turns, turn, sort_by))
                if reply.stopped:
                    info["stopped_at"] = turn
                    return
                got = rules.parse_lines(reply.text, rules.tag_for(turn))
                score = rules.similarity(got, task.answer[turn])
                info["similarities"].append(score)
                info["turn_scores"].append(score**self.config.power)

    @reward
    def sort_score(self, task: Task, trace: Trace) -> float:
        """Mean over the task's turns of similarity ** power (unplayed turns: 0)."""
        scores = trace.info.get("turn_scores", [])
        return sum(scores) / len(task.info["turns"])

    @metric
    def perfect_turns(self, task: Task, trace: Trace) -> float:
        """Fraction of the task's turns answered exactly."""
        exact = [s for s in trace.info.get("similarities", []) if s == 1.0]
        return len(exact) / len(task.info["turns"])
