"""Token divergence (``taketurns._exchange.divergence``): where a prompt stops
extending the trace's sequence, what kind of divergence it is, how a sample splits
and exports there, and how ``summary.json`` counts them."""

from __future__ import annotations

import re

import attrs
import hypothesis.strategies as st
from hypothesis import given
from rich.console import Console

from taketurns import AssistantMessage, Task, Trace, UserMessage
from taketurns._exchange.divergence import (
    RUN,
    TokenSequence,
    check_trace_tokens,
    first_difference,
)
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, Turn
from taketurns._output.summary import Summarizer, digest, render
from taketurns.train import trace_samples

ids = st.lists(st.integers(0, 50), max_size=12)


def _turn(index: int, prompt: list[int] | None, completion: list[int] | None) -> Turn:
    logprobs = None if completion is None else [-0.5] * len(completion)
    return Turn(
        index,
        (UserMessage("x"),),
        AssistantMessage("y"),
        token_ids=completion,
        prompt_token_ids=prompt,
        logprobs=logprobs,
    )


def _trace(turns: list[Turn]) -> Trace:
    trace = Trace(AgentStamp("a", "m", "null"), EpisodeInfo("e/0/0", "e", 0), Task(0))
    trace.turns.extend(turns)
    return trace


@given(st.lists(st.tuples(ids, ids), min_size=1, max_size=6), ids)
def test_prompts_that_extend_the_sequence_never_diverge(
    steps: list[tuple[list[int], list[int]]], first: list[int]
) -> None:
    # each prompt = everything so far + what the conversation inserts
    turns, seq, prompt = [], [], list(first)
    for i, (completion, inserted) in enumerate(steps):
        turns.append((i, list(prompt), completion))
        seq = prompt + completion
        prompt = seq + inserted
    check = check_trace_tokens(turns)
    assert check == {
        "turns": len(steps),
        "checked": len(steps) - 1,
        "divergent": 0,
        "kinds": {},
        "final_retokenized": 0,
    }
    (sample,) = trace_samples(_trace([_turn(i, p, c) for i, p, c in turns]))
    assert sample.input_ids == seq
    assert sample.divergence is None


@given(ids, st.lists(st.integers(0, 50), min_size=1, max_size=12), st.data())
def test_a_changed_completion_token_is_a_completion_divergence_at_its_position(
    prompt: list[int], completion: list[int], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(completion) - 1))
    retokenized = list(completion)
    retokenized[at] += 100  # the reply re-tokenized differently in the next prompt
    seq = TokenSequence()
    seq.start(0, prompt, completion)
    second = [*prompt, *retokenized, 7, 8]
    found = seq.divergence(1, second)
    assert found is not None
    assert (found.turn, found.previous, found.kind, found.within) == (1, 0, "completion", 0)
    assert found.position == len(prompt) + at
    assert found.expected == (prompt + completion)[found.position :][:RUN]
    assert found.got == second[found.position :][:RUN]
    assert "re-tokenizes differently" in found.describe()


def test_a_rewritten_prompt_is_a_template_divergence_and_a_cut_one_is_truncated() -> None:
    seq = TokenSequence()
    seq.start(0, [1, 2, 3], [10, 11])
    template = seq.divergence(1, [1, 9, 3, 10, 11, 4])
    assert template is not None
    assert (template.kind, template.position, template.within) == ("template", 1, None)
    assert template.expected == [2, 3, 10, 11]
    assert template.got == [9, 3, 10, 11, 4]
    cut = seq.divergence(1, [1, 2, 3, 10])
    assert cut is not None
    assert (cut.kind, cut.position) == ("truncated", 4)
    assert first_difference([1, 2], [1, 2, 3]) is None


def test_a_divergence_splits_the_sample_records_where_and_is_counted() -> None:
    trace = _trace(
        [
            _turn(0, [1, 2], [10, 11]),
            _turn(1, [1, 2, 10, 12, 3], [20]),  # 11 -> 12: inside turn 0's completion
            _turn(2, [1, 2, 10, 12, 3, 20, 4], [30]),  # extends turn 1
            _turn(3, None, None),  # no ids: the sequence ends, unchecked
            _turn(4, [5], [6]),
        ]
    )
    one, two, three = trace_samples(trace)
    assert (one.turns, two.turns, three.turns) == ((0,), (1, 2), (4,))
    assert one.divergence is None
    assert three.divergence is None
    assert two.divergence is not None
    assert two.divergence.to_json() == {
        "turn": 1,
        "previous": 0,
        "position": 3,
        "kind": "completion",
        "within": 0,
        "expected": [11],
        "got": [12, 3],
    }
    assert two.reason is not None
    assert "differ at token 3" in two.reason
    assert three.reason == "turn 3 came without token ids"
    check = check_trace_tokens((u.index, u.prompt_token_ids, u.token_ids) for u in trace.turns)
    assert check == {
        "turns": 4,
        "checked": 2,
        "divergent": 1,
        "kinds": {"completion": 1},
        "final_retokenized": 0,
    }


def test_the_summary_counts_divergences_alike_from_digests_and_records() -> None:
    from taketurns._eval.episode import Episode
    from taketurns._output.records import record

    trace = _trace([_turn(0, [1], [2]), _turn(1, [1, 3], [4]), _turn(2, [1, 3, 4, 5], [6])])
    episode = Episode("e/0/0", "e", Task(0, "t", "p"))
    episode.traces.append(trace)
    from_digest, from_record = Summarizer(), Summarizer()
    from_digest.add(digest(episode))
    from_record.add(record.unstructure(episode))
    expected = {"turns_with_ids": 3, "checked": 2, "divergent": 1, "rate": 0.5}
    for summarizer in (from_digest, from_record):
        stats = summarizer.result()["agents"]["a"]["token_divergences"]
        assert stats == {**expected, "kinds": {"completion": 1}, "final_retokenized": 0}
    console = Console(width=100, record=True)
    console.print(render(from_digest.result()))
    assert re.search(r"token divergences\s*│\s*1 of 2 checked", console.export_text())
    # a trace without token ids adds no token statistics
    bare = Summarizer()
    episode.traces[0] = _trace([_turn(0, None, None)])
    bare.add(digest(episode))
    assert "token_divergences" not in bare.result()["agents"]["a"]


def test_a_final_completion_that_re_tokenizes_differently_is_flagged_not_replaced() -> None:
    # the model sampled "\n" "\n" (7, 7) where the tokenizer writes "\n\n" (8)
    last = attrs.evolve(_turn(1, [1, 2, 3], [7, 7]), retokenized=[8, 5])
    trace = _trace([_turn(0, [1], [2]), last])
    (sample,) = trace_samples(trace)
    assert sample.completion_ids[-2:] == [7, 7]  # what was sampled stays
    found = sample.final_divergence
    assert found is not None
    assert (found.turn, found.previous, found.within, found.kind) == (1, 1, 1, "completion")
    assert found.position == 3  # in the whole sequence [1, 2, 3, 7, 7]
    assert (found.expected, found.got) == ([7, 7], [8, 5])
    assert "re-tokenizes differently" in found.describe()
    check = check_trace_tokens(
        (u.index, u.prompt_token_ids, u.token_ids, u.retokenized) for u in trace.turns
    )
    assert check["final_retokenized"] == 1
    assert check["divergent"] == 0  # no prompt diverged
    same = trace_samples(_trace([_turn(0, [1], [2]), _turn(1, [1, 2, 3], [7, 7])]))
    assert same[0].final_divergence is None
