"""tau2's natural-language assertions, judged by the run's judge (``--env.judge.*``).

tau2 attaches NL assertions to some airline, retail and mock tasks, but no task of its
package has ``NL_ASSERTION`` in its reward basis and tau2's runner does not evaluate
them (its NL evaluator calls a hosted model through litellm, which never runs here).
With ``judge.model`` set, the metric ``nl_assertion`` asks the judge about each of the
task's assertions, one call each (``NL_PROMPT``: the assistant's conversation and the
expected outcome), and is 1.0 when every one is met, as tau2's NL evaluator combines
them; a task without assertions scores 1.0 with no call. A judge that fails, times out
or answers without a verdict raises ``ScoringError``: the episode's scoring failed
(never a 0). The verdicts are on the trace (``judge_calls``) and in
``info["tau2"]["nl_assertions"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from taketurns import Judge, JudgeConfig, Rubric, Task, Trace, metric

__all__ = ["NL_PROMPT", "Tau2JudgeConfig", "nl_rubric"]

NL_PROMPT = """\
You are grading a conversation between a customer-service agent and a customer \
against one expected outcome.

<conversation>
{conversation}
</conversation>

<expected_outcome>
{answer}
</expected_outcome>

Does the agent satisfy the expected outcome? Think briefly, then end with exactly \
one line: VERDICT: CORRECT or VERDICT: INCORRECT"""


@attrs.define
class Tau2JudgeConfig(JudgeConfig):
    """The NL assertions' judge: as ``JudgeConfig`` (none while ``model`` is unset), its
    template ``NL_PROMPT`` (``{answer}`` is the assertion) and its name
    ``nl_assertion`` unless told otherwise."""

    prompt: str = attrs.field(
        default=NL_PROMPT, validator=attrs.fields(JudgeConfig).prompt.validator
    )
    name: str = "nl_assertion"


def nl_rubric(judge: Judge, row_of: Callable[[Task], Any]) -> Rubric:
    """The metric ``judge.name``: every NL assertion of the task met (1.0) or not."""

    async def judged(task: Task, trace: Trace) -> float:
        criteria = row_of(task).evaluation_criteria
        assertions = list(criteria.nl_assertions or []) if criteria is not None else []
        verdicts: list[Mapping[str, Any]] = []
        for i, assertion in enumerate(assertions):
            asked = Task(task.idx, f"{task.name}#nl{i}", answer=assertion)
            score = await judge.score(asked, trace)  # ScoringError: scoring failed
            verdicts.append({"nl_assertion": assertion, "met": score >= 1.0})
        trace.info.setdefault("tau2", {})["nl_assertions"] = verdicts
        return float(all(v["met"] for v in verdicts))

    judged.__name__ = judged.__qualname__ = judge.name
    return Rubric.from_functions([metric(judged)])
