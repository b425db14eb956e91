"""Token-level samples: the built-in model's toy tokens, merged multi-turn samples with
their loss mask, splits at a divergence, self-play seats, and the vLLM wire fields
over real loopback HTTP (a fake vLLM server and ``taketurns serve``)."""

from __future__ import annotations

import json
from collections import deque

import attrs
import httpx2
import hypothesis.strategies as st
import trio
from httpservers import serve_app
from hypothesis import given, settings
from quart import Response, request
from quart_trio import QuartTrio
from segments import HoldingHarness, held_segment

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    EvalConfig,
    Message,
    Sampling,
    Task,
    Trace,
    UserMessage,
    load_eval_config,
)
from taketurns._eval.episode import Episode, run_episode
from taketurns._eval.plan import Plan, make_env
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, Turn
from taketurns._http.server import serve
from taketurns._models.tokens import END, ROLE_TOKENS, completion_ids, prompt_ids
from taketurns.env import ModelRequest, env_registry
from taketurns.envs.kuhn import KuhnConfig
from taketurns.http import OpenAIClient, open_interception_server
from taketurns.testing import BuiltinModel
from taketurns.train import episode_samples, trace_samples

ASK = {"logprobs": True}


def _turn(index: int, messages: list[Message], model: BuiltinModel) -> Turn:
    response = model.respond(ModelRequest("builtin/echo", tuple(messages), (), ASK))
    return Turn(
        index,
        tuple(messages),
        response.message,
        token_ids=response.token_ids,
        prompt_token_ids=response.prompt_token_ids,
        logprobs=response.logprobs,
    )


def _trace() -> Trace:
    return Trace(AgentStamp("me", "builtin/echo", "null"), EpisodeInfo("e/0/0", "e", 0), Task(0))


def converse(user_texts: list[str]) -> Trace:
    """A multi-turn conversation with the echo policy, every turn's history kept."""
    model = BuiltinModel("echo")
    trace = _trace()
    messages: list[Message] = []
    for i, text in enumerate(user_texts):
        messages.append(UserMessage(text))
        turn = _turn(i, messages, model)
        trace.turns.append(turn)
        assert turn.response is not None
        messages.append(turn.response)
    return trace


def test_builtin_model_returns_tokens_only_when_asked() -> None:
    model = BuiltinModel("bracket")
    messages = (UserMessage("Pick one: [check] [bet]"),)
    plain = model.respond(ModelRequest("m", messages))
    assert plain.token_ids is None
    assert plain.prompt_token_ids is None
    assert plain.logprobs is None
    for ask in ({"logprobs": True}, {"return_token_ids": True}):
        asked = model.respond(ModelRequest("m", messages, (), ask))
        assert asked.message == plain.message
        assert asked.usage == plain.usage
        assert asked.prompt_token_ids == prompt_ids(messages)
        assert asked.token_ids == completion_ids(asked.message)
        assert asked.token_ids[-1] == END
        assert asked.logprobs is not None
        assert len(asked.logprobs) == len(asked.token_ids)
        assert all(-1 <= lp < 0 for lp in asked.logprobs)
        again = model.respond(ModelRequest("m", messages, (), ask))
        assert again == asked  # deterministic


def test_a_cut_off_completion_has_no_end_token() -> None:
    model = BuiltinModel("echo")
    request = ModelRequest("m", (UserMessage("one two three four"),), (), ASK | {"max_tokens": 2})
    response = model.respond(request)
    assert response.finish_reason == "length"
    assert response.token_ids is not None
    assert len(response.token_ids) == 2
    assert END not in response.token_ids


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abc xyz", min_size=0, max_size=20), min_size=1, max_size=6))
def test_merged_sample_is_the_concatenated_turns_with_the_right_mask(texts: list[str]) -> None:
    trace = converse(texts)
    (sample,) = trace_samples(trace)
    turns = trace.turns
    assert sample.reason is None
    assert sample.turns == tuple(range(len(turns)))
    assert sample.prompt_ids == turns[0].prompt_token_ids
    last = turns[-1]
    assert last.prompt_token_ids is not None
    assert last.token_ids is not None
    # the whole sequence is the last prompt plus the last completion
    assert sample.input_ids == last.prompt_token_ids + last.token_ids
    assert len(sample.completion_mask) == len(sample.completion_ids)
    # the masked-in tokens are exactly the model's completions, in order
    own = [t for t, m in zip(sample.completion_ids, sample.completion_mask, strict=True) if m]
    assert own == [t for turn in turns for t in turn.token_ids or []]
    # each turn's prompt is a prefix of the sequence, ending just before its completion
    position = 0
    for turn in turns:
        assert turn.prompt_token_ids is not None
        assert turn.token_ids is not None
        start = len(turn.prompt_token_ids) - len(sample.prompt_ids)
        assert sample.input_ids[: len(turn.prompt_token_ids)] == turn.prompt_token_ids
        assert sample.completion_mask[position:start] == [0] * (start - position)
        end = start + len(turn.token_ids)
        assert sample.completion_mask[start:end] == [1] * len(turn.token_ids)
        position = end
    logprobs = sample.completion_logprobs
    assert logprobs is not None
    own_lp = [lp for lp, m in zip(logprobs, sample.completion_mask, strict=True) if m]
    assert own_lp == [lp for turn in turns for lp in turn.logprobs or []]
    assert all(lp == 0.0 for lp, m in zip(logprobs, sample.completion_mask, strict=True) if not m)


def test_a_rewritten_history_splits_the_sample_and_says_where() -> None:
    model = BuiltinModel("echo")
    trace = _trace()
    first = [UserMessage("hello there")]
    trace.turns.append(_turn(0, first, model))
    # turn 1 is sent with the history rewritten: the first reply was replaced
    second: list[Message] = [*first, AssistantMessage("something else"), UserMessage("again")]
    trace.turns.append(_turn(1, second, model))
    third = [*second, trace.turns[1].response, UserMessage("and again")]
    trace.turns.append(_turn(2, [m for m in third if m is not None], model))
    one, two = trace_samples(trace)
    assert one.turns == (0,)
    assert one.reason is None
    assert one.completion_mask == [1] * len(one.completion_ids)
    assert two.turns == (1, 2)
    assert two.reason is not None
    # the sequences agree on the prompt of turn 0 (its 4 tokens + <assistant>), then
    # differ at the first word of the reply
    first_prompt = prompt_ids(first)
    assert "turn 1's prompt does not extend turn 0's" in two.reason
    assert f"differ at token {len(first_prompt)}" in two.reason
    assert two.prompt_ids == trace.turns[1].prompt_token_ids


def test_a_turn_without_token_ids_splits_the_sample() -> None:
    trace = converse(["a b", "c d", "e f"])
    trace.turns[1] = attrs.evolve(trace.turns[1], token_ids=None, prompt_token_ids=None)
    one, two = trace_samples(trace)
    assert (one.turns, two.turns) == ((0,), (2,))
    assert two.reason == "turn 1 came without token ids"
    assert one.turn_token_gaps == two.turn_token_gaps == (None,)
    # a client that knows why a turn has no ids says so, and the split quotes it; a
    # merged turn's gap (logprobs left out) rides along with its turn
    gapped = attrs.evolve(trace.turns[1], token_gap="tool call: none returned")
    lacking = attrs.evolve(trace.turns[2], token_gap="no logprobs: a grammar")
    one, two = trace_samples(attrs.evolve(trace, turns=[trace.turns[0], gapped, lacking]))
    assert two.reason == "turn 1 came without token ids (tool call: none returned)"
    assert two.turn_token_gaps == ("no logprobs: a grammar",)
    failed = converse(["a b", "c d"])
    failed.turns[0] = attrs.evolve(failed.turns[0], response=None, error="boom")
    (only,) = trace_samples(failed)
    assert only.turns == (1,)
    assert only.reason == "turn 0 failed"


def test_a_trace_without_tokens_gives_no_sample() -> None:
    trace = converse(["a"])
    trace.turns[0] = attrs.evolve(trace.turns[0], token_ids=None)
    assert trace_samples(trace) == []


async def run_one(config: EvalConfig) -> Episode:
    env = make_env(config)
    plan = Plan(config, env)
    task = env.tasks(1)[0]
    episode = Episode(f"{env.id}/0/0", env.id, task)
    try:
        return await run_episode(env, episode, plan.make_agent)
    finally:
        await plan.aclose()


async def test_self_play_seats_are_each_their_own_samples() -> None:
    config = EvalConfig(env_id="kuhn-poker", sampling=Sampling(logprobs=True))
    episode = await run_one(config)
    assert episode.ok
    samples = episode_samples(episode)
    assert {s.agent for s in samples} == {"player0", "player1"}
    for trace in episode.traces:
        mine = [s for s in samples if s.agent == trace.agent.name]
        assert mine == trace_samples(trace)
        assert mine
        assert sum(len(s.turns) for s in mine) == len(trace.turns)
        assert all(s.reward == trace.reward for s in mine)
    # an untrainable seat gives no samples
    config.env = KuhnConfig(player1=AgentConfig(trainable=False))
    episode = await run_one(config)
    assert {s.agent for s in episode_samples(episode)} == {"player0"}


def _vllm_app(seen: list[dict[str, object]], bodies: deque[dict[str, object]]) -> QuartTrio:
    app = QuartTrio("fake-vllm")

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        seen.append(json.loads(await request.get_data(as_text=True)))
        return Response(json.dumps(bodies.popleft()), mimetype="application/json")

    return app


def _vllm_body(*, token_ids: bool) -> dict[str, object]:
    choice: dict[str, object] = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi there"},
        "finish_reason": "stop",
        "logprobs": {
            "content": [
                {"token": "token_id:901", "logprob": -0.5, "top_logprobs": []},
                {"token": "token_id:902", "logprob": -0.25, "top_logprobs": []},
                {"token": "token_id:2", "logprob": -0.125, "top_logprobs": []},
            ]
        },
    }
    body: dict[str, object] = {"model": "policy-step-7", "choices": [choice]}
    if token_ids:
        choice["token_ids"] = [901, 902, 2]
        body["prompt_token_ids"] = [1, 5, 9]
    return body


async def test_vllm_wire_fields_reach_the_turn(nursery: trio.Nursery) -> None:
    seen: list[dict[str, object]] = []
    bodies = deque([_vllm_body(token_ids=True), _vllm_body(token_ids=False)])
    root = await nursery.start(serve_app, _vllm_app(seen, bodies))
    sampling = Sampling(logprobs=True, extra={"return_token_ids": True})
    async with OpenAIClient(f"{root}/v1", retries=0) as client:
        request = ModelRequest("policy", (UserMessage("hi"),), (), sampling.request_fields())
        with_ids = await client.complete(request)
        only_logprobs = await client.complete(request)
    assert seen[0]["logprobs"] is True
    assert seen[0]["return_token_ids"] is True
    assert with_ids.token_ids == [901, 902, 2]
    assert with_ids.prompt_token_ids == [1, 5, 9]
    assert with_ids.logprobs == [-0.5, -0.25, -0.125]
    assert with_ids.policy_version == "policy-step-7"
    # return_tokens_as_token_ids alone: the ids come from the logprob entries
    assert only_logprobs.token_ids == [901, 902, 2]
    assert only_logprobs.prompt_token_ids is None


async def test_builtin_server_speaks_the_vllm_token_fields(nursery: trio.Nursery) -> None:
    model = BuiltinModel("echo")
    base_url = await nursery.start(serve, model)
    messages = (UserMessage("one two"), AssistantMessage("one two"), UserMessage("three"))
    request = ModelRequest("builtin/echo", messages, (), {"return_token_ids": True})
    async with OpenAIClient(base_url, retries=0) as client:
        response = await client.complete(request)
    local = model.respond(request)
    assert response.token_ids == local.token_ids
    assert response.prompt_token_ids == local.prompt_token_ids
    assert response.logprobs == local.logprobs
    assert response.policy_version == "builtin/echo"


async def test_token_data_is_kept_for_programs_behind_the_interception_server() -> None:
    async with open_interception_server(graceful_timeout=0.1) as server:
        agent = Agent(
            "agent",
            AgentConfig(model="builtin/echo", sampling=Sampling(logprobs=True)),
            harness=HoldingHarness(),
            services={"interception": server},
        )
        chat = agent.chat(Task(0, prompt="go"))
        async with chat as session, held_segment(session) as endpoint:
            headers = {"authorization": f"Bearer {endpoint.secret}"}
            body = {"messages": [{"role": "user", "content": "hello you"}]}
            async with httpx2.AsyncClient(timeout=20) as http:
                answer = await http.post(
                    f"{endpoint.base_url}/chat/completions", json=body, headers=headers
                )
            trace = session.trace
    assert answer.status_code == 200, answer.text
    (turn,) = trace.turns
    assert turn.token_ids is not None
    assert turn.prompt_token_ids == prompt_ids((UserMessage("hello you"),))
    # the program got vLLM's fields too
    data = answer.json()
    assert data["choices"][0]["token_ids"] == turn.token_ids
    assert data["prompt_token_ids"] == turn.prompt_token_ids
    (sample,) = trace_samples(trace)
    assert sample.completion_ids == turn.token_ids


async def test_a_multi_turn_env_gives_one_merged_sample_per_trace() -> None:
    config = EvalConfig(env_id="color-codeword", sampling=Sampling(logprobs=True))
    episode = await run_one(config)
    (trace,) = episode.traces
    assert len(trace.turns) >= 2
    (sample,) = episode_samples(episode)
    assert sample.turns == tuple(range(len(trace.turns)))
    assert sample.reason is None
    assert sum(sample.completion_mask) == sum(len(t.token_ids or []) for t in trace.turns)
    assert 0 in sample.completion_mask  # the env's feedback between the guesses


async def test_a_tool_loop_merges_with_the_tool_results_masked_out() -> None:
    config = load_eval_config(
        env_registry.get("single-agent").config_class,
        file_data={"env_id": "single-agent", "model": "builtin/tools"},
        overrides=[("env.taskset", "retail-lite"), ("sampling.logprobs", "true")],
    )
    episode = await run_one(config)
    (trace,) = episode.traces
    assert trace.agent.harness == "tools"
    assert len(trace.turns) == 2  # a tool call, then the answer
    (sample,) = episode_samples(episode)
    assert sample.turns == (0, 1)
    first = trace.turns[0]
    assert first.response is not None
    assert first.response.tool_calls
    # between the two completions: the tool's result and the next generation prompt
    gap = sample.completion_mask.index(0)
    assert gap == len(first.token_ids or [])
    assert sample.completion_ids[gap] == ROLE_TOKENS["tool"]


async def test_each_turn_and_sample_carry_finish_reason_stop_token_and_sampling() -> None:
    sampling = Sampling(logprobs=True, temperature=0.5, max_tokens=3)
    episode = await run_one(EvalConfig(env_id="color-codeword", sampling=sampling))
    (trace,) = episode.traces
    sent = {"logprobs": True, "temperature": 0.5, "max_tokens": 3}
    assert all(t.sampling == sent for t in trace.turns)  # the seed is Turn.seed
    (sample,) = episode_samples(episode)
    assert sample.sampling == sent
    reasons = tuple(t.finish_reason for t in trace.turns)
    assert sample.turn_finish_reasons == reasons
    assert sample.turn_truncated == tuple(r == "length" for r in reasons)
    assert sample.truncated == ("length" in reasons)
    for turn, stop in zip(trace.turns, sample.turn_stop_tokens, strict=True):
        # the toy tokenizer's END is the last completion token of a finished reply
        assert turn.token_ids is not None
        if turn.finish_reason == "stop":
            assert stop == "sampled"
            assert turn.token_ids[-1] == END
        else:
            assert stop is None
            assert END not in turn.token_ids


def test_a_cut_turn_makes_the_sample_truncated_and_other_sampling_splits_it() -> None:
    model = BuiltinModel("echo")
    trace = _trace()
    messages: list[Message] = []
    for i, extra in enumerate(({"max_tokens": 1}, {}, {"temperature": 0.3})):
        messages.append(UserMessage("one two three"))
        sent = ASK | extra
        response = model.respond(ModelRequest("builtin/echo", tuple(messages), (), sent))
        trace.turns.append(
            Turn(
                i,
                tuple(messages),
                response.message,
                finish_reason=response.finish_reason,
                token_ids=response.token_ids,
                prompt_token_ids=response.prompt_token_ids,
                logprobs=response.logprobs,
                sampling=dict(sent),
                stop_token=response.stop_token,
            )
        )
        messages.append(response.message)
    first, second, third = trace_samples(trace)
    assert first.turns == (0,)
    assert first.truncated
    assert first.turn_finish_reasons == ("length",)
    assert first.turn_stop_tokens == (None,)
    # the cut reply and the next one were sent other max_tokens: each is its own sample
    assert second.reason is not None
    assert "was sent other sampling" in second.reason
    assert not second.truncated
    assert second.turn_stop_tokens == ("sampled",)
    assert third.sampling == ASK | {"temperature": 0.3}
