"""Reference program for the ``stateful`` harness: keeps its own session, like an
agent CLI with ``exec resume --last``.

Fresh: ``--session-dir D --prompt-file P --output-file O`` starts a session from the
prompt's messages. Resume: ``--session-dir D --resume --message-file M --output-file
O`` loads D's session and continues it with only the new message(s) in M. Either way
the session (the whole conversation) is saved back to D.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__:  # python -m taketurns.harnesses.programs.stateful
    from taketurns.harnesses.programs import loop
else:  # by path, as the harness starts it (``programs.command``): no package imported
    import loop  # type: ignore[import-not-found,no-redef]  # this folder is sys.path[0]

SESSION = "session.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--prompt-file", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--message-file", type=Path)
    parser.add_argument("--output-file", type=Path, required=True)
    args = parser.parse_args()
    path = args.session_dir / SESSION
    if args.resume:
        if not path.exists():
            print(f"no session to resume in {args.session_dir}", file=sys.stderr)
            sys.exit(2)
        session = json.loads(path.read_text(encoding="utf-8"))
        session["messages"] += json.loads(args.message_file.read_text(encoding="utf-8"))["messages"]
    else:
        session = json.loads(args.prompt_file.read_text(encoding="utf-8"))
    new, stopped = loop.run(
        session["messages"], session.get("tools") or [], session.get("tool_url")
    )
    session["messages"] += new
    path.write_text(json.dumps(session), encoding="utf-8")
    loop.finish(args.output_file, new, stopped)


if __name__ == "__main__":
    main()
