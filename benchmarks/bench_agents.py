"""Per-segment cost of the real agent CLI harnesses beside the same CLI run bare
against the same server, and the ``acp`` harness's per-turn cost beside ``codex``'s
(issue 13, item 5). One run, one interception server on the built-in model.

(1) ``codex``, ``claude-code`` and ``opencode`` (``--slow-segments``: it starts in
    10-20 s here): a chat of ``--segments`` resumed segments through
    the harness (``turn()`` wall time: argv and environment built, the process run in
    its own group, its messages read back from the boundary), then the harness's last
    recorded ``resume`` command (argv, environment, working directory: captured by a
    shim that execs the real binary) replayed bare, as many times, with
    ``trio.run_process`` against the same rollout endpoint (through the same shim,
    so both sides pay its Python start-up). The ratio is the harness's
    overhead over the CLI itself (the CLI's own start-up dominates both).
(2) ``acp`` with ``codex-acp``: the same resumed segments on one live adapter process
    (no process start per turn) beside the ``codex`` harness's segments.

Medians of wall time per segment. Run: ``python benchmarks/bench_agents.py`` (about a
few minutes; needs the CLIs: ``npm install -g @openai/codex@0.171.0
@anthropic-ai/claude-code@2.1.332 @zed-industries/codex-acp@0.16.0 opencode-ai@1.18.33``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from taketurns import Agent, AgentConfig, ChatSession, Task
from taketurns._exchange.agent import make_harness
from taketurns.http import InterceptionServer, open_interception_server

SHIM = """#!{python}
import json, os, sys
record = {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}
with open({log!r}, "a") as f:
    f.write(json.dumps(record) + "\\n")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def shim(tmp: Path, program: str) -> tuple[Path, Path]:
    real = shutil.which(program)
    if real is None:
        sys.exit(f"{program} is not installed (see this script's docstring)")
    log, path = tmp / f"{program}.jsonl", tmp / f"{program}-shim"
    path.write_text(SHIM.format(python=sys.executable, log=str(log), real=real))
    path.chmod(0o755)
    return path, log


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def open_chat(
    stack: AsyncExitStack, server: InterceptionServer, harness: str, options: dict[str, Any]
) -> ChatSession:
    """A chat through ``harness`` whose first segment has run (it is not counted)."""
    agent = Agent(
        "bench",
        AgentConfig(model="builtin/bracket"),
        harness=make_harness(harness, options, field="bench"),
        services={"interception": server},
    )
    session = await stack.enter_async_context(agent.chat(Task(0, prompt="pick [x] or [y]")))
    await session.turn()
    return session


async def segment(session: ChatSession, i: int) -> float:
    """Wall seconds of one resumed segment."""
    start = time.perf_counter()
    reply = await session.turn(f"again [a{i}] or [b{i}]")
    assert not reply.stopped, reply
    return time.perf_counter() - start


def last_command(log: Path) -> dict[str, Any]:
    return json.loads(log.read_text().splitlines()[-1])


async def bare(binary: Path, command: dict[str, Any]) -> float:
    """Wall seconds of one recorded command replayed bare, through the same shim (so
    both sides pay its start-up)."""
    start = time.perf_counter()
    result = await trio.run_process(
        [str(binary), *command["argv"]],
        env=command["env"],
        cwd=command["cwd"],
        stdin=b"",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-500:]
    return time.perf_counter() - start


Rows = list[tuple[str, float]]


async def cli_rows(
    server: InterceptionServer, tmp: Path, harness: str, program: str, n: int
) -> tuple[Rows, float]:
    """Harness segments and bare replays, interleaved (a loaded machine's noise falls
    on both alike)."""
    binary, log = shim(tmp, program)
    through, alone = [], []
    async with AsyncExitStack() as stack:
        session = await open_chat(stack, server, harness, {"binary": str(binary)})
        for i in range(n):
            through.append(await segment(session, i))
            alone.append(await bare(binary, last_command(log)))
    ms, bare_ms = median_ms(through), median_ms(alone)
    rows = [
        (f"{harness} harness, per resumed segment", ms),
        (f"{program} bare, same command and server", bare_ms),
        ("  ratio", ms / bare_ms),
    ]
    return rows, ms


async def main(segments: int, slow_segments: int) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    async with open_interception_server(graceful_timeout=0.1) as server:
        rows, codex_ms = await cli_rows(server, tmp, "codex", "codex", segments)
        rows += (await cli_rows(server, tmp, "claude-code", "claude", segments))[0]
        rows += (await cli_rows(server, tmp, "opencode", "opencode", slow_segments))[0]
        async with AsyncExitStack() as stack:
            session = await open_chat(stack, server, "acp", {"agent": "codex"})
            acp_ms = median_ms([await segment(session, i) for i in range(segments)])
        rows += [
            ("acp (codex-acp, one live process), per turn", acp_ms),
            ("codex harness (a process per segment), per segment", codex_ms),
            ("  ratio acp / codex", acp_ms / codex_ms),
        ]
    shutil.rmtree(tmp, ignore_errors=True)
    stamp = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
    command = f"--segments {segments} --slow-segments {slow_segments}"
    lines = [f"# python benchmarks/bench_agents.py {command}  ({stamp})"]
    lines.append(f"{'path':<58} {'wall ms':>10}")
    for name, value in rows:
        shown = f"{value:10.2f}" if "ratio" in name else f"{value:10.0f}"
        lines.append(f"{name:<58} {shown}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, default=5)
    parser.add_argument("--slow-segments", type=int, default=3, help="for opencode")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    os.environ.setdefault("TMPDIR", tempfile.gettempdir())
    text = trio.run(main, args.segments, args.slow_segments)
    if args.output is not None:
        args.output.write_text(text)
