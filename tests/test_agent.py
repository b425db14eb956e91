"""``Agent`` and ``Agents``: construction, ``run`` (contract line 7), the chat
capability check (line 8), sampling, the model-call limiter and stamps."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from scripted import (
    Counter,
    FailingHarness,
    ScriptedModel,
    Sleep,
    TextHarness,
    TextResumeHarness,
    ToolLoopHarness,
    make_agent,
    tool_call,
)

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    ConfigError,
    HarnessError,
    Message,
    ModelEndpointError,
    Sampling,
    SessionOver,
    Task,
    TurnError,
    UserMessage,
)
from taketurns.env import AgentStamp, EpisodeInfo
from taketurns.harness import Harness, NullHarness, Rollout, can_chat
from taketurns.testing import BuiltinModel

PROMPTED = Task(0, "prompted", prompt="What is two plus two?")
OPEN = Task(1, "open")


# Construction -----------------------------------------------------------------------


def test_defaults_are_the_builtin_model_and_the_null_harness() -> None:
    agent = Agent("me")
    assert isinstance(agent.client, BuiltinModel)
    assert agent.client.policy == "bracket"
    assert isinstance(agent.harness, NullHarness)
    assert agent.stamp == AgentStamp("me", "builtin/bracket", "null", True)


def test_builtin_model_options_are_parsed() -> None:
    agent = Agent("me", AgentConfig(model="builtin/echo?latency_ms=25&seed=3", trainable=False))
    assert isinstance(agent.client, BuiltinModel)
    assert (agent.client.policy, agent.client.latency, agent.client.seed) == ("echo", 0.025, 3)
    assert agent.stamp == AgentStamp("me", "builtin/echo?latency_ms=25&seed=3", "null", False)


@pytest.mark.parametrize(
    "config",
    [AgentConfig(model="gpt-4o"), AgentConfig(model="builtin/echo", base_url="http://x/v1")],
)
def test_an_endpoint_model_needs_an_explicit_client(config: AgentConfig) -> None:
    with pytest.raises(ConfigError, match=r"player\.model: .* pass client="):
        Agent("player", config)


def test_an_unknown_builtin_policy_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"player\.model: unknown built-in policy 'nope'"):
        Agent("player", AgentConfig(model="builtin/nope"))


def test_an_unknown_builtin_policy_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown built-in policy 'nope'; choose one of .*echo"):
        Agent("player", AgentConfig(model="builtin/nope"))


def test_an_unknown_harness_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown harness 'nope'.*null"):
        Agent("me", AgentConfig(harness="nope"))


# Sampling and the limiter --------------------------------------------------------------


async def test_sampling_is_sent_with_every_call_over_the_given_defaults() -> None:
    # the role's own sampling wins; ``sampling=`` (the eval's) fills its unset fields
    model = ScriptedModel()
    config = AgentConfig(sampling=Sampling(temperature=0.2, top_p=0.9, extra={"top_k": 5}))
    agent = Agent(
        "me",
        config,
        client=model,
        harness=ToolLoopHarness(),
        sampling=Sampling(temperature=0.7, seed=1),
    )
    async with agent.chat(PROMPTED) as session:
        await session.turn()
        await session.turn("again")
    expected = {"temperature": 0.2, "top_p": 0.9, "seed": 1, "top_k": 5}
    assert [dict(r.sampling) for r in model.requests] == [expected, expected]
    assert all(r.model == "builtin/bracket" for r in model.requests)


async def test_the_model_call_limiter_bounds_calls_in_flight(autojump_clock) -> None:
    async def drive(limiter: trio.CapacityLimiter | None) -> tuple[int, float]:
        model = ScriptedModel(*[Sleep(1)] * 3)
        agent = make_agent(model, limiter=limiter)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(agent.run, Task(i, prompt=f"q{i}"))
        return model.max_in_flight, trio.current_time() - start

    assert await drive(None) == (3, 1)
    assert await drive(trio.CapacityLimiter(1)) == (1, 3)
    assert await drive(trio.CapacityLimiter(2)) == (2, 2)


async def test_the_limiter_is_released_when_the_endpoint_fails() -> None:
    limiter = trio.CapacityLimiter(1)
    agent = make_agent(ScriptedModel(ModelEndpointError("boom")), limiter=limiter)
    trace = await agent.run(PROMPTED)
    assert trace.stop_condition == "model_error"
    assert limiter.borrowed_tokens == 0


async def test_tools_and_services_reach_the_harness() -> None:
    seen = {}

    class Peek(ToolLoopHarness):
        async def launch(self, rollout, prompt) -> None:
            seen["tools"], seen["services"] = rollout.tools, rollout.services
            await super().launch(rollout, prompt)

    def calculator(expression: str) -> str:
        return expression

    agent = make_agent(harness=Peek(), tools=[calculator], services={"db": "sqlite"})
    await agent.run(PROMPTED)
    assert seen == {"tools": (calculator,), "services": {"db": "sqlite"}}


async def test_a_trace_outside_an_episode_is_stamped_with_the_task() -> None:
    trace = await make_agent(name="solo").run(Task(42, prompt="hi"))
    assert trace.episode == EpisodeInfo("", "", 42)
    assert trace.agent == AgentStamp("solo", "scripted", "scripted", True)


async def test_an_episode_stamp_is_shared_by_every_trace() -> None:
    info = EpisodeInfo("env/3/1", "env", 3, 1)
    agent = make_agent(episode=info)
    first = await agent.run(PROMPTED)
    async with agent.chat(OPEN) as session:
        await session.turn("hello")
    assert first.episode is info
    assert session.trace.episode is info


# 7. agent.run is the one-call special case ------------------------------------------------


async def test_run_is_one_segment_on_the_prompt_closed_as_agent_completed() -> None:
    counter = Counter()
    harness = ToolLoopHarness()
    model = ScriptedModel(tool_call("c1"), "four")
    closed = []
    agent = make_agent(model, harness, rewards=[counter], on_close=closed.append)
    trace = await agent.run(PROMPTED)
    assert trace.stop_condition == "agent_completed"
    assert len(harness.prompts) == 1
    assert len(trace.turns) == 2
    assert trace.last_text == "four"
    assert trace.info["attempts"] == 1
    assert counter.calls == 1
    assert closed == [trace]
    assert agent.sessions == []  # closed sessions are no longer the agent's


async def test_run_that_stops_keeps_its_stop_condition() -> None:
    trace = await make_agent(ScriptedModel(ModelEndpointError("down"))).run(PROMPTED)
    assert trace.stop_condition == "model_error"
    assert trace.info["attempts"] == 1


async def test_run_retries_a_failed_segment_and_keeps_only_the_last_attempt() -> None:
    harness = FailingHarness(fail_on=0)
    counter = Counter()
    closed = []
    agent = make_agent(
        ScriptedModel("second try"), harness, rewards=[counter], retries=2, on_close=closed.append
    )
    trace = await agent.run(PROMPTED)
    assert harness.segments == 2
    assert trace.stop_condition == "agent_completed"
    assert trace.info["attempts"] == 2
    assert trace.errors == []
    assert trace.last_text == "second try"
    assert closed == [trace]  # the retried attempt never joins
    assert counter.calls == 1  # and is never scored
    assert agent.sessions == []


async def test_run_retries_model_errors_until_they_run_out() -> None:
    model = ScriptedModel(ModelEndpointError("a"), ModelEndpointError("b"), "never")
    closed = []
    agent = make_agent(model, retries=1, on_close=closed.append)
    trace = await agent.run(PROMPTED)
    assert len(model.requests) == 2
    assert trace.info["attempts"] == 2
    assert trace.stop_condition == "model_error"
    assert closed == [trace]


async def test_run_does_not_retry_a_limit_or_a_success() -> None:
    model = ScriptedModel()
    agent = make_agent(model, retries=3)
    trace = await agent.run(PROMPTED)
    assert (trace.info["attempts"], len(model.requests)) == (1, 1)


async def test_run_retries_zero_by_default() -> None:
    harness = FailingHarness(fail_on=0)
    trace = await make_agent(harness=harness).run(PROMPTED)
    assert harness.segments == 1
    assert trace.stop_condition == "harness_error"


async def test_chat_never_retries() -> None:
    harness = FailingHarness(fail_on=0)
    agent = make_agent(harness=harness, retries=3)
    async with agent.chat(PROMPTED) as session:
        reply = await session.turn()
        assert reply.stop_condition == "harness_error"
        with pytest.raises(SessionOver):
            await session.turn("again")
    assert harness.segments == 1
    assert agent.sessions == []


async def test_run_needs_a_prompted_task() -> None:
    with pytest.raises(TurnError, match=r"use agent\.chat\(task\)"):
        await make_agent().run(OPEN)


# 8. Multi-turn capability is declared by the harness ---------------------------------------


def test_can_chat_follows_the_declarations() -> None:
    assert can_chat(ToolLoopHarness())  # launch takes a Prompt: default resume relaunches
    assert can_chat(NullHarness())
    assert can_chat(TextResumeHarness())  # takes_text, resumes natively
    assert not can_chat(TextHarness())  # takes_text, no native resume: one-shot
    assert (TextHarness.takes_text, TextHarness.resumes) == (True, False)
    assert (NullHarness.takes_text, NullHarness.resumes) == (False, False)


@pytest.mark.parametrize("harness", ["relaunch", "text"])
async def test_a_harness_importing_its_types_under_type_checking_chats_and_runs(
    harness: str,
) -> None:
    # issue 23, item 4: capability used to come from typing.get_type_hints, which raised
    # NameError here (chat) or recorded harness_error (run)
    from typechecked_harness import TypeCheckedHarness, TypeCheckedTextHarness

    cls = TypeCheckedHarness if harness == "relaunch" else TypeCheckedTextHarness
    async with make_agent(harness=cls()).chat(PROMPTED) as session:
        assert not (await session.turn()).stopped
        assert not (await session.turn("again")).stopped
    assert session.trace.errors == []
    trace = await make_agent(harness=cls()).run(PROMPTED)
    assert trace.stop_condition == "agent_completed"
    assert trace.errors == []


def test_declarations_are_checked_when_the_class_is_defined() -> None:
    with pytest.raises(TypeError, match=r"takes_text = 'yes'; declare it True or False"):

        class NotABool(Harness):
            takes_text = "yes"  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"declares resumes = True but defines no resume\(\)"):

        class NoResume(Harness):
            resumes = True

    with pytest.raises(TypeError, match=r"takes text and does not declare resumes = True"):

        class Undeclared(TextHarness):
            async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
                pass


def test_chat_on_a_text_only_harness_fails_at_once() -> None:
    agent = make_agent(harness=TextHarness())
    with pytest.raises(HarnessError, match=r"cannot chat.*use agent\.run\(task\)"):
        agent.chat(PROMPTED)  # chat() itself refuses, before any session exists
    assert agent.sessions == []


def test_a_harness_class_without_an_id_is_named_by_its_class() -> None:
    """Not ``'null'`` (the built-in null harness's id): errors and traces name it."""
    agent = Agent("agent", client=ScriptedModel(), harness=TextHarness())
    with pytest.raises(HarnessError, match=r"^harness 'TextHarness' cannot chat"):
        agent.chat(PROMPTED)
    assert agent.harness_id == "TextHarness"


async def test_text_only_harness_still_runs_one_shot() -> None:
    harness = TextHarness()
    trace = await make_agent(ScriptedModel("4"), harness).run(PROMPTED)
    assert harness.prompts == ["What is two plus two?"]
    assert trace.last_text == "4"


async def test_text_harness_with_native_resume_chats() -> None:
    harness = TextResumeHarness()
    async with make_agent(ScriptedModel("4", "6"), harness).chat(PROMPTED) as session:
        await session.turn()
        reply = await session.turn("and 3+3?")
    assert harness.prompts == ["What is two plus two?"]
    assert harness.resumed == [(UserMessage("and 3+3?"),)]
    assert reply.text == "6"


async def test_text_harness_with_native_resume_opened_by_the_user() -> None:
    harness = TextResumeHarness()
    async with make_agent(harness=harness).chat(OPEN) as session:
        await session.turn("hello")
    assert harness.prompts == ["hello"]


# Agents ------------------------------------------------------------------------------------


def test_agents_by_role() -> None:
    a, b = make_agent(name="a"), make_agent(name="b")
    agents = Agents({"player0": a, "player1": b})
    assert agents["player0"] is a
    assert agents.player1 is b
    assert list(agents) == ["player0", "player1"]
    assert len(agents) == 2
    with pytest.raises(AttributeError, match=r"no agent 'judge'; roles: \['player0', 'player1'\]"):
        _ = agents.judge
    with pytest.raises(KeyError):
        _ = agents["judge"]
