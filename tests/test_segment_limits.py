"""``limits.max_segment_turns``: the model calls of one segment, capped; a harness's
default (``Harness.segment_turns``: the agent CLIs' 100) unless the agent sets its own."""

from __future__ import annotations

import pytest

from taketurns import Agent, AgentConfig, Limits, Task
from taketurns.harness import Harness, Prompt, Rollout
from taketurns.harnesses.agent_cli import AgentCLIHarness
from taketurns.harnesses.claude_code import ClaudeCodeHarness
from taketurns.harnesses.codex import CodexHarness
from taketurns.harnesses.opencode import OpencodeHarness


class Chatty(Harness):
    """Calls the model ``calls`` times per segment (a tool loop that will not stop)."""

    id = "chatty"
    segment_turns = 3

    def __init__(self, calls: int) -> None:
        self.calls = calls

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        for _ in range(self.calls):
            response = await rollout.complete(prompt.wire_messages())
            rollout.emit(response.message)


def chatty(calls: int, limits: Limits | None = None) -> Agent:
    config = AgentConfig(model="builtin/echo", limits=limits or Limits())
    return Agent("agent", config, harness=Chatty(calls))


async def test_the_harness_default_caps_one_segment() -> None:
    trace = await chatty(10).run(Task(0, prompt="go"))
    assert trace.stop_condition == "max_segment_turns"
    assert len(trace.turns) == 3
    assert trace.errors == []  # a limit: an outcome, not a failure


async def test_the_agents_own_cap_overrides_the_harness_default() -> None:
    trace = await chatty(10, Limits(max_segment_turns=5)).run(Task(0, prompt="go"))
    assert trace.stop_condition == "max_segment_turns"
    assert len(trace.turns) == 5
    trace = await chatty(10, Limits(max_segment_turns=50)).run(Task(0, prompt="go"))
    assert trace.stop_condition == "agent_completed"
    assert len(trace.turns) == 10


async def test_the_count_starts_again_every_segment() -> None:
    async with chatty(3).chat(Task(0, prompt="go")) as session:
        replies = [await session.turn(), await session.turn("more"), await session.turn("again")]
    assert [r.stopped for r in replies] == [False, False, False]
    assert len(session.trace.turns) == 9  # 3 a segment, never refused


async def test_the_rollout_limit_still_counts_every_segment() -> None:
    async with chatty(3, Limits(max_turns=4)).chat(Task(0, prompt="go")) as session:
        first = await session.turn()
        second = await session.turn("more")
    assert not first.stopped
    assert second.stop_condition == "max_turns"
    assert len(session.trace.turns) == 4


@pytest.mark.parametrize("cls", [CodexHarness, ClaudeCodeHarness, OpencodeHarness])
def test_the_agent_clis_default_to_100_calls_a_segment(cls: type[AgentCLIHarness]) -> None:
    harness = cls()
    agent = Agent("agent", AgentConfig(model="builtin/echo"), harness=harness)
    assert agent.limits.max_segment_turns == 100
    mine = Agent("agent", AgentConfig(limits=Limits(max_segment_turns=7)), harness=harness)
    assert mine.limits.max_segment_turns == 7
    assert Agent("agent", AgentConfig()).limits.max_segment_turns is None  # in process
