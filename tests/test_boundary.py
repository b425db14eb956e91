"""The model boundary: one request = one recorded turn; limits and ``@stop`` hooks
checked before every model call and before a segment launches; ``max_tokens`` capped
at the remaining output budget. Driven through harnesses calling ``rollout.complete``."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
from scripted import ScriptedModel, Sleep, ToolLoopHarness, make_agent, tool_call

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    Limits,
    ModelEndpointError,
    Reply,
    Sampling,
    Task,
    UserMessage,
    stop,
)
from taketurns.env import ModelResponse, Usage
from taketurns.errors import RolloutStopped
from taketurns.harness import ToolCall, text_of

PROMPTED = Task(0, prompt="Use the tool.")
ENDLESS = [tool_call(f"c{i}") for i in range(20)]  # a model that never stops calling tools


# One request = one recorded turn ------------------------------------------------------


async def test_each_model_call_is_recorded_as_one_turn(autojump_clock) -> None:
    first = ModelResponse(
        AssistantMessage(None, (ToolCall("c1", "lookup", '{"q": 1}'),)),
        Usage(10, 4),
        "tool_calls",
        token_ids=[1, 2, 3, 4],
        prompt_token_ids=[9, 9],
        logprobs=[-0.1, -0.2, -0.3, -0.4],
    )
    second = ModelResponse(AssistantMessage("done"), Usage(20, 1), "length")
    model = ScriptedModel(Sleep(2), first, Sleep(0.5), second)
    async with make_agent(model).chat(PROMPTED) as session:
        await session.turn()
    trace = session.trace
    assert len(trace.turns) == len(model.requests) == 2
    one, two = trace.turns
    assert one.index == 0
    assert two.index == 1
    assert one.request == model.requests[0].messages == (UserMessage("Use the tool."),)
    assert two.request == model.requests[1].messages
    assert two.request[1:] == (first.message, trace.messages[2])  # the tool loop's messages
    assert one.response == first.message
    assert two.response == AssistantMessage("done")
    assert (one.usage, two.usage) == (Usage(10, 4), Usage(20, 1))
    assert (one.finish_reason, two.finish_reason) == ("tool_calls", "length")
    assert (one.latency_s, two.latency_s) == (2, 0.5)
    assert one.tools == two.tools == ("lookup",)
    assert (one.token_ids, one.prompt_token_ids, one.logprobs) == (
        [1, 2, 3, 4],
        [9, 9],
        [-0.1, -0.2, -0.3, -0.4],
    )
    assert two.token_ids is None
    assert one.error is None
    assert trace.usage == Usage(30, 5)
    assert trace.usage.total_tokens == 35


async def test_a_failed_call_is_recorded_as_a_turn_with_its_error(autojump_clock) -> None:
    model = ScriptedModel("ok", Sleep(3), ModelEndpointError("HTTP 500 from upstream", status=500))
    async with make_agent(model).chat(PROMPTED) as session:
        await session.turn()
        reply = await session.turn("again")
    assert reply.stop_condition == "model_error"
    failed = session.trace.turns[1]
    assert (failed.index, failed.response, failed.error) == (1, None, "HTTP 500 from upstream")
    assert failed.latency_s == 3
    assert failed.request == model.requests[1].messages
    assert session.trace.usage == Usage(3, 2)  # only the answered call counts
    [error] = session.trace.errors
    assert (error.kind, error.type) == ("model", "ModelEndpointError")


async def test_the_request_carries_model_tools_and_sampling() -> None:
    model = ScriptedModel()
    agent = make_agent(model, sampling=Sampling(temperature=0.5))
    trace = await agent.run(PROMPTED)
    [request] = model.requests
    assert request.model == "scripted"
    assert request.tools[0]["function"]["name"] == "lookup"
    # with the call's seed (tests/test_seeds.py), recorded on its turn
    assert dict(request.sampling) == {"temperature": 0.5, "seed": trace.turns[0].seed}
    assert isinstance(trace.turns[0].seed, int)


# Limits: before every model call --------------------------------------------------------

# each scripted call costs Usage(3, 2); every case allows exactly three calls
LIMITS = [
    (Limits(max_turns=3), "max_turns"),
    (Limits(max_input_tokens=9), "max_input_tokens"),
    (Limits(max_input_tokens=7), "max_input_tokens"),
    (Limits(max_output_tokens=6), "max_output_tokens"),
    (Limits(max_output_tokens=5), "max_output_tokens"),
    (Limits(max_total_tokens=15), "max_total_tokens"),
    (Limits(max_total_tokens=11), "max_total_tokens"),
]


@pytest.mark.parametrize(("limits", "condition"), LIMITS)
async def test_a_limit_refuses_the_next_call_inside_a_segment(
    limits: Limits, condition: str
) -> None:
    model = ScriptedModel(*ENDLESS)
    harness = ToolLoopHarness()
    async with make_agent(model, harness, limits=limits).chat(PROMPTED) as session:
        reply = await session.turn()
    assert len(model.requests) == len(session.trace.turns) == 3
    assert reply.stopped
    assert reply.stop_condition == session.trace.stop_condition == condition
    assert [m.role for m in reply.messages] == ["assistant", "tool"] * 3
    assert harness.events == [("start", "Use the tool.")]  # the segment never finished


async def test_a_refused_call_raises_rolloutstopped_in_the_harness() -> None:
    caught = []

    class Careful(ToolLoopHarness):
        async def launch(self, rollout, prompt) -> None:
            await rollout.complete(prompt.messages)
            try:
                await rollout.complete(prompt.messages)
            except RolloutStopped as exc:
                caught.append(exc.stop_condition)
                raise

    agent = make_agent(harness=Careful(), limits=Limits(max_turns=1))
    reply = await agent.chat(PROMPTED).turn()
    assert caught == ["max_turns"]
    assert reply.stop_condition == "max_turns"


# Limits: before a segment launches ----------------------------------------------------------

# the first turn's one call (Usage(3, 2)) uses each budget up exactly
SPENT = [
    (Limits(max_turns=1), "max_turns"),
    (Limits(max_input_tokens=3), "max_input_tokens"),
    (Limits(max_output_tokens=2), "max_output_tokens"),
    (Limits(max_total_tokens=5), "max_total_tokens"),
]


@pytest.mark.parametrize(("limits", "condition"), SPENT)
async def test_a_spent_budget_refuses_the_next_segment_before_it_starts(
    limits: Limits, condition: str
) -> None:
    model = ScriptedModel("first")
    harness = ToolLoopHarness()
    async with make_agent(model, harness, limits=limits).chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        reply = await session.turn("second")
    assert reply == Reply("", (), True, condition)
    assert len(harness.prompts) == 1  # launch was never called for the refused segment
    assert len(model.requests) == 1
    assert session.trace.stop_condition == condition


# @stop hooks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True])
async def test_stop_hooks_run_before_every_call_and_every_segment(is_async: bool) -> None:
    checks = []

    def check(trace) -> bool:
        checks.append(len(trace.turns))
        return len(trace.turns) >= 2

    if is_async:

        async def two_calls(trace) -> bool:
            await trio.lowlevel.checkpoint()
            return check(trace)

    else:

        def two_calls(trace) -> bool:
            return check(trace)

    model = ScriptedModel(*ENDLESS)
    async with make_agent(model, rewards=[stop(two_calls)]).chat(PROMPTED) as session:
        reply = await session.turn()
    # one check before the segment, then one before each of the three calls tried
    assert checks == [0, 0, 1, 2]
    assert len(model.requests) == 2
    assert reply.stop_condition == session.trace.stop_condition == "two_calls"


async def test_a_stop_hook_can_refuse_a_segment_before_it_starts() -> None:
    @stop
    def user_quit(trace) -> bool:
        return text_of(trace.messages[-1].content) == "bye"

    harness = ToolLoopHarness()
    async with make_agent(harness=harness, rewards=[user_quit]).chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        assert not (await session.turn("hello")).stopped
        reply = await session.turn("bye")
    assert reply == Reply("", (), True, "user_quit")
    assert len(harness.prompts) == 2


async def test_the_first_stop_hook_to_fire_names_the_condition() -> None:
    @stop
    def never(trace) -> bool:
        return False

    @stop
    def after_one(trace) -> bool:
        return len(trace.turns) >= 1

    @stop
    def also_after_one(trace) -> bool:
        return len(trace.turns) >= 1

    agent = make_agent(ScriptedModel(*ENDLESS), rewards=[never, after_one, also_after_one])
    reply = await agent.chat(PROMPTED).turn()
    assert reply.stop_condition == "after_one"


async def test_a_raising_stop_hook_stops_the_rollout_and_is_recorded() -> None:
    @stop
    def fragile(trace) -> bool:
        if trace.turns:
            raise KeyError("missing state")
        return False

    model = ScriptedModel(*ENDLESS)
    async with make_agent(model, rewards=[fragile]).chat(PROMPTED) as session:
        reply = await session.turn()
    assert reply.stop_condition == "fragile"
    assert len(model.requests) == 1
    [error] = session.trace.errors
    assert (error.kind, error.type) == ("scoring", "KeyError")


# max_tokens capped at the remaining output budget ----------------------------------------------


def _max_tokens(model: ScriptedModel) -> list[object]:
    return [r.sampling.get("max_tokens") for r in model.requests]


async def test_max_tokens_is_the_remaining_output_budget() -> None:
    model = ScriptedModel(*ENDLESS)
    agent = make_agent(model, limits=Limits(max_output_tokens=10))
    await agent.run(PROMPTED)
    assert _max_tokens(model) == [10, 8, 6, 4, 2]


async def test_a_smaller_sampled_max_tokens_is_kept_until_the_budget_is_lower() -> None:
    model = ScriptedModel(*ENDLESS)
    agent = make_agent(model, limits=Limits(max_output_tokens=10), sampling=Sampling(max_tokens=7))
    await agent.run(PROMPTED)
    assert _max_tokens(model) == [7, 7, 6, 4, 2]


async def test_a_harness_override_cannot_exceed_the_budget() -> None:
    class Greedy(ToolLoopHarness):
        async def launch(self, rollout, prompt) -> None:
            for _ in range(2):
                await rollout.complete(prompt.messages, sampling={"max_tokens": 1000, "seed": 4})

    model = ScriptedModel()
    await make_agent(model, Greedy(), limits=Limits(max_output_tokens=9)).run(PROMPTED)
    assert [dict(r.sampling) for r in model.requests] == [
        {"max_tokens": 9, "seed": 4},
        {"max_tokens": 7, "seed": 4},
    ]


async def test_without_an_output_budget_max_tokens_is_left_alone() -> None:
    model = ScriptedModel("a")
    await make_agent(model, limits=Limits(max_turns=5)).run(PROMPTED)
    assert _max_tokens(model) == [None]


async def test_the_builtin_model_honours_the_cap() -> None:
    config = AgentConfig(model="builtin/echo", limits=Limits(max_output_tokens=3))
    agent = Agent("echo", config)
    trace = await agent.run(Task(0, prompt="one two three four five"))
    [turn] = trace.turns
    assert turn.response == AssistantMessage("one two three")
    assert turn.finish_reason == "length"
    assert trace.usage.completion_tokens == 3
