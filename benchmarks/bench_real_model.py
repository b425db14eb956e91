"""The engine's share of a real model's turn: Kuhn self-play on SmolLM2-135M-Instruct
served by llama.cpp (one thread), taketurns against a bare client loop sending the
same requests to the same server, at -c 1 and -c 2, in one run.

For each concurrency: ``taketurns`` runs ``run_eval`` (episodes to a run directory,
token ids from the GGUF's tokenizer, samples checked) against the server; ``bare``
then replays exactly the requests that run recorded (same messages, same sampling:
greedy, logprobs, max_tokens) with a plain httpx2 client, ``c`` requests at once,
parsing each answer. Measured: wall time, this process's CPU and the server's CPU
(from /proc), per model turn, and the completion tokens/s the server delivered.
The engine's overhead per turn is taketurns' CPU minus the bare loop's, and its
share is that over the model's turn (the bare loop's wall time per turn at -c 1); at
-c 1 also the wall time per turn spent outside model calls (the run's wall time less
its turns' recorded latencies), when the server waits for the engine. The wall-time
difference between the two runs is shown too, but on a shared machine it measures the
server (its CPU per turn varies with other load and with the order requests reach its
prompt cache) more than the engine.
Apart: the CPU of taking token ids (rendering the chat template and tokenizing the
prompt, matching the completion's pieces), measured on the recorded turns.

Run: ``python benchmarks/bench_real_model.py [--episodes 6] [--max-tokens 32]``
(needs ``pip install 'taketurns[local]'``); writes ``benchmarks/results/real_model.txt``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson
import trio

from taketurns import EvalConfig, RunDir, Sampling, read_episodes, run_eval
from taketurns._eval.plan import resolve_role
from taketurns._models.gguf import gguf_tokens
from taketurns._models.local import gguf_path, llamacpp_server
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker

MODEL = "llamacpp/smollm2-135m-instruct"
RESULTS = Path(__file__).parent / "results" / "real_model.txt"
TICK = os.sysconf("SC_CLK_TCK")


@attrs.frozen
class Measure:
    label: str
    concurrency: int
    turns: int
    completion_tokens: int
    wall_s: float
    cpu_s: float  # this process
    server_cpu_s: float

    def row(self, model_turn_s: float, bare: Measure | None) -> str:
        per = 1000 / self.turns
        extra = ""
        if bare is not None:
            engine_ms = (self.cpu_s - bare.cpu_s) * per
            wall_ms = (self.wall_s - bare.wall_s) * per
            extra = (
                f" {engine_ms:9.1f} {100 * engine_ms / 1000 / model_turn_s:6.2f}% "
                f"{wall_ms:9.1f} {100 * (self.wall_s - bare.wall_s) / self.wall_s:6.2f}%"
            )
        return (
            f"{self.label:10} -c {self.concurrency} {self.turns:5} {self.wall_s * per:9.0f} "
            f"{self.cpu_s * per:8.1f} {self.server_cpu_s * per:9.0f} "
            f"{self.completion_tokens / self.wall_s:7.1f}{extra}"
        )


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


async def measured(label: str, c: int, pid: int, run: Any, *args: Any) -> tuple[Measure, Any]:
    wall, cpu, server = time.perf_counter(), time.process_time(), server_cpu(pid)
    turns, tokens, extra = await run(*args)
    return (
        Measure(
            label,
            c,
            turns,
            tokens,
            time.perf_counter() - wall,
            time.process_time() - cpu,
            server_cpu(pid) - server,
        ),
        extra,
    )


def config_for(url: str, c: int, episodes: int, max_tokens: int) -> EvalConfig:
    return EvalConfig(
        env_id="kuhn-poker",
        num_tasks=episodes,
        concurrency=c,
        model=MODEL,
        base_url=url,
        # greedy: the bare loop's replays get the same answers
        sampling=Sampling(temperature=0.0, max_tokens=max_tokens),
        env=KuhnConfig(),
    )


async def taketurns_run(config: EvalConfig, out: Path) -> tuple[int, int, Any]:
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=True)
    await run_eval(config, run_dir, progress=False, report=False)
    return replayed(config, out)


def replayed(config: EvalConfig, out: Path) -> tuple[int, int, Any]:
    """(turns, completion tokens, (request bodies, seconds inside model calls)) of a
    run. The bodies are in about the order the server got them (each episode's seats
    alternate; ``c`` episodes at once take turns), so that the server's prompt cache
    sees the same sequence in the replay."""
    env = KuhnPoker(config.env)
    sampling = resolve_role(config, env, "player0", env.roles["player0"]).sampling
    fields = sampling.request_fields()
    played: list[list[dict[str, Any]]] = []
    tokens = 0
    waited = 0.0  # time inside model calls (request, server, answer, token ids)
    for episode in read_episodes(out / "episodes.jsonl"):
        waited += sum(u["latency_s"] for t in episode["traces"] for u in t["turns"])
        played.append([])
        for turns in itertools.zip_longest(*(t["turns"] for t in episode["traces"])):
            for turn in (t for t in turns if t is not None):
                played[-1].append({**fields, "model": MODEL, "messages": turn["request"]})
                tokens += turn["usage"]["completion_tokens"]
    c = config.concurrency
    bodies = [
        body
        for start in range(0, len(played), c)
        for step in itertools.zip_longest(*played[start : start + c])
        for body in step
        if body is not None
    ]
    return len(bodies), tokens, (bodies, waited)


async def bare_run(url: str, bodies: list[dict[str, Any]], c: int) -> tuple[int, int, None]:
    done = [0, 0]
    target = f"{url}/chat/completions"
    headers = {"Content-Type": "application/json"}
    send, receive = trio.open_memory_channel[bytes](math.inf)
    for body in bodies:
        send.send_nowait(orjson.dumps(body))
    send.close()
    async with httpx2.AsyncClient(timeout=600) as client:

        async def worker() -> None:
            async for content in receive:
                answer = await client.post(target, content=content, headers=headers)
                data = orjson.loads(answer.content)
                done[0] += 1
                done[1] += data["usage"]["completion_tokens"]

        async with trio.open_nursery() as nursery:
            for _ in range(c):
                nursery.start_soon(worker)
    return done[0], done[1], None


def token_capture_ms(bodies: list[dict[str, Any]], out: Path) -> tuple[float, float]:
    """CPU ms per turn of the prompt ids and of the completion ids, on recorded turns."""
    tokens = gguf_tokens(gguf_path(MODEL, field="model"))
    replies = []
    for episode in read_episodes(out / "episodes.jsonl"):
        for trace in episode["traces"]:
            for turn in trace["turns"]:
                ids = turn["token_ids"] or []
                pieces = [tokens.detokenize([i]).decode("utf-8", "ignore") for i in ids]
                replies.append(((turn["response"] or {}).get("content"), pieces))
    tokens.completion_ids("", [])  # builds the vocabulary index once, outside the timing
    start = time.process_time()
    for body in bodies:
        tokens.prompt_ids(body)
    prompt_ms = (time.process_time() - start) * 1000 / len(bodies)
    start = time.process_time()
    for text, pieces in replies:
        tokens.completion_ids(text, pieces)
    return prompt_ms, (time.process_time() - start) * 1000 / len(replies)


async def main(episodes: int, max_tokens: int) -> str:
    server = llamacpp_server(MODEL, args="", timeout_s=300, field="model")
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        server.log = Path(tmp) / "model-server.log"
        async with trio.open_nursery() as nursery:
            url = await nursery.start(server.run)
            pid = server._process.pid
            # warm-up: imports, the tokenizer, the server's first prompts
            await taketurns_run(config_for(url, 1, 1, max_tokens), Path(tmp) / "warm-up")
            rows: list[tuple[Measure, Measure]] = []
            for c in (1, 2):
                out = Path(tmp) / f"run-c{c}"
                config = config_for(url, c, episodes, max_tokens)
                ours, (bodies, waited) = await measured(
                    "taketurns", c, pid, taketurns_run, config, out
                )
                bare, _ = await measured("bare", c, pid, bare_run, url, bodies, c)
                rows.append((ours, bare))
                if c == 1:
                    prompt_ms, completion_ms = token_capture_ms(bodies, out)
                    outside_ms = (ours.wall_s - waited) * 1000 / ours.turns
            server.stop()
    model_turn_s = rows[0][1].wall_s / rows[0][1].turns
    lines.append(
        f"Kuhn self-play, {episodes} episodes per run, SmolLM2-135M-Instruct Q4_1 on "
        f"llama-cpp-python 0.3.36 (1 thread), greedy, max_tokens {max_tokens}, logprobs on"
    )
    lines.append(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end"
    )
    lines.append("")
    lines.append(
        "run          c   turns  wall ms/turn  cpu ms  server ms  tok/s  "
        "engine cpu ms  share  engine wall ms  share"
    )
    for ours, bare in rows:
        lines.append(bare.row(model_turn_s, None))
        lines.append(ours.row(model_turn_s, bare))
    lines.append("")
    lines.append(
        f"taketurns -c 1: {outside_ms:.1f} ms wall per turn outside model calls "
        f"({100 * outside_ms / 1000 / model_turn_s:.2f}% of the model's turn; the server "
        "idles meanwhile)"
    )
    lines.append(
        f"model turn (bare, -c 1): {model_turn_s * 1000:.0f} ms wall; token ids per turn: "
        f"{prompt_ms:.2f} ms CPU for the prompt (request model + chat template + tokenizer), "
        f"{completion_ms:.2f} ms for the completion (vocabulary lookup)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    text = trio.run(main, args.episodes, args.max_tokens)
    print(text)
    RESULTS.write_text(text + "\n")
