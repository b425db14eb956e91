"""Reference program for the ``program`` harness: the chat/tool loop, one segment per
process, or any number of segments of any rollouts in one process.

``python -m taketurns.harnesses.programs.chat --prompt-file P --output-file O`` reads
``{"messages": [...], "tools": [...], "tool_url": "..."}`` from P, runs the chat loop
against ``OPENAI_BASE_URL`` (key ``OPENAI_API_KEY``, model ``OPENAI_MODEL``) and writes
``{"messages": [new assistant/tool messages]}`` to O; it exits 3 when the engine
stopped the rollout.

``python -m taketurns.harnesses.programs.chat --serve`` (the harness's ``persistent`` pool)
speaks the line protocol instead: it reads one prompt object per line of stdin until
EOF, each also carrying its rollout's endpoint (``base_url``, ``api_key``, ``model``;
the ``OPENAI_*`` variables fill in what a line leaves out) and, per line, runs the
loop against that endpoint and writes one line to stdout, ``{"messages": [...]}``,
with ``"stopped": true`` when the engine stopped the rollout, and flushes. One HTTP
client serves every line (the key goes on each request), so its connections stay
warm from rollout to rollout. Nothing else goes to stdout: a stray ``print`` lands on
stderr. Any other failure ends the process (status 1, traceback on stderr), as in the
one-segment mode.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

if __package__:  # python -m taketurns.harnesses.programs.chat
    from taketurns.harnesses.programs import loop
else:  # by path, as the harness starts it (``programs.command``): no package imported
    import loop  # type: ignore[import-not-found,no-redef]  # this folder is sys.path[0]


def segment(
    prompt: dict[str, Any], http: loop.Client | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Run the loop on one prompt object against its endpoint; (new messages, stopped)."""
    return loop.run(
        prompt["messages"],
        prompt.get("tools") or [],
        prompt.get("tool_url"),
        http,
        loop.Endpoint.of(prompt),
    )


def serve(lines: BinaryIO, out: BinaryIO) -> None:
    """Answer one line on ``out`` for every prompt line on ``lines``, until EOF."""
    with loop.client() as http:
        for line in iter(lines.readline, b""):
            new, stopped = segment(json.loads(line), http)
            if stopped:
                print(loop.STOPPED_NOTE, file=sys.stderr, flush=True)
            out.write(json.dumps(loop.answer(new, stopped)).encode() + b"\n")
            out.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", action="store_true", help="the line protocol on stdin/out")
    parser.add_argument("--prompt-file", type=Path)
    parser.add_argument("--output-file", type=Path)
    args = parser.parse_args()
    if args.serve:
        out = sys.stdout.buffer
        sys.stdout = sys.stderr  # stdout is the protocol's: anything else goes to stderr
        serve(sys.stdin.buffer, out)
        return
    if args.prompt_file is None or args.output_file is None:
        parser.error("--prompt-file and --output-file are required (or --serve)")
    prompt = json.loads(args.prompt_file.read_text(encoding="utf-8"))
    new, stopped = segment(prompt)
    loop.finish(args.output_file, new, stopped)


if __name__ == "__main__":
    main()
