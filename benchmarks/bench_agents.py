"""Per-segment cost of the real agent CLI harnesses beside the same CLI run bare
against the same server, and the ``acp`` harness's per-turn cost beside ``codex``'s
(issue 13, item 5). One run, one interception server on the built-in model.

(1) ``codex``, ``claude-code``, ``gemini-cli`` and ``opencode`` (``--slow-segments``:
    it starts in 10-20 s here): a chat of ``--segments`` resumed segments through
    the harness with its default sandbox, as users run it (``turn()`` wall time: argv
    and environment built, the process run in its sandbox, its messages read back
    from the boundary), then the harness's last recorded ``resume`` command (argv,
    environment, working directory and stdin, the segment's message: captured by a
    shim that execs the real binary) replayed bare, outside the sandbox, as many
    times, with ``trio.run_process`` against the same rollout endpoint, opened for it
    as for a segment (through the same shim, so both sides pay its Python start-up).
    The ratio is the harness's overhead, the sandbox's included, over the CLI itself
    (the CLI's own start-up dominates both).
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

# The shim runs where the harness runs the CLI (in the rollout's sandbox by default):
# it records its argv, environment, working directory and stdin (the segment's
# message, a file in the rollout's scratch directory) in the scratch directory, the
# one place it may write that lies at the same path on the host, then rewinds stdin
# and execs the real binary.
SHIM = """#!{python}
import json, os, sys
data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
try:
    os.lseek(0, 0, os.SEEK_SET)
    where = os.path.dirname(os.readlink("/proc/self/fd/0"))
except OSError:
    where = os.getcwd()
    fd = os.open(os.path.join(where, "shim-stdin"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
record = {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
           "stdin": data.decode("utf-8", "surrogateescape")}}
with open(os.path.join(where, {log!r}), "a") as f:
    f.write(json.dumps(record) + "\\n")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


def shim(tmp: Path, program: str) -> tuple[Path, str]:
    """The shim in front of ``program``, and the name of the log it writes in each
    rollout's scratch directory (``last_command`` finds it under ``tmp``)."""
    real = shutil.which(program)
    if real is None:
        sys.exit(f"{program} is not installed (see this script's docstring)")
    log, path = f"{program}-shim.jsonl", tmp / "bin" / f"{program}-shim"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SHIM.format(python=sys.executable, log=log, real=real))
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


def last_command(tmp: Path, log: str) -> dict[str, Any]:
    """The last command the shim recorded (the rollouts' scratch directories lie
    under ``tmp``, this process's temp directory)."""
    found = sorted(tmp.rglob(log), key=lambda p: p.stat().st_mtime)
    if not found:
        sys.exit(f"the {log} shim recorded nothing under {tmp}: the harness never ran it")
    return json.loads(found[-1].read_text().splitlines()[-1])


def _endpoint(server: InterceptionServer, command: dict[str, Any]) -> Any:
    """The rollout endpoint the recorded command calls (its URL or its secret is in
    its environment, its argv or its configuration files)."""
    text = json.dumps([command["env"], command["argv"]])
    for path in Path(command["cwd"]).rglob("*"):
        if (
            path.is_file()
            and path.suffix in (".json", ".toml", ".jsonc")
            and path.stat().st_size < 1e6
        ):
            text += path.read_text(errors="replace")
    found = [
        r.endpoint
        for r in server._by_id.values()  # a benchmark's look inside
        if r.endpoint.secret in text or f"/rollouts/{r.endpoint.rollout_id}/" in text
    ]
    assert len(found) == 1, f"the recorded command names {len(found)} rollout endpoints"
    return found[0]


def reclaim(scratch: Path) -> None:
    """As root, give the rollout's scratch back to root for a bare replay: the harness
    handed it to the sandbox's uid (some CLIs refuse a temp directory another uid
    owns), and hands it over again before its next segment."""
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(scratch):
        for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            os.chown(name, 0, 0, follow_symlinks=False)


async def bare(server: InterceptionServer, binary: Path, command: dict[str, Any]) -> float:
    """Wall seconds of one recorded command replayed bare (no sandbox), through the
    same shim (so both sides pay its start-up), given the same stdin, against the
    same rollout endpoint, opened for it as for a segment (between segments it
    answers 409)."""
    reclaim(Path(command["cwd"]).parent)
    start = time.perf_counter()
    async with server.open_segment(_endpoint(server, command)):
        result = await trio.run_process(
            [str(binary), *command["argv"]],
            env=command["env"],
            cwd=command["cwd"],
            stdin=command["stdin"].encode("utf-8", "surrogateescape"),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, (result.returncode, result.stderr[-500:], result.stdout[-800:])
    return time.perf_counter() - start


Rows = list[tuple[str, float]]


async def cli_rows(
    server: InterceptionServer, dirs: tuple[Path, Path], harness: str, program: str, n: int
) -> tuple[Rows, float]:
    """Harness segments (the harness's default sandbox) and bare replays, interleaved
    (a loaded machine's noise falls on both alike). ``dirs``: where the shims lie,
    where the rollouts' scratch directories lie."""
    tmp, scratch = dirs
    binary, log = shim(tmp, program)
    through, alone = [], []
    async with AsyncExitStack() as stack:
        session = await open_chat(stack, server, harness, {"binary": str(binary)})
        for i in range(n):
            through.append(await segment(session, i))
            alone.append(await bare(server, binary, last_command(scratch, log)))
    ms, bare_ms = median_ms(through), median_ms(alone)
    rows = [
        (f"{harness} harness, per resumed segment", ms),
        (f"{program} bare, same command and server", bare_ms),
        ("  ratio", ms / bare_ms),
    ]
    return rows, ms


CLIS = (  # harness, program, slow (--slow-segments: starts in 10-20 s here)
    ("codex", "codex", False),
    ("claude-code", "claude", False),
    ("gemini-cli", "gemini", False),
    ("opencode", "opencode", True),
)


async def main(segments: int, slow_segments: int, only: list[str]) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="bench-agents-"))  # the shims
    # as root the sandbox runs the shim as nobody, who must be able to reach it
    os.chmod(tmp, 0o755)
    # the rollouts' scratch directories, apart from the shims (a sandbox binds nothing
    # that lies where the scratch directories lie)
    scratch = Path(tempfile.mkdtemp(prefix="bench-agents-scratch-"))
    tempfile.tempdir = str(scratch)
    rows: Rows = []
    codex_ms = None
    try:
        async with open_interception_server(graceful_timeout=0.1) as server:
            for harness, program, slow in CLIS:
                if only and harness not in only:
                    continue
                n = slow_segments if slow else segments
                found, ms = await cli_rows(server, (tmp, scratch), harness, program, n)
                rows += found
                codex_ms = ms if harness == "codex" else codex_ms
                print(*(f"{name}: {value:.2f}" for name, value in found), sep="\n", flush=True)
            if not only or "acp" in only:
                async with AsyncExitStack() as stack:
                    session = await open_chat(stack, server, "acp", {"agent": "codex"})
                    acp_ms = median_ms([await segment(session, i) for i in range(segments)])
                rows.append(("acp (codex-acp, one live process), per turn", acp_ms))
                if codex_ms is not None:
                    rows += [
                        ("codex harness (a process per segment), per segment", codex_ms),
                        ("  ratio acp / codex", acp_ms / codex_ms),
                    ]
    finally:  # a failed row leaves no temp directory behind
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    stamp = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
    command = f"--segments {segments} --slow-segments {slow_segments}"
    command += "".join(f" --only {h}" for h in only)
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
    parser.add_argument(
        "--only", action="append", default=[], help="a harness to measure (repeatable)"
    )
    args = parser.parse_args()
    os.environ.setdefault("TMPDIR", tempfile.gettempdir())
    text = trio.run(main, args.segments, args.slow_segments, args.only)
    if args.output is not None:
        args.output.write_text(text)
