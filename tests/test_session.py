"""The exchange (``ChatSession``): docs/design.md "The exchange", lines 1-14 and
17-18 (lines 15 and 16, `run` and the harness declarations, are in test_agent.py). Driven through
``Agent.chat`` with a scripted model."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from scripted import (
    CloseRecordingHarness,
    Counter,
    FailingHarness,
    ScriptedModel,
    Sleep,
    ToolLoopHarness,
    make_agent,
    tool_call,
)

from taketurns import (
    AssistantMessage,
    Limits,
    ModelEndpointError,
    Reply,
    SessionClosed,
    SessionOver,
    SystemMessage,
    Task,
    Timeouts,
    ToolMessage,
    TurnError,
    UserMessage,
    reward,
    stop,
)
from taketurns.errors import RolloutStopped
from taketurns.harness import SessionState, text_of
from taketurns.testing import BuiltinModel

PROMPTED = Task(0, "prompted", prompt="What is two plus two?")
OPEN = Task(1, "open")


def wire_texts(model: ScriptedModel) -> list[str]:
    """The text of every message of every request the model was sent."""
    return [text_of(m.content) for r in model.requests for m in r.messages]


# 1. The opening --------------------------------------------------------------------


async def test_prompted_task_opens_with_a_bare_turn() -> None:
    model = ScriptedModel("four")
    async with make_agent(model).chat(PROMPTED) as session:
        assert session.speaks_first
        reply = await session.turn()
    assert reply == Reply("four", (AssistantMessage("four"),))
    assert model.requests[0].messages == (UserMessage("What is two plus two?"),)


async def test_prompted_task_refuses_a_message_first_and_says_which_call() -> None:
    harness = ToolLoopHarness()
    async with make_agent(harness=harness).chat(PROMPTED) as session:
        with pytest.raises(ValueError, match=r"bare `await session\.turn\(\)`") as info:
            await session.turn("hello")
        assert isinstance(info.value, TurnError)
        assert harness.prompts == []  # nothing ran
        assert session.state is SessionState.FRESH
        assert session.trace.messages == []
        reply = await session.turn()  # the right opening still works
    assert not reply.stopped


@pytest.mark.parametrize(
    ("task", "mask", "why"),
    [(OPEN, False, "it has no prompt"), (PROMPTED, True, "its prompt is masked")],
)
async def test_unprompted_or_masked_task_refuses_a_bare_opening(
    task: Task, mask: bool, why: str
) -> None:
    harness = ToolLoopHarness()
    async with make_agent(harness=harness).chat(task, mask_prompt=mask) as session:
        assert not session.speaks_first
        with pytest.raises(TurnError, match=rf"\({why}\).*`await session\.turn\(message\)`"):
            await session.turn()
        assert harness.prompts == []
        reply = await session.turn("hi there")
    assert not reply.stopped
    assert harness.prompts[0].messages == (UserMessage("hi there"),)


async def test_later_bare_turn_says_to_pass_a_message() -> None:
    async with make_agent().chat(PROMPTED) as session:
        await session.turn()
        with pytest.raises(TurnError, match=r"pass the user's message, `turn\(message\)`"):
            await session.turn()
        assert session.state is SessionState.READY
        reply = await session.turn("and three plus three?")
    assert not reply.stopped


# 2. One turn = one segment ---------------------------------------------------------


async def test_one_turn_runs_one_segment_holding_the_harness_tool_loop() -> None:
    model = ScriptedModel(tool_call("c1"), tool_call("c2"), "it is four", "six")
    harness = ToolLoopHarness()
    async with make_agent(model, harness).chat(PROMPTED) as session:
        reply = await session.turn()
        assert len(harness.prompts) == 1
        assert len(session.trace.turns) == 3
        assert reply.text == "it is four"
        assert not reply.stopped
        assert [m.role for m in reply.messages] == [
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert reply.messages[0] == tool_call("c1")
        assert reply.messages[1] == ToolMessage("c1", "result of lookup", "lookup")

        second = await session.turn("and three plus three?")
        assert len(harness.prompts) == 2  # the second turn is the second segment
        assert len(session.trace.turns) == 4
        assert second.messages == (AssistantMessage("six"),)
        # the relaunch carries the whole accreted conversation, tool messages included
        assert harness.prompts[1].messages == (
            UserMessage("What is two plus two?"),
            *reply.messages,
            UserMessage("and three plus three?"),
        )
    assert session.trace.messages == [*harness.prompts[1].messages, AssistantMessage("six")]


async def test_turn_accepts_a_list_of_messages() -> None:
    harness = ToolLoopHarness()
    async with make_agent(harness=harness).chat(OPEN) as session:
        await session.turn([UserMessage("one"), UserMessage("two")])
    assert harness.prompts[0].messages == (UserMessage("one"), UserMessage("two"))


# 3. A run that ends instead of answering -------------------------------------------


async def assert_over(session, condition: str) -> None:
    with pytest.raises(SessionOver, match=condition) as info:
        await session.turn("are you there?")
    assert info.value.stop_condition == condition
    assert session.state is SessionState.OVER


async def test_limit_stops_the_run_on_that_turn() -> None:
    model = ScriptedModel("a", tool_call("c1"), "b")
    async with make_agent(model, limits=Limits(max_turns=2)).chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        reply = await session.turn("more")
        assert reply.stopped
        assert reply.stop_condition == "max_turns"
        # what the segment produced before the refusal is still reported
        assert reply.messages[0] == tool_call("c1")
        await assert_over(session, "max_turns")
    assert session.trace.stop_condition == "max_turns"


async def test_stop_hook_stops_the_run_on_that_turn() -> None:
    @stop
    def said_goodbye(trace) -> bool:
        return any(text_of(m.content) == "goodbye" for m in trace.messages)

    model = ScriptedModel(tool_call("c1"), "goodbye", "never sent")
    agent = make_agent(model, rewards=[said_goodbye])
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
        assert reply.text == "goodbye"
        assert not reply.stopped  # the hook fires before the *next* call
        reply = await session.turn("again")
        assert reply == Reply("", (), True, "said_goodbye")
        await assert_over(session, "said_goodbye")
    assert len(model.requests) == 2


async def test_segment_timeout_stops_the_run_on_that_turn(autojump_clock) -> None:
    # the timeout catches the model request in flight: the endpoint's failure
    # (tests/test_endpoint_time.py), the run stopped all the same
    model = ScriptedModel("quick", Sleep(100), "slow")
    agent = make_agent(model, timeouts=Timeouts(segment_s=5))
    async with agent.chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        start = trio.current_time()
        reply = await session.turn("think hard")
        assert trio.current_time() - start == 5
        assert reply.stopped
        assert reply.stop_condition == "model_error"
        await assert_over(session, "model_error")


async def test_rollout_timeout_stops_the_run_on_that_turn(autojump_clock) -> None:
    agent = make_agent(ScriptedModel(Sleep(3), "a", Sleep(100)), timeouts=Timeouts(rollout_s=5))
    async with agent.chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        reply = await session.turn("next")
        assert (reply.stopped, reply.stop_condition) == (True, "model_error")
        assert trio.current_time() == 5
        await assert_over(session, "model_error")


async def test_harness_raising_stops_the_run_on_that_turn() -> None:
    harness = FailingHarness(fail_on=1, error=RuntimeError("the tool crashed"), after_calls=True)
    async with make_agent(ScriptedModel("a", "b"), harness).chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        reply = await session.turn("next")
        assert reply.stopped
        assert reply.stop_condition == "harness_error"
        assert reply.messages == (AssistantMessage("b"),)
        await assert_over(session, "harness_error")
    [error] = session.trace.errors
    assert (error.kind, error.type, error.message) == (
        "harness",
        "RuntimeError",
        "the tool crashed",
    )


async def test_harness_raising_a_group_is_a_harness_error() -> None:
    harness = FailingHarness(error=ExceptionGroup("tools", [RuntimeError("x")]))
    async with make_agent(harness=harness).chat(PROMPTED) as session:
        reply = await session.turn()
    assert reply.stop_condition == "harness_error"
    assert session.trace.errors[0].type == "ExceptionGroup"


async def test_a_refusal_inside_a_harness_nursery_keeps_its_condition() -> None:
    # RolloutStopped is control flow, a BaseException (issue 41): its group is a base group
    harness = FailingHarness(error=BaseExceptionGroup("tools", [RolloutStopped("max_turns")]))
    async with make_agent(harness=harness).chat(PROMPTED) as session:
        reply = await session.turn()
    assert reply == Reply("", (), True, "max_turns")
    assert session.trace.errors == []


async def test_model_endpoint_error_stops_the_run_on_that_turn() -> None:
    model = ScriptedModel("a", ModelEndpointError("upstream 503", status=503))
    async with make_agent(model).chat(PROMPTED) as session:
        await session.turn()
        reply = await session.turn("next")
        assert reply == Reply("", (), True, "model_error")
        await assert_over(session, "model_error")
    failed = session.trace.turns[-1]
    assert failed.response is None
    assert failed.error == "upstream 503"
    assert [(e.kind, e.type) for e in session.trace.errors] == [("model", "ModelEndpointError")]


async def test_harness_catching_exception_cannot_swallow_a_refusal() -> None:
    # issue 41, item 2: the refusal used to be an Exception this harness caught ("I
    # give up" was emitted after it); a refused call now cancels the segment
    class Stubborn(ToolLoopHarness):
        async def launch(self, rollout, prompt) -> None:
            try:
                await super().launch(rollout, prompt)
            except Exception:
                rollout.emit(AssistantMessage("I give up"))

    model = ScriptedModel("a", tool_call("c1"), "never sent")
    agent = make_agent(model, Stubborn(), limits=Limits(max_turns=2))
    async with agent.chat(PROMPTED) as session:
        await session.turn()
        reply = await session.turn("next")
    assert AssistantMessage("I give up") not in reply.messages
    assert [m.role for m in reply.messages] == ["assistant", "tool"]
    assert (reply.stopped, reply.stop_condition) == (True, "max_turns")
    assert len(model.requests) == 2


# 4. FIFO lock ------------------------------------------------------------------------


async def test_concurrent_turns_are_served_in_order_and_never_interleave(
    autojump_clock,
) -> None:
    harness = ToolLoopHarness(sleep=1)
    agent = make_agent(BuiltinModel("echo"), harness)
    replies: dict[int, Reply] = {}
    async with agent.chat(OPEN) as session:

        async def user(i: int) -> None:
            replies[i] = await session.turn(f"message {i}")

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(user, i)
                await trio.testing.wait_all_tasks_blocked()  # i waits on the lock
            assert harness.events == [("start", "message 0")]
    labels = [f"message {i}" for i in range(5)]
    assert harness.events == [e for label in labels for e in (("start", label), ("end", label))]
    assert [replies[i].text for i in range(5)] == labels
    assert trio.current_time() == 5


# 5. close ----------------------------------------------------------------------------


async def test_close_is_idempotent_stamps_user_closed_and_refuses_later_turns() -> None:
    counter = Counter(0.5)
    harness = CloseRecordingHarness()
    closed = []
    agent = make_agent(harness=harness, rewards=[counter], on_close=closed.append)
    session = agent.chat(PROMPTED)
    await session.turn()
    trace = await session.close()
    assert await session.close() is trace
    assert await session.close(reason="other") is trace
    assert trace.stop_condition == "user_closed"
    assert session.state is SessionState.CLOSED
    assert (counter.calls, harness.closed, closed) == (1, 1, [trace])
    assert trace.rewards == {"counted": 0.5}
    with pytest.raises(SessionClosed, match="open a new one"):
        await session.turn("hello?")


async def test_close_after_the_run_ended_keeps_its_stop_condition() -> None:
    agent = make_agent(ScriptedModel(ModelEndpointError("down")))
    session = agent.chat(PROMPTED)
    assert (await session.turn()).stopped
    trace = await session.close()
    assert trace.stop_condition == "model_error"
    with pytest.raises(SessionClosed):
        await session.turn("x")


async def test_closing_a_fresh_session_scores_it() -> None:
    counter = Counter()
    session = make_agent(rewards=[counter]).chat(OPEN)
    trace = await session.close()
    assert (trace.stop_condition, counter.calls, trace.turns) == ("user_closed", 1, [])


async def test_close_cancels_a_running_segment_and_queued_turns_see_closed(
    autojump_clock,
) -> None:
    counter = Counter()
    agent = make_agent(ScriptedModel(Sleep(100)), rewards=[counter])
    session = agent.chat(PROMPTED)
    outcomes: dict[str, object] = {}

    async def first() -> None:
        outcomes["first"] = await session.turn()

    async def queued() -> None:
        with pytest.raises(SessionClosed):
            await session.turn("queued")
        outcomes["queued"] = "closed"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(queued)
        await trio.testing.wait_all_tasks_blocked()
        trace = await session.close(reason="env_error")
    assert trio.current_time() == 0  # the segment was cancelled, not waited for
    assert outcomes == {"first": Reply("", (), True, "env_error"), "queued": "closed"}
    assert trace.stop_condition == "env_error"
    assert counter.calls == 1


async def test_concurrent_closes_all_return_the_scored_trace(autojump_clock) -> None:
    calls = []

    async def slow_reward(task, trace) -> float:
        await trio.sleep(4)
        calls.append(trio.current_time())
        return 1.0

    session = make_agent(rewards=[slow_reward]).chat(PROMPTED)
    await session.turn()
    seen = []

    async def closer() -> None:
        trace = await session.close()
        seen.append((trio.current_time(), trace.rewards["slow_reward"]))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(closer)
            await trio.testing.wait_all_tasks_blocked()  # the first one is scoring
    assert calls == [4]
    assert seen == [(4, 1.0)] * 3


async def test_close_during_a_slow_stop_hook_keeps_the_segment_from_starting(
    autojump_clock,
) -> None:
    @stop
    async def slow_check(trace) -> bool:
        await trio.sleep(3)
        return False

    harness = ToolLoopHarness()
    session = make_agent(harness=harness, rewards=[slow_check]).chat(PROMPTED)
    replies = []

    async def user() -> None:
        replies.append(await session.turn())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user)
        await trio.testing.wait_all_tasks_blocked()  # inside the hook, before the segment
        trace = await session.close(reason="env_error")
    assert harness.prompts == []
    assert replies == [Reply("", (), True, "env_error")]
    assert trace.stop_condition == "env_error"
    # issue 40, item 4: close() used to wait the hook's 3 s out; it cuts it now
    assert trio.current_time() == 0


async def test_close_is_shielded_from_the_callers_cancellation(autojump_clock) -> None:
    async def slow_reward(task, trace) -> float:
        await trio.sleep(2)
        return 1.0

    session = make_agent(rewards=[slow_reward]).chat(PROMPTED)
    with trio.move_on_after(1):
        await session.close()
    assert session.trace.rewards == {"slow_reward": 1.0}
    assert trio.current_time() == 2


async def test_leaving_the_block_normally_closes_as_user_closed() -> None:
    counter = Counter()
    async with make_agent(rewards=[counter]).chat(PROMPTED) as session:
        await session.turn()
    assert (session.state, session.trace.stop_condition) == (SessionState.CLOSED, "user_closed")
    assert counter.calls == 1


async def test_leaving_the_block_by_an_error_closes_as_env_error() -> None:
    counter = Counter()
    session = make_agent(rewards=[counter]).chat(PROMPTED)

    async def body() -> None:
        async with session:
            await session.turn()
            raise RuntimeError("the env broke")

    with pytest.raises(RuntimeError, match="the env broke"):
        await body()
    assert (session.state, session.trace.stop_condition) == (SessionState.CLOSED, "env_error")
    assert counter.calls == 1


async def test_leaving_the_block_by_cancellation_closes_as_cancelled(autojump_clock) -> None:
    counter = Counter()
    with trio.move_on_after(1):
        async with make_agent(ScriptedModel(Sleep(10)), rewards=[counter]).chat(OPEN) as session:
            await session.turn("hello")
    assert trio.current_time() == 1
    assert (session.state, session.trace.stop_condition) == (SessionState.CLOSED, "cancelled")
    assert counter.calls == 1
    assert session.trace.timing.agent_s == 1


# 6. mask_prompt ----------------------------------------------------------------------

SECRET = Task(
    7,
    "secret",
    prompt="The password is swordfish.",
    system_prompt="You are terse.",
    answer="swordfish",
)


async def test_masked_prompt_never_reaches_the_wire_but_the_rubric_sees_it() -> None:
    seen = []

    @reward
    def knows_answer(task, trace) -> float:
        seen.append(task)
        return float(task.answer in str(task.prompt))

    model = ScriptedModel("hmm", "ok")
    agent = make_agent(model, rewards=[knows_answer])
    async with agent.chat(SECRET, mask_prompt=True) as session:
        await session.turn("Guess the password.")
        await session.turn("Try again.")
    trace = session.trace
    assert len(trace.turns) == 2
    for turn in trace.turns:
        assert all("swordfish" not in text_of(m.content) for m in turn.request)
    assert "swordfish" not in " ".join(wire_texts(model))
    assert trace.turns[0].request == (
        SystemMessage("You are terse."),
        UserMessage("Guess the password."),
    )
    assert all("swordfish" not in text_of(m.content) for m in trace.messages)
    assert trace.masked
    assert trace.task.prompt is None
    assert trace.task.idx == 7
    assert seen == [SECRET]
    assert trace.rewards == {"knows_answer": 1.0}


async def test_unmasked_trace_keeps_the_prompt() -> None:
    async with make_agent().chat(SECRET) as session:
        await session.turn()
    assert not session.trace.masked
    assert session.trace.task == SECRET
    assert UserMessage(SECRET.prompt) in session.trace.turns[0].request


# 9. Default resume and system messages --------------------------------------------------


async def test_default_resume_drops_only_the_synthesized_system_message() -> None:
    task = Task(
        3,
        prompt=(SystemMessage("task rules"), UserMessage("start")),
        system_prompt="synthesized",
    )
    harness = ToolLoopHarness()
    model = ScriptedModel()
    async with make_agent(model, harness).chat(task) as session:
        await session.turn()
        await session.turn([SystemMessage("user rules"), UserMessage("go on")])
        await session.turn("once more")
    assert len(harness.prompts) == 3
    for prompt in harness.prompts:
        assert prompt.system_prompt == "synthesized"
        assert SystemMessage("synthesized") not in prompt.messages
        assert prompt.messages[0] == SystemMessage("task rules")
    assert SystemMessage("user rules") in harness.prompts[2].messages
    for request in model.requests:
        systems = [text_of(m.content) for m in request.messages if m.role == "system"]
        assert systems[:2] == ["synthesized", "task rules"]
        assert systems.count("synthesized") == 1
    last = [text_of(m.content) for m in model.requests[-1].messages if m.role == "system"]
    assert last == ["synthesized", "task rules", "user rules"]
    assert session.trace.messages[0] == SystemMessage("synthesized")


async def test_without_a_system_prompt_nothing_is_dropped() -> None:
    task = Task(4, prompt=(SystemMessage("task rules"), UserMessage("start")))
    harness = ToolLoopHarness()
    async with make_agent(harness=harness).chat(task) as session:
        await session.turn()
        await session.turn("next")
    assert harness.prompts[1].system_prompt is None
    assert harness.prompts[1].messages[:2] == (SystemMessage("task rules"), UserMessage("start"))


# Timeouts -------------------------------------------------------------------------------


async def test_rollout_budget_counts_only_time_inside_segments(autojump_clock) -> None:
    harness = ToolLoopHarness(sleep=4)
    agent = make_agent(harness=harness, timeouts=Timeouts(rollout_s=10))
    ends = []
    async with agent.chat(PROMPTED) as session:
        for message in (None, "two", "three"):
            reply = await (session.turn() if message is None else session.turn(message))
            ends.append((trio.current_time(), reply.stop_condition))
            await trio.sleep(100)  # the user thinking: never counts
    assert ends == [(4, None), (108, None), (210, "rollout_timeout")]
    assert session.trace.timing.agent_s == 10


async def test_exhausted_rollout_budget_refuses_the_next_segment(autojump_clock) -> None:
    harness = ToolLoopHarness(sleep=5)
    agent = make_agent(harness=harness, timeouts=Timeouts(rollout_s=5))
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
        assert reply.stop_condition == "rollout_timeout"
        assert trio.current_time() == 5
    assert len(harness.prompts) == 1


async def test_segment_timeout_is_per_segment(autojump_clock) -> None:
    harness = ToolLoopHarness(sleep=3)
    agent = make_agent(harness=harness, timeouts=Timeouts(segment_s=4))
    async with agent.chat(PROMPTED) as session:
        replies = [await session.turn(), await session.turn("b"), await session.turn("c")]
    assert not any(r.stopped for r in replies)
    assert trio.current_time() == 9
    assert session.trace.timing.agent_s == 9


async def test_nearer_of_segment_and_rollout_timeout_wins(autojump_clock) -> None:
    harness = ToolLoopHarness(sleep=100)
    agent = make_agent(harness=harness, timeouts=Timeouts(segment_s=6, rollout_s=5))
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert (reply.stop_condition, trio.current_time()) == ("rollout_timeout", 5)


async def test_scoring_timeout_records_an_error_and_close_still_returns(autojump_clock) -> None:
    async def forever(task, trace) -> float:
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    def quick(task, trace) -> float:
        return 2.0

    harness = CloseRecordingHarness()
    agent = make_agent(harness=harness, rewards=[quick, forever], timeouts=Timeouts(scoring_s=7))
    session = agent.chat(PROMPTED)
    await session.turn()
    trace = await session.close()
    assert trio.current_time() == 7
    assert trace.timing.scoring_s == 7
    assert trace.rewards == {"quick": 2.0}  # unfinished: absent, not 0.0 (issue 40)
    assert trace.reward == 2.0
    [error] = trace.errors
    assert error.kind == "scoring"
    assert "timeouts.scoring_s" in error.message
    assert harness.closed == 1
    assert session.state is SessionState.CLOSED


async def test_slow_harness_aclose_counts_against_the_scoring_timeout(autojump_clock) -> None:
    class SlowClose(ToolLoopHarness):
        async def aclose(self, rollout) -> None:
            await trio.sleep(1000)

    counter = Counter()
    agent = make_agent(harness=SlowClose(), rewards=[counter], timeouts=Timeouts(scoring_s=3))
    trace = await agent.chat(PROMPTED).close()
    assert trio.current_time() == 3
    assert counter.calls == 0
    assert trace.rewards == {}  # unfinished: absent, not 0.0 (issue 40)
    assert [e.kind for e in trace.errors] == ["scoring"]


async def test_failing_harness_aclose_is_recorded_and_scoring_still_runs() -> None:
    class BadClose(ToolLoopHarness):
        async def aclose(self, rollout) -> None:
            raise OSError("cleanup failed")

    counter = Counter()
    trace = await make_agent(harness=BadClose(), rewards=[counter]).chat(PROMPTED).close()
    assert counter.calls == 1
    assert [(e.kind, e.message) for e in trace.errors] == [("harness", "cleanup failed")]


async def test_scratch_dir_is_removed_at_close() -> None:
    made = []

    class Scratchy(ToolLoopHarness):
        async def launch(self, rollout, prompt) -> None:
            path = rollout.scratch_dir()
            assert rollout.scratch_dir() == path
            (path / "state.txt").write_text("x")
            made.append(path)
            await super().launch(rollout, prompt)

    async with make_agent(harness=Scratchy()).chat(PROMPTED) as session:
        await session.turn()
        assert made[0].exists()
    assert not made[0].exists()


async def test_trace_records_timing_and_the_conversation(autojump_clock) -> None:
    model = ScriptedModel(Sleep(2), "four")
    async with make_agent(model).chat(PROMPTED) as session:
        await session.turn()
    trace = session.trace
    assert trace.timing.agent_s == 2
    assert trace.timing.started_at <= trace.timing.ended_at
    assert trace.messages == [UserMessage("What is two plus two?"), AssistantMessage("four")]
    assert trace.last_text == "four"


async def test_turn_and_close_are_checkpoints_on_every_path() -> None:
    session = make_agent().chat(PROMPTED)
    with trio.testing.assert_checkpoints():
        await session.turn()
    with trio.testing.assert_checkpoints():
        await session.close()
    with trio.testing.assert_checkpoints():
        await session.close()  # already closed
    with trio.testing.assert_checkpoints(), pytest.raises(SessionClosed):
        await session.turn("x")


# Issue 23: turn input, a cancelled turn, a cut-off segment whose cleanup raises -------


async def test_turn_accepts_an_openai_shaped_dict() -> None:
    # issue 23, item 6: the dict used to be iterated, sending ("role", "content")
    import json

    from taketurns._output.records import record

    model = ScriptedModel()
    session = make_agent(model).chat(OPEN)
    await session.turn({"role": "user", "content": "hi"})
    await session.turn([{"role": "user", "content": "and"}, UserMessage("more")])
    assert model.requests[0].messages == (UserMessage("hi"),)
    assert model.requests[1].messages[-2:] == (UserMessage("and"), UserMessage("more"))
    trace = await session.close()
    json.dumps(record.unstructure(trace))  # a trace that serialises


@pytest.mark.parametrize(
    "message",
    [42, b"hi", ("role", "content"), [UserMessage("ok"), "a bare string"], object()],
    ids=["int", "bytes", "tuple-of-str", "list-with-str", "object"],
)
async def test_turn_refuses_other_shapes_before_the_segment(message: object) -> None:
    harness = ToolLoopHarness()
    session = make_agent(harness=harness).chat(OPEN)
    with (
        trio.testing.assert_checkpoints(),
        pytest.raises(TypeError, match=r"it accepts|holds messages") as info,
    ):
        await session.turn(message)  # type: ignore[arg-type]
    assert "OpenAI-shaped dict" in str(info.value)
    assert harness.prompts == []
    assert session.trace.messages == []
    assert session.state is SessionState.FRESH
    await session.turn("now properly")  # the session is untouched
    assert harness.prompts[0].messages == (UserMessage("now properly"),)
    await session.close()


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user"}, "turn(message).content is missing"),
        ({"role": "robot", "content": "x"}, "turn(message).role must be one of"),
        ([{"role": "user", "content": 3}], "turn(message)[0].content must be"),
    ],
    ids=["no-content", "bad-role", "bad-content-in-list"],
)
async def test_turn_refuses_a_malformed_dict_naming_the_field(message: object, field: str) -> None:
    session = make_agent().chat(OPEN)
    with pytest.raises(TurnError) as info:
        await session.turn(message)  # type: ignore[arg-type]
    assert field in str(info.value)
    assert session.trace.messages == []
    await session.close()


async def test_a_cancelled_turn_is_rolled_back(autojump_clock) -> None:
    # issue 23, item 8: the unanswered message used to stay, unmarked: [user, user, ...]
    model = ScriptedModel("first answer", tool_call("c1"), Sleep(10))
    harness = ToolLoopHarness()
    session = make_agent(model, harness).chat(OPEN)
    await session.turn("first")
    before = list(session.trace.messages)
    with trio.move_on_after(1) as scope:
        await session.turn("cancelled")  # a tool call, its result, then a stuck call
    assert scope.cancelled_caught
    assert session.trace.messages == before  # the turn never happened, in the history
    assert session.state is SessionState.READY
    assert len(session.trace.turns) == 2  # the model calls it made stay on the trace
    reply = await session.turn("third")
    assert reply.text == "ok"
    assert harness.prompts[-1].messages == (
        UserMessage("first"),
        AssistantMessage("first answer"),
        UserMessage("third"),
    )
    await session.close()
    roles = [m.role for m in session.trace.messages]
    assert roles == ["user", "assistant", "user", "assistant"]


async def test_a_cancelled_opening_leaves_the_session_fresh(autojump_clock) -> None:
    task = Task(0, "p", prompt="open", system_prompt="be brief")
    session = make_agent(ScriptedModel(Sleep(10))).chat(task)
    with trio.move_on_after(1):
        await session.turn()
    assert session.state is SessionState.FRESH
    assert session.trace.messages == []
    with pytest.raises(TurnError):
        await session.turn("not yet")  # still the agent's turn to speak first
    reply = await session.turn()
    assert not reply.stopped
    assert session.trace.messages[:2] == [SystemMessage("be brief"), UserMessage("open")]
    await session.close()


class CleanupRaises(ToolLoopHarness):
    """Its segment waits; cut off, its cleanup raises."""

    async def launch(self, rollout, prompt) -> None:
        try:
            await trio.sleep(100)
        finally:
            raise RuntimeError("cleanup broke")


async def test_a_segment_timeout_whose_cleanup_raises_is_still_the_timeout(autojump_clock) -> None:
    # issue 23, item 5: this used to be harness_error, a failed episode
    from taketurns._exchange.outcome import trace_cause

    agent = make_agent(harness=CleanupRaises(), timeouts=Timeouts(segment_s=5))
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert (reply.stopped, reply.stop_condition) == (True, "segment_timeout")
    trace = session.trace
    assert trace.stop_condition == "segment_timeout"
    assert [(e.kind, e.type, e.message) for e in trace.errors] == [
        ("timeout", "RuntimeError", "cleanup broke")
    ]
    assert trace_cause(trace.stop_condition, [e.kind for e in trace.errors]) is None


async def test_a_close_whose_segment_cleanup_raises_is_still_the_close(autojump_clock) -> None:
    from taketurns._exchange.outcome import trace_cause

    session = make_agent(harness=CleanupRaises()).chat(PROMPTED)
    replies: list[Reply] = []

    async def user() -> None:
        replies.append(await session.turn())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user)
        await trio.testing.wait_all_tasks_blocked()
        trace = await session.close()
    assert replies == [Reply("", (), True, "user_closed")]
    assert [(e.kind, e.type) for e in trace.errors] == [("cancelled", "RuntimeError")]
    assert trace_cause(trace.stop_condition, [e.kind for e in trace.errors]) is None


async def test_a_harness_failing_on_its_own_is_still_a_harness_error(autojump_clock) -> None:
    # the timeout rule above covers only a segment being cut off
    agent = make_agent(harness=FailingHarness(), timeouts=Timeouts(segment_s=5))
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
    assert reply.stop_condition == "harness_error"
