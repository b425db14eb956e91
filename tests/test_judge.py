"""LLM judges as rewards: the verdict format, the built-in judge, an OpenAI-compatible
fake endpoint (garbage, errors, timeouts), recording apart from the agent's turns,
the cache, masked prompts, and the jsonl / user-sim options."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from faultserver import OK, Call, Fault, FaultyEndpoint, in_thread
from httpservers import OK_BODY, Answer, start_scripted
from hypothesis import given
from hypothesis import strategies as st

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    ConfigError,
    Judge,
    Task,
    Timeouts,
    load_eval_config,
)
from taketurns._cli.main import main
from taketurns._config.registry import envs
from taketurns._eval.plan import make_env, preflight
from taketurns._output.records import loads_episode, read_episodes
from taketurns.env import ModelClient, ModelRequest, ModelResponse
from taketurns.taskset import open_taskset, parse_verdict


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("VERDICT: CORRECT", 1.0),
        ("The answer matches.\nverdict: correct", 1.0),
        ("Close, but no.\nVERDICT: INCORRECT", 0.0),
        ("**VERDICT: INCORRECT**", 0.0),
        ("SCORE: 0.25", 0.25),
        ("VERDICT: INCORRECT\n(on reflection)\nVERDICT: CORRECT", 1.0),  # the last counts
        ("SCORE: 1", 1.0),
        ("SCORE: 1.5", None),  # out of range
        ("SCORE: -0.1", None),
        ("I think it is correct.", None),
        ("The VERDICT: CORRECT is what I would say", None),  # not a verdict line
        ("", None),
    ],
)
def test_verdict_format(reply: str, score: float | None) -> None:
    assert parse_verdict(reply) == score


def _agent(judge: Judge, model: str = "builtin/echo", **config: object) -> Agent:
    return Agent("a", AgentConfig(model=model, **config), rubric=judge.rubric())


async def test_builtin_judge_rewards_and_is_recorded_apart_from_the_turns() -> None:
    judge = Judge()
    agent = _agent(judge)
    right = await agent.run(Task(0, prompt="the answer is 42", answer="42"))
    wrong = await agent.run(Task(1, prompt="no idea", answer="42"))
    assert (right.rewards, right.reward) == ({"judge": 1.0}, 1.0)
    assert wrong.rewards == {"judge": 0.0}
    assert right.errors == wrong.errors == []
    (call,) = right.judge_calls
    assert (call.judge, call.model, call.response, call.score) == (
        "judge",
        "builtin/judge",
        "VERDICT: CORRECT",
        1.0,
    )
    assert "<response>\nthe answer is 42\n</response>" in call.request[0].content
    assert call.usage.total_tokens > 0
    # not one of the agent's turns, and not the agent's usage
    assert len(right.turns) == 1
    assert right.usage == right.turns[0].usage
    assert all("grading" not in m.content for t in right.turns for m in t.request)


async def test_judgements_are_cached_per_task_and_answer() -> None:
    judge = Judge()
    agent = _agent(judge)
    task = Task(0, prompt="say 42", answer="42")
    first, second = await agent.run(task), await agent.run(task)
    other = await agent.run(Task(1, prompt="say 42", answer="42"))  # another task
    assert [c.cached for c in first.judge_calls + second.judge_calls] == [False, True]
    assert second.judge_calls[0].request == ()
    assert second.rewards == first.rewards == other.rewards == {"judge": 1.0}
    assert other.judge_calls[0].cached is False


async def test_a_reply_without_a_verdict_writes_no_reward_and_an_error() -> None:
    judge = Judge(prompt="Is this right? {response}")  # no tags: builtin/judge cannot tell
    trace = await _agent(judge).run(Task(0, prompt="hi", answer="hi"))
    assert trace.rewards == {}  # never computed: absent, not a 0.0 (issue 40)
    (error,) = trace.errors
    assert error.kind == "scoring"
    assert "holds no verdict ('I cannot judge this" in error.message
    assert "'VERDICT: CORRECT', 'VERDICT: INCORRECT' or 'SCORE: x'" in error.message
    (call,) = trace.judge_calls
    assert call.score is None
    assert call.error is not None
    # a failed judgement is not cached
    again = await _agent(judge).run(Task(0, prompt="hi", answer="hi"))
    assert again.judge_calls[0].cached is False


async def test_the_judge_sees_the_real_row_when_the_prompt_was_masked() -> None:
    judge = Judge(
        prompt="<reference>{answer}</reference> for {prompt}: <response>{response}</response>"
    )
    agent = _agent(judge)
    task = Task(0, prompt="secret scenario", answer="ok")
    async with agent.chat(task, mask_prompt=True) as session:
        await session.turn("ok then")
    trace = session.trace
    assert trace.task.prompt is None  # the masked view
    assert "for secret scenario:" in trace.judge_calls[0].request[0].content
    assert trace.rewards == {"judge": 1.0}


def _body(text: str) -> dict:
    body = json.loads(json.dumps(OK_BODY))
    body["choices"][0]["message"]["content"] = text
    return body


async def test_judge_over_an_openai_compatible_endpoint(nursery: trio.Nursery) -> None:
    endpoint = await start_scripted(nursery, Answer(body=_body("Mostly.\nSCORE: 0.75")))
    config = AgentConfig(model="judge-model", base_url=endpoint.base_url)
    config.sampling.temperature = 0.0
    judge = Judge("quality", config, system_prompt="Be strict.")
    try:
        trace = await _agent(judge).run(Task(0, prompt="q", answer="a"))
    finally:
        await judge.aclose()
    assert trace.rewards == {"quality": 0.75}
    (seen,) = endpoint.seen
    assert seen.body["model"] == "judge-model"
    assert seen.body["temperature"] == 0.0
    assert [m["role"] for m in seen.body["messages"]] == ["system", "user"]
    assert "<reference>\na\n</reference>" in seen.body["messages"][1]["content"]
    (call,) = trace.judge_calls
    assert call.usage.total_tokens == 5  # the endpoint's usage, kept on the judge call
    assert trace.usage == trace.turns[0].usage  # and not on the agent's


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Answer(body=_body("I refuse to grade.")), "holds no verdict ('I refuse to grade.')"),
        (Answer(body=_body("SCORE: 7")), "holds no verdict ('SCORE: 7')"),
        (Answer(status=400, body={"error": {"message": "bad"}}), "the judge's endpoint failed"),
        (Answer(body=b"not json at all"), "the judge's endpoint failed"),
    ],
)
async def test_garbage_from_the_endpoint_writes_no_reward(
    nursery: trio.Nursery, answer: Answer, why: str
) -> None:
    endpoint = await start_scripted(nursery, answer)
    judge = Judge("judge", AgentConfig(model="m", base_url=endpoint.base_url))
    try:
        trace = await _agent(judge).run(Task(0, prompt="q", answer="a"))
    finally:
        await judge.aclose()
    assert trace.rewards == {}  # never computed: absent, not a 0.0 (issue 40)
    assert why in trace.errors[0].message
    assert trace.judge_calls[0].error is not None


async def test_a_slow_judge_times_out(nursery: trio.Nursery) -> None:
    endpoint = await start_scripted(nursery, Answer(body=_body("VERDICT: CORRECT"), delay=10))
    judge = Judge("judge", AgentConfig(model="m", base_url=endpoint.base_url), timeout_s=0.3)
    start = time.monotonic()
    try:
        trace = await _agent(judge).run(Task(0, prompt="q", answer="a"))
    finally:
        await judge.aclose()
    assert time.monotonic() - start < 5
    assert trace.rewards == {}  # never computed: absent, not a 0.0 (issue 40)
    assert "no answer within 0.3s (timeout_s)" in trace.errors[0].message


async def test_a_hanging_judge_is_bounded_by_the_close_scoring_timeout(
    nursery: trio.Nursery,
) -> None:
    endpoint = await start_scripted(nursery, Answer(body=_body("VERDICT: CORRECT"), delay=10))
    judge = Judge("judge", AgentConfig(model="m", base_url=endpoint.base_url))
    start = time.monotonic()
    try:
        trace = await _agent(judge, timeouts=Timeouts(scoring_s=0.3)).run(
            Task(0, prompt="q", answer="a")
        )
    finally:
        await judge.aclose()
    assert time.monotonic() - start < 5
    assert trace.rewards == {}  # never computed: absent, not a 0.0 (issue 40)
    assert "timeouts.scoring_s" in trace.errors[-1].message
    (call,) = trace.judge_calls  # the cut call is on record
    assert call.score is None
    assert "cancelled (timeouts.scoring_s" in str(call.error)


def test_judge_config_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "hi", "answer": "hi"}\n')
    ref = {"id": "jsonl", "path": str(path), "judge": {"model": "gpt-judge"}}
    with pytest.raises(ConfigError, match="give its base_url"):
        open_taskset(ref)
    ref["judge"] = {"model": "builtin/judge", "prompt": "no placeholder"}
    with pytest.raises(ConfigError, match=r"env\.taskset\.judge\.prompt = 'no placeholder'"):
        open_taskset(ref)
    ref["judge"] = {"model": "builtin/nope"}
    with pytest.raises(ConfigError, match="unknown built-in policy 'nope'"):
        open_taskset(ref)


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    rows = [{"prompt": "the answer is 4", "answer": "4"}, {"prompt": "no idea", "answer": "4"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_jsonl_with_a_builtin_judge(tmp_path: Path) -> None:
    """The done-when: a judge reward whose call is not one of the agent's turns."""
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={_tasks(tmp_path)}", "--model", "builtin/echo"]
    argv += ["--env.taskset.judge.model=builtin/judge", "-r", "2", "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    episodes = sorted(read_episodes(out / "episodes.jsonl"), key=lambda e: e["id"])
    assert [e["traces"][0]["rewards"] for e in episodes] == [{"judge": 1.0}] * 2 + [
        {"judge": 0.0}
    ] * 2
    for e in episodes:
        (trace,) = e["traces"]
        assert set(trace["metrics"]) == {"exact_match", "contains"}
        assert len(trace["turns"]) == 1
        (call,) = trace["judge_calls"]
        assert call["model"] == "builtin/judge"
        assert call["response"].startswith("VERDICT:")
        turn_texts = [m["content"] for t in trace["turns"] for m in t["request"]]
        assert not any("grading" in text for text in turn_texts)
    assert sorted(e["traces"][0]["judge_calls"][0]["cached"] for e in episodes) == [
        False,
        False,
        True,
        True,
    ]
    line = (out / "episodes.jsonl").read_text().splitlines()[0]
    assert loads_episode(line).traces[0].judge_calls[0].judge == "judge"
    page = (out / "report.html").read_text()
    assert page.count('class="turns judge-calls"') == 4
    assert "VERDICT: CORRECT" in page


def test_cli_user_sim_with_a_judge(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "user-sim", "--env.taskset=jsonl", f"--env.taskset.path={_tasks(tmp_path)}"]
    argv += ["--env.judge.model=builtin/judge", "--env.judge.name=served", "-n", "1"]
    assert main([*argv, "-o", str(out), "--no-progress"]) == 0
    (episode,) = read_episodes(out / "episodes.jsonl")
    assistant, user = sorted(episode["traces"], key=lambda t: t["agent"]["name"])
    assert "served" in assistant["rewards"]
    assert user["judge_calls"] == []
    assert user["rewards"] == {}
    (call,) = assistant["judge_calls"]
    assert "<scenario>\nthe answer is 4\n</scenario>" in call["request"][0]["content"]
    # the scenario never reached the assistant's wire
    wire = [m["content"] for t in assistant["turns"] for m in t["request"]]
    assert not any("the answer is 4" in str(text) for text in wire)


class _Slow(ModelClient):
    """Answers CORRECT after 1 s, counting the calls in flight."""

    def __init__(self) -> None:
        self.in_flight = self.most = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await trio.sleep(1)
            return ModelResponse(AssistantMessage("VERDICT: CORRECT"))
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize(("cap", "most"), [(None, 5), (1, 1), (2, 2)])
async def test_max_concurrent_calls_caps_the_judge(
    autojump_clock: trio.testing.MockClock, cap: int | None, most: int
) -> None:
    slow = _Slow()
    judge = Judge("j", AgentConfig(model="slow", max_concurrent_calls=cap), client=slow)
    agent = _agent(judge)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(agent.run, Task(i, prompt=f"q{i}"))
    assert slow.most == most
    assert trio.current_time() - start == pytest.approx(-(-5 // most))  # ceil(5 / most) s


async def test_the_eval_preflights_an_endpoint_judge(nursery: trio.Nursery, tmp_path: Path) -> None:
    endpoint = await start_scripted(nursery, Answer(401, {"error": {"message": "bad key"}}))
    judge = {"model": "judge-model", "base_url": endpoint.base_url, "name": "strict"}
    taskset = {"id": "jsonl", "path": str(_tasks(tmp_path)), "judge": judge}
    config = load_eval_config(
        envs.get("single-agent").config_class,
        file_data={"env_id": "single-agent", "env": {"taskset": taskset}},
    )
    with pytest.raises(ConfigError, match="judge 'strict': preflight: model 'judge-model'"):
        await preflight(config, make_env(config))
    assert len(endpoint.seen) == 1
    endpoint.answers.clear()
    endpoint.answers.append(Answer(body=_body("OK")))
    await preflight(config, make_env(config))  # a judge that answers passes


@given(st.text(max_size=200), st.sampled_from(["CORRECT", "INCORRECT", "correct", "Incorrect"]))
def test_a_closing_verdict_line_always_decides(prefix: str, verdict: str) -> None:
    assert parse_verdict(f"{prefix}\nVERDICT: {verdict}") == float(verdict.upper() == "CORRECT")


@given(st.text(alphabet=st.characters(blacklist_characters=":"), max_size=300))
def test_a_reply_without_a_colon_has_no_verdict(reply: str) -> None:
    assert parse_verdict(reply) is None


@given(st.floats(min_value=0, max_value=1, allow_nan=False).map(lambda x: round(x, 3)))
def test_any_score_in_range_is_read_back(score: float) -> None:
    assert parse_verdict(f"reasoning...\nSCORE: {score}") == pytest.approx(score)


@pytest.mark.parametrize("retries", [0, 1])
def test_an_endpoint_judge_takes_the_runs_request_options(tmp_path: Path, retries: int) -> None:
    """--request-retries / --request-backoff reach the judge's client (issue 23): its
    endpoint fails every judgement, and the judge gives up after exactly that many."""

    def decide(call: Call) -> Fault:
        return OK if call.preflight else Fault("status", 500)

    out = tmp_path / "run"
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = ["eval", "jsonl", f"--env.taskset.path={_tasks(tmp_path)}", "-n", "1"]
        argv += ["--model", "builtin/echo", "--env.taskset.judge.model=judge-model"]
        argv += [f"--env.taskset.judge.base_url={endpoint.base_url}"]
        argv += ["--request-retries", str(retries), "--request-backoff", "0"]
        assert main([*argv, "--request-timeout", "5", "-o", str(out), "--no-progress"]) == 1
        judged = [c for c in endpoint.calls if not c.preflight]
    assert [c.attempt for c in judged] == list(range(retries + 1))
    (episode,) = read_episodes(out / "episodes.jsonl")
    (call,) = episode["traces"][0]["judge_calls"]
    assert "HTTP 500" in call["error"]
    gave_up = f"gave up after {retries} {'retry' if retries == 1 else 'retries'}"
    assert (gave_up in call["error"]) == (retries > 0)
    assert "gave up after 3 retries" not in call["error"]
