"""``reasoning-gym``: a taskset over any reasoning-gym dataset (``reasoning-gym`` extra).

reasoning-gym (https://pypi.org/project/reasoning-gym/) generates its datasets
procedurally, offline, each with its own scorer.

``dataset`` names one of its datasets (``taketurns envs`` lists them all) and
``options`` is a table of that dataset's own config fields (``--env.taskset.options.
min_animals=3``). Task *i* is the one item the dataset generates with seed ``seed + i``
(reasoning-gym seeds item *i* of a dataset with ``seed + i``, so task *i* is item *i* of
``create_dataset(dataset, seed=seed)`` for datasets whose items do not depend on the
dataset's size, and it never depends on ``-n``). The prompt is the item's question,
the system prompt one of reasoning-gym's own (``system_prompt``: a name of
``reasoning_gym.utils.SYSTEM_PROMPTS``, or literal text).

The answer is the last ``<answer>...</answer>`` of the reply (the whole reply when it
has none) and the dataset's own ``score_answer`` scores it: reward ``score``. With
``attempts`` > 1 (under ``single-agent``) a wrong answer is met with feedback and the
question asked again, up to ``attempts`` answers in one conversation; the first correct
answer (score 1.0) ends it. ``score`` is then the first correct answer's score, else the
last answer's; metrics ``answers`` (how many were given) and ``first_try``. The trace's
info holds ``dataset``, ``seed`` and ``scores`` (each answer's score, in order).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Sequence
from typing import Any

import attrs

from taketurns import (
    Agent,
    ConfigError,
    Resources,
    Task,
    Taskset,
    TasksetConfig,
    Trace,
    metric,
    reward,
)
from taketurns.env import int_between, one_of

__all__ = ["ReasoningGym", "ReasoningGymConfig", "dataset_names", "extract_answer"]

# the dataset's size and seed are the taskset's to set (one item per task)
RESERVED = ("seed", "size")
FEEDBACK = (
    "That answer is not correct (score {score:.2f}; {left} left). "
    "Think again and answer the question once more:\n\n{question}"
)


def load() -> Any:
    """The ``reasoning_gym`` module; ``ConfigError`` naming the extra without it."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ConfigError(
            f"the reasoning-gym taskset needs the reasoning-gym extra ({exc}); "
            "install it with: pip install 'taketurns[reasoning-gym]'"
        ) from exc
    return reasoning_gym


def dataset_names() -> list[str]:
    """Every dataset reasoning-gym registers, sorted (imports reasoning-gym)."""
    from reasoning_gym.factory import DATASETS

    load()
    return sorted(DATASETS)


def _datasets_listing() -> str:
    try:
        return ", ".join(dataset_names())
    except (ImportError, ConfigError):
        return "(install the reasoning-gym extra to list them)"


def extract_answer(text: str) -> str:
    """The answer in a reply: the last ``<answer>...</answer>`` (stripped), else the
    whole reply stripped."""
    from reasoning_gym.utils import extract_answer as tagged

    found = tagged(text)
    return text.strip() if found is None else found


# None passes: the taskset refuses a missing name; the catalog lists the default
_a_dataset = attrs.validators.optional(
    one_of(dataset_names, what="a reasoning-gym dataset", listing="taketurns envs reasoning-gym")
)


@attrs.define
class ReasoningGymConfig(TasksetConfig):
    """``dataset`` (required), ``options`` (the dataset's own config fields), ``seed``,
    ``attempts``, ``system_prompt``."""

    dataset: str | None = attrs.field(
        default=None, validator=_a_dataset, metadata={"choices": _datasets_listing}
    )
    options: dict[str, Any] = attrs.field(factory=dict)
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0, 2**31)),
        metadata={"unset": "the run's --seed"},
    )
    attempts: int = attrs.field(default=1, validator=int_between(1, 100))
    system_prompt: str = "default"


def _field_types(config_class: type) -> dict[str, Any]:
    """The dataset config's fields, each with its default (a type hint for text)."""
    fields = {}
    for f in dataclasses.fields(config_class):
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        fields[f.name] = default
    return fields


def _coerce(value: Any, default: Any) -> Any:
    """A command-line value (text) read as a TOML literal unless the field is text."""
    if not isinstance(value, str) or isinstance(default, str):
        return value
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return str(value)


def _options(dataset: str, raw: dict[str, Any]) -> dict[str, Any]:
    from reasoning_gym.factory import DATASETS

    _, config_class = DATASETS[dataset]
    known = _field_types(config_class)
    allowed = sorted(set(known) - set(RESERVED))
    problems = []
    options = {}
    for key, value in raw.items():
        if key in RESERVED:
            problems.append(
                f"env.taskset.options.{key}: set by the taskset (one item per task; use "
                "env.taskset.seed to vary the items)"
            )
        elif key not in known:
            problems.append(
                f"env.taskset.options.{key}: not an option of {dataset}; "
                f"its options: {', '.join(allowed)}"
            )
        else:
            options[key] = _coerce(value, known[key])
    if problems:
        raise ConfigError(problems)
    return options


class ReasoningGym(Taskset):
    id = "reasoning-gym"
    config_class = ReasoningGymConfig
    config: ReasoningGymConfig

    def __init__(self, config: ReasoningGymConfig | None = None) -> None:
        super().__init__(config)
        load()
        from reasoning_gym.utils import SYSTEM_PROMPTS

        if self.config.dataset is None:
            raise ConfigError(
                "env.taskset.dataset: name a reasoning-gym dataset "
                f"(--env.taskset.dataset=NAME); one of: {', '.join(dataset_names())}"
            )
        self._items: dict[int, tuple[Any, dict[str, Any]]] = {}
        self._options = _options(self.config.dataset, dict(self.config.options))
        self._system_prompt = SYSTEM_PROMPTS.get(
            self.config.system_prompt, self.config.system_prompt
        )
        self._item(self.seed_of(self.config.seed))  # bad options fail here, before any episode

    def _item(self, seed: int) -> tuple[Any, dict[str, Any]]:
        """The dataset generating one item with ``seed``, and that item (made once:
        ``tasks`` makes them, scoring reuses them; a worker process remakes its own)."""
        from reasoning_gym import create_dataset

        if seed in self._items:
            return self._items[seed]
        try:
            dataset = create_dataset(self.config.dataset, seed=seed, size=1, **self._options)
            self._items[seed] = dataset, dataset[0]
            return self._items[seed]
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(
                f"env.taskset.options: {self.config.dataset} refused its options "
                f"{self._options!r}: {exc}"
            ) from None

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        base = self.seed_of(self.config.seed)
        tasks = []
        for i in range(num_tasks):
            seed = base + i
            _, item = self._item(seed)
            answer = item.get("answer")
            tasks.append(
                Task(
                    idx=i,
                    name=f"{self.config.dataset}-{i}",
                    prompt=str(item["question"]),
                    system_prompt=self._system_prompt,
                    answer=answer if isinstance(answer, str) else None,
                    info={"dataset": self.config.dataset, "seed": seed},
                )
            )
        return tasks

    def score_text(self, task: Task, text: str) -> float:
        """The dataset's own ``score_answer`` for the answer in ``text``."""
        dataset, item = self._item(int(task.info["seed"]))
        return float(dataset.score_answer(answer=extract_answer(text), entry=item))

    async def play(self, agent: Agent, task: Task, resources: Resources) -> None:
        """One episode under ``single-agent``: one shot, or up to ``attempts`` answers
        in one conversation, each wrong one met with feedback."""
        if self.config.attempts == 1:
            await agent.run(task, tools=resources.tools, state=resources.state)
            return
        async with agent.chat(task, tools=resources.tools, state=resources.state) as session:
            scores: list[float] = []
            session.trace.info.update(dataset=self.config.dataset, scores=scores)
            reply = await session.turn()
            while not reply.stopped:
                scores.append(self.score_text(task, reply.text))
                left = self.config.attempts - len(scores)
                if scores[-1] >= 1.0 or left == 0:
                    await session.close(reason="agent_completed")
                    return
                tries = "1 try" if left == 1 else f"{left} tries"
                message = FEEDBACK.format(score=scores[-1], left=tries, question=task.prompt)
                reply = await session.turn(message)

    def _scores(self, task: Task, trace: Trace) -> list[float]:
        """Each answer's score: those the conversation recorded, else the one answer."""
        if "scores" in trace.info:
            return list(trace.info["scores"])
        if not trace.last_text:
            return []
        return [self.score_text(task, trace.last_text)]

    @reward
    def score(self, task: Task, trace: Trace) -> float:
        """The dataset's score of the first correct answer, else of the last answer
        (0.0 without one)."""
        scores = self._scores(task, trace)
        return next((s for s in scores if s >= 1.0), scores[-1] if scores else 0.0)

    @metric
    def answers(self, task: Task, trace: Trace) -> float:
        """How many answers were scored (1 in one-shot mode)."""
        return float(len(self._scores(task, trace)))

    @metric
    def first_try(self, task: Task, trace: Trace) -> float:
        """1.0 when the first answer was correct."""
        scores = self._scores(task, trace)
        return float(bool(scores) and scores[0] >= 1.0)
