"""Reference program for the ``program`` harness: one segment per process.

``python -m harnesses.programs.chat --prompt-file P --output-file O`` reads
``{"messages": [...], "tools": [...], "tool_url": "..."}`` from P, runs the chat loop
against ``OPENAI_BASE_URL`` and writes ``{"messages": [new assistant/tool messages]}``
to O.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harnesses.programs import loop


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt-file", type=Path, required=True)
    parser.add_argument("--output-file", type=Path, required=True)
    args = parser.parse_args()
    prompt = json.loads(args.prompt_file.read_text(encoding="utf-8"))
    new, stopped = loop.run(prompt["messages"], prompt.get("tools") or [], prompt.get("tool_url"))
    loop.finish(args.output_file, new, stopped)


if __name__ == "__main__":
    main()
