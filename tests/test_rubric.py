"""Rubrics: ``@reward`` weights, ``@metric``, async scorers, failures scoring 0.0 with
their error on the trace, ``@stop`` hooks, and scoring exactly once per session."""

from __future__ import annotations

import math

import pytest
import trio
import trio.lowlevel
import trio.testing
from scripted import Counter, make_agent

from taketurns import AssistantMessage, Rubric, Task, Trace, metric, reward, stop
from taketurns.env import AgentStamp, EpisodeInfo

TASK = Task(0, prompt="2+2?", answer="4")


def new_trace() -> Trace:
    return Trace(AgentStamp("a", "m", "h"), EpisodeInfo("e/0/0", "e", 0), TASK)


@reward
def correct(task: Task, trace: Trace) -> float:
    return float(trace.last_text == task.answer)


@reward(weight=0.5)
async def polite(task: Task, trace: Trace) -> float:
    await trio.lowlevel.checkpoint()
    return 1.0


@reward(weight=-2.0)
def length_penalty(task: Task, trace: Trace) -> float:
    return 0.25


@metric
def turns(task: Task, trace: Trace) -> float:
    return len(trace.turns)


@stop
def never(trace: Trace) -> bool:
    return False


def test_functions_are_grouped_by_their_mark() -> None:
    def unmarked(task: Task, trace: Trace) -> float:
        return 1.0

    rubric = Rubric.from_functions([correct, turns, never, polite, unmarked])
    assert [(s.name, s.weight) for s in rubric.rewards] == [
        ("correct", 1.0),
        ("polite", 0.5),
        ("unmarked", 1.0),
    ]
    assert [s.name for s in rubric.metrics] == ["turns"]
    assert [s.name for s in rubric.stops] == ["never"]


async def test_reward_is_the_weighted_sum_and_metrics_are_not_weighted() -> None:
    rubric = Rubric.from_functions([correct, polite, length_penalty, turns])
    trace = new_trace()
    trace.messages.append(AssistantMessage("4"))
    await rubric.score(TASK, trace)
    assert trace.rewards == {"correct": 1.0, "polite": 1.0, "length_penalty": 0.25}
    assert trace.reward == 1.0 + 0.5 - 0.5
    assert trace.metrics == {"turns": 0.0}
    assert trace.errors == []


async def test_an_empty_rubric_scores_nothing() -> None:
    trace = new_trace()
    await Rubric().score(TASK, trace)
    assert (trace.rewards, trace.metrics, trace.reward) == ({}, {}, 0.0)


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        (RuntimeError("judge unreachable"), "RuntimeError: judge unreachable"),
        (math.nan, "returned NaN"),
        ("not a number", "ValueError"),
        (None, "TypeError"),
        (trio.TooSlowError(), "TooSlowError"),
    ],
)
async def test_a_failing_scorer_writes_no_value_and_its_error_is_recorded(
    returned: object, problem: str
) -> None:
    def make_flaky():  # a fresh function each time: marks are set on the function
        async def flaky(task: Task, trace: Trace) -> object:
            if isinstance(returned, BaseException):
                raise returned
            return returned

        return flaky

    rubric = Rubric.from_functions([correct, make_flaky(), metric(make_flaky()), polite])
    trace = new_trace()
    await rubric.score(TASK, trace)
    assert trace.rewards == {
        "correct": 0.0,
        "polite": 1.0,
    }  # a failed scorer's value is absent, not 0.0 (issue 40)
    assert trace.metrics == {}
    assert trace.reward == 0.5  # the others still count
    assert len(trace.errors) == 2  # once as a reward, once as a metric
    for error in trace.errors:
        assert (error.kind, error.type) == ("scoring", "ScoringError")
        assert error.message.startswith("flaky failed: ")
        assert problem in error.message


async def test_numbers_of_any_kind_are_accepted() -> None:
    rubric = Rubric.from_functions([lambda task, trace: True, metric(lambda task, trace: 3)])
    trace = new_trace()
    await rubric.score(TASK, trace)
    assert trace.rewards == {"<lambda>": 1.0}
    assert trace.metrics == {"<lambda>": 3.0}


class Quiz:
    bonus = 0.5

    @reward
    def exact(self, task: Task, trace: Trace) -> float:
        return 1.0

    @reward(weight=2.0)
    def with_bonus(self, task: Task, trace: Trace) -> float:
        return self.bonus

    @metric
    def length(self, task: Task, trace: Trace) -> float:
        return 7.0

    @stop
    def out_of_time(self, trace: Trace) -> bool:
        return False

    @staticmethod
    @metric
    def constant(task: Task, trace: Trace) -> float:
        return 1.0

    def helper(self, task: Task, trace: Trace) -> float:  # unmarked: not collected
        raise AssertionError("never scored")


async def test_rubric_of_collects_marked_methods_bound_to_the_owner() -> None:
    rubric = Rubric.of(Quiz())
    assert sorted(s.name for s in rubric.rewards) == ["exact", "with_bonus"]
    assert sorted(s.name for s in rubric.metrics) == ["constant", "length"]
    assert [s.name for s in rubric.stops] == ["out_of_time"]
    trace = new_trace()
    await rubric.score(TASK, trace)
    assert trace.reward == 1.0 + 2.0 * 0.5
    assert trace.metrics == {"constant": 1.0, "length": 7.0}


def test_rubrics_add() -> None:
    both = Rubric.from_functions([correct, turns]) + Rubric.from_functions([polite, never])
    assert [s.name for s in both.rewards] == ["correct", "polite"]
    assert [s.name for s in both.metrics] == ["turns"]
    assert [s.name for s in both.stops] == ["never"]


async def test_check_stops_without_hooks_is_not_a_checkpoint() -> None:
    with trio.testing.assert_no_checkpoints():
        assert await Rubric.from_functions([correct]).check_stops(new_trace()) is None


async def test_check_stops_names_the_first_hook_that_fires() -> None:
    @stop
    async def late(trace: Trace) -> bool:
        await trio.lowlevel.checkpoint()
        return True

    @stop
    def later(trace: Trace) -> bool:
        raise AssertionError("not reached")

    assert await Rubric.from_functions([never, late, later]).check_stops(new_trace()) == "late"


# Through a session -----------------------------------------------------------------------


async def test_scoring_runs_once_at_close_on_the_final_trace() -> None:
    seen = []

    def inspect_final(task: Task, trace: Trace) -> float:
        seen.append((trace.stop_condition, trace.last_text, len(trace.turns)))
        return 1.0

    counter = Counter()
    session = make_agent(rewards=[inspect_final, counter]).chat(TASK)
    await session.turn()
    assert counter.calls == 0  # nothing is scored before close
    await session.close()
    await session.close()
    assert counter.calls == 1
    assert seen == [("user_closed", "ok", 1)]
    assert session.trace.reward == 2.0


async def test_async_rewards_run_inside_close(autojump_clock) -> None:
    async def judge(task: Task, trace: Trace) -> float:
        await trio.sleep(1.5)
        return 0.75

    session = make_agent(rewards=[reward(weight=2)(judge)]).chat(TASK)
    trace = await session.close()
    assert trace.rewards == {"judge": 0.75}
    assert trace.reward == 1.5
    assert trace.timing.scoring_s == 1.5


async def test_a_raising_reward_is_an_error_on_the_trace_not_an_exception() -> None:
    def broken(task: Task, trace: Trace) -> float:
        raise ZeroDivisionError("division by zero")

    trace = await make_agent(rewards=[broken, correct]).run(TASK)
    assert trace.rewards == {
        "correct": 0.0
    }  # a failed scorer's value is absent, not 0.0 (issue 40)
    [error] = trace.errors
    assert error.kind == "scoring"
    assert "broken failed: ZeroDivisionError: division by zero" in error.message
