"""``jsonl``: a taskset read from a JSONL file, one task a line.

Each non-blank line is a JSON object with the fields of a task::

    {"prompt": "What is 2+2?", "answer": "4"}
    {"prompt": [{"role": "user", "content": "Hi"}], "system_prompt": "Be brief.",
     "answer": "hello", "info": {"source": "demo"}, "name": "greet"}

``prompt`` (required) is a string or a list of OpenAI chat messages; ``system_prompt``
a string; ``answer`` a string or a number; ``info`` an object; ``name`` a string
(default ``<file stem>-<idx>``). Task ``idx`` counts tasks in file order (blank lines
are skipped). The whole file is read and checked when the taskset is built, before
any episode: every malformed line is reported with its line number, and nothing runs.

Scoring compares the final assistant text with ``answer``, normalized by stripping
surrounding whitespace and case-folding: ``exact_match`` is the reward (1.0 when equal)
and ``contains`` a metric (1.0 when the answer appears in the text). Both are 0.0
for a task without an answer. ``exact_match`` is the reward because ``contains`` can
be gamed by a reply that lists every candidate.

With a judge (``judge.model``, e.g. ``--env.taskset.judge.model=builtin/judge``) the
reward is the LLM judge's verdict (named ``judge.name``, default ``judge``; see
``taketurns.Judge`` for the template and the verdict format) and ``exact_match``
becomes a metric.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from taketurns import (
    ConfigError,
    Judge,
    JudgeConfig,
    OptionError,
    Rubric,
    Task,
    Taskset,
    TasksetConfig,
    Trace,
    metric,
    reward,
)
from taketurns.harness import messages_from_wire

__all__ = ["JsonlConfig", "JsonlTaskset", "load_tasks", "normalize"]

FIELDS = ("prompt", "system_prompt", "answer", "info", "name")
MAX_PROBLEMS = 20  # a file of a million bad lines should not print a million lines


def _readable_file(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return  # the taskset refuses a missing path; the catalog lists the default
    if not isinstance(value, str) or not value:
        raise OptionError(attribute.name, value, "a file path (a non-empty string)")
    if not Path(value).is_file():
        why = "it is a directory" if Path(value).is_dir() else "no such file"
        raise OptionError(attribute.name, value, f"the path of a readable JSONL file ({why})")


@attrs.define
class JsonlConfig(TasksetConfig):
    """``path``: the JSONL file (required; relative paths are to the working directory);
    ``judge``: an LLM judge as the reward (none while ``judge.model`` is unset)."""

    path: str | None = attrs.field(default=None, validator=_readable_file)
    judge: JudgeConfig = attrs.field(factory=JudgeConfig)


def normalize(text: str) -> str:
    """What answers are compared on: surrounding whitespace stripped, case-folded."""
    return text.strip().casefold()


def _answer(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class _LineError(ValueError):
    """One malformed line's problem (the caller adds the file and line number)."""


def _prompt(raw: Any) -> Any:
    if isinstance(raw, str):
        if not raw.strip():
            raise _LineError("prompt is empty")
        return raw
    if isinstance(raw, list):
        if not raw:
            raise _LineError("prompt is an empty list of messages")
        try:
            return messages_from_wire(raw, where="prompt")
        except ValueError as exc:
            raise _LineError(str(exc)) from None
    if raw is None:
        raise _LineError('"prompt" is missing (a string or a list of chat messages)')
    raise _LineError(f"prompt must be a string or a list of chat messages, not {_kind(raw)}")


def _check_answer(raw: Any) -> Any:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise _LineError(f"answer must be a string or a number, not {_kind(raw)}")
    if isinstance(raw, str) and not raw.strip():
        raise _LineError("answer is blank (leave it out for a task without an answer)")
    return raw


def _optional(row: dict[str, Any], field: str, kind: type, what: str) -> Any:
    value = row.get(field)
    if value is not None and not isinstance(value, kind):
        raise _LineError(f"{field} must be {what}, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), f"a number ({value!r})")


def _task(idx: int, line: str, stem: str) -> Task:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _LineError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise _LineError("not valid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise _LineError(f"expected a JSON object with {', '.join(FIELDS)}; got {_kind(row)}")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise _LineError(
            f"unknown field(s) {', '.join(map(repr, unknown))}; a task line has "
            f"{', '.join(FIELDS)} (put anything else under info)"
        )
    return Task(
        idx=idx,
        name=_optional(row, "name", str, "a string") or f"{stem}-{idx}",
        prompt=_prompt(row.get("prompt")),
        system_prompt=_optional(row, "system_prompt", str, "a string"),
        answer=_check_answer(row.get("answer")),
        info=dict(_optional(row, "info", dict, "an object") or {}),
    )


def load_tasks(path: str | Path) -> list[Task]:
    """Every task of the JSONL file at ``path``. Raises ``ConfigError`` naming the file
    and the line number of every malformed line (and when nothing can be read)."""
    path = Path(path)
    try:
        # split on "\n" only: str.splitlines would also split on U+2028 and friends,
        # which JSON allows unescaped inside strings
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the tasks file ({exc})") from None
    tasks: list[Task] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            tasks.append(_task(len(tasks), line, path.stem))
        except _LineError as exc:
            problems.append(f"{path}, line {number}: {exc}")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"{path}: ... and {len(problems) - MAX_PROBLEMS} more malformed lines")
        raise ConfigError(shown)
    if not tasks:
        raise ConfigError(f"{path}: holds no tasks (one JSON object a line)")
    return tasks


class JsonlTaskset(Taskset):
    id = "jsonl"
    config_class = JsonlConfig
    config: JsonlConfig

    def __init__(self, config: JsonlConfig | None = None) -> None:
        super().__init__(config)
        if self.config.path is None:
            raise ConfigError(
                "jsonl taskset: path is missing; name the JSONL file of tasks "
                "(--env.taskset.path=FILE)"
            )
        self._tasks = load_tasks(self.config.path)
        self.judge = Judge.of(self.config.judge)

    def judges(self) -> Sequence[Judge]:
        return () if self.judge is None else (self.judge,)

    def rubric(self) -> Rubric:
        """``exact_match`` (reward) and ``contains``; with a judge, the judge's verdict
        is the reward and ``exact_match`` a metric."""
        own = super().rubric()
        if self.judge is None:
            return own
        judged = self.judge.rubric()
        return Rubric(judged.rewards, own.rewards + own.metrics, own.stops)

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        """The first ``num_tasks`` tasks of the file (all of them if it has fewer)."""
        return self._tasks[:num_tasks]

    @reward
    def exact_match(self, task: Task, trace: Trace) -> float:
        """1.0 when the final assistant text is the answer (normalized)."""
        if task.answer is None:
            return 0.0
        return float(normalize(trace.last_text) == normalize(_answer(task.answer)))

    @metric
    def contains(self, task: Task, trace: Trace) -> float:
        """1.0 when the answer (normalized) appears in the final assistant text."""
        if task.answer is None:
            return 0.0
        return float(normalize(_answer(task.answer)) in normalize(trace.last_text))
