"""Per-turn rewards: ``Trace.record_turn_reward`` checks its input, is kept in the record
(old records still load), stays out of ``trace.reward`` unless a reward sums it, and
reaches token samples and both export levels, turn by turn."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest

from taketurns import AssistantMessage, Episode, Message, Task, Trace, UserMessage
from taketurns._cli.main import main
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, Turn
from taketurns._output.records import dumps_episode, loads_episode, parse_record
from taketurns._train.conversations import turn_reward_rows
from taketurns._train.export import message_rows, run_groups, sample_rows
from taketurns.env import ModelRequest, TurnReward
from taketurns.testing import BuiltinModel
from taketurns.train import trace_samples


def conversation(n: int, *, tokens: bool = True) -> Trace:
    """``n`` echo turns, every turn's history kept (token ids when ``tokens``)."""
    model = BuiltinModel("echo")
    trace = Trace(AgentStamp("me", "builtin/echo", "null"), EpisodeInfo("e/0/0", "e", 0), Task(0))
    messages: list[Message] = []
    for i in range(n):
        messages.append(UserMessage(f"say {i} " * (i + 1)))
        sampling = {"logprobs": True} if tokens else {}
        response = model.respond(ModelRequest("m", tuple(messages), (), sampling))
        trace.turns.append(
            Turn(
                i,
                tuple(messages),
                response.message,
                token_ids=response.token_ids,
                prompt_token_ids=response.prompt_token_ids,
                logprobs=response.logprobs,
            )
        )
        messages.append(response.message)
    trace.messages = messages
    return trace


def test_record_turn_reward_keeps_order_and_names() -> None:
    trace = conversation(3)
    trace.record_turn_reward(2, 1.5, name="round")
    trace.record_turn_reward(0, -1, name="round")
    trace.record_turn_reward(2, 0.25)
    assert trace.turn_rewards == [
        TurnReward(2, 1.5, "round"),
        TurnReward(0, -1.0, "round"),
        TurnReward(2, 0.25, "turn"),
    ]
    assert trace.turn_reward_total("round") == 0.5
    assert trace.turn_reward_total() == 0.75
    assert trace.turn_reward_total("other") == 0.0
    assert trace.reward == 0.0  # never summed in by itself


@pytest.mark.parametrize(
    ("turn", "value", "problem"),
    [
        (3, 1.0, "turn_index 3 is not a turn of this trace"),
        (-1, 1.0, "turn_index -1"),
        (0, math.nan, "must be finite"),
        (0, math.inf, "must be finite"),
        (0, True, "is not a number"),
        (0, "1", "is not a number"),
    ],
)
def test_record_turn_reward_refuses_bad_input(turn: int, value: object, problem: str) -> None:
    trace = conversation(3)
    with pytest.raises(ValueError, match=problem):
        trace.record_turn_reward(turn, value)  # type: ignore[arg-type]
    assert trace.turn_rewards == []


def _episode(trace: Trace) -> Episode:
    episode = Episode("e/0/0", "e", Task(0))
    episode.traces.append(trace)
    return episode


def test_the_record_keeps_them_and_old_records_load() -> None:
    trace = conversation(2)
    trace.record_turn_reward(1, 3.0, name="round")
    line = dumps_episode(_episode(trace))
    assert loads_episode(line).traces[0].turn_rewards == [TurnReward(1, 3.0, "round")]
    old = orjson.loads(line)
    del old["traces"][0]["turn_rewards"]  # a record written before the field existed
    assert loads_episode(orjson.dumps(old)).traces[0].turn_rewards == []
    for bad in ([{"turn": 1, "value": "x"}], [{"value": 1.0}], ["x"], 5):
        damaged = orjson.loads(line)
        damaged["traces"][0]["turn_rewards"] = bad
        assert parse_record(orjson.dumps(damaged)) is None, bad


def test_samples_carry_each_turns_reward_and_where_its_tokens_end() -> None:
    trace = conversation(3)
    trace.record_turn_reward(0, 1.0, name="a")
    trace.record_turn_reward(2, 2.0, name="a")
    trace.record_turn_reward(2, 0.5, name="b")
    (sample,) = trace_samples(trace)
    assert sample.turns == (0, 1, 2)
    assert sample.turn_rewards == (1.0, 0.0, 2.5)
    assert sample.turn_ends[-1] == len(sample.completion_ids)
    for turn, end in zip(trace.turns, sample.turn_ends, strict=True):
        assert turn.token_ids is not None
        assert sample.completion_ids[end - len(turn.token_ids) : end] == turn.token_ids
        assert set(sample.completion_mask[end - len(turn.token_ids) : end]) == {1}


def test_a_split_sample_keeps_only_its_own_turns_rewards() -> None:
    trace = conversation(3)
    broken = trace.turns[1]
    trace.turns[1] = Turn(1, broken.request, broken.response)  # no token ids: a split
    trace.record_turn_reward(0, 1.0)
    trace.record_turn_reward(2, 2.0)
    first, second = trace_samples(trace)
    assert (first.turns, first.turn_rewards) == ((0,), (1.0,))
    assert first.turn_ends == (len(first.completion_ids),)
    assert (second.turns, second.turn_rewards) == ((2,), (2.0,))


def _run(out: Path, *extra: str) -> None:
    argv = ["eval", "prisoners-dilemma", "-n", "3", "-r", "2", "-o", str(out), "--no-progress"]
    assert main([*argv, "--env.rounds=3", *extra]) == 0


def test_token_export_rows_carry_per_round_payoffs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run(run, "--sampling.logprobs=true")
    assert main(["export", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows == list(sample_rows(run_groups(run)))
    assert len(rows) == 12  # one merged sample per seat per episode
    for row in rows:
        assert row["turns"] == [0, 1, 2]
        assert len(row["turn_rewards"]) == len(row["turn_ends"]) == 3
        assert set(row["turn_rewards"]) <= {0.0, 1.0, 3.0, 5.0}
        assert sum(row["turn_rewards"]) == row["reward"]
        assert row["turn_ends"][-1] == len(row["completion_ids"])


def test_message_export_rows_point_each_reward_at_its_message(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _run(run)
    assert main(["export", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows == list(message_rows(run_groups(run)))
    assert len(rows) == 12
    for row in rows:
        paid = row["turn_rewards"]
        assert [(r["turn"], r["name"]) for r in paid] == [(0, "round"), (1, "round"), (2, "round")]
        assert sum(r["value"] for r in paid) == row["reward"]
        where = [r["message"] for r in paid]
        assert where == sorted(where)
        for r in paid:
            message = row["messages"][r["message"]]
            assert message["role"] == "assistant"
            assert message["content"] in ("[cooperate]", "[defect]")


def test_an_assistant_message_not_in_the_conversation_has_no_position() -> None:
    trace = conversation(1, tokens=False)
    trace.messages = [trace.messages[0], AssistantMessage("rewritten")]
    trace.record_turn_reward(0, 1.0)
    assert turn_reward_rows(trace) == ({"turn": 0, "name": "turn", "value": 1.0, "message": None},)
