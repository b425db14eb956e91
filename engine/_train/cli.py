"""``taketurns export``: its arguments and what it prints (``_cli.main`` wires it in)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

__all__ = ["add_export_command", "export_command"]


def add_export_command(sub: Any) -> None:
    """Add the ``export`` subcommand to ``sub`` (argparse subparsers)."""
    exp = sub.add_parser(
        "export",
        help="write a run directory's training samples (token or message level) as a dataset",
        epilog=(
            "One row per sample of a trainable agent's trace in an ok episode, with its "
            "reward, group advantage and provenance; loads with "
            "datasets.load_dataset('json'|'parquet', data_files=...). Turns carry token "
            "ids when the endpoint returned them (--sampling.logprobs=true; vLLM: "
            "--sampling.extra.return_token_ids=true)."
        ),
    )
    exp.add_argument("dir", help="run directory (holds episodes.jsonl)")
    exp.add_argument("--format", default="jsonl", help="jsonl (default) or parquet")
    exp.add_argument("-o", "--output", help="file to write (default DIR/samples.FORMAT)")
    exp.add_argument("--scale", action="store_true", help="divide advantages by the group std")
    exp.add_argument(
        "--level",
        default="auto",
        help="tokens, messages (the conversation, the model's turns marked), or auto "
        "(default: tokens when the turns carry token ids, else messages)",
    )


def export_command(args: argparse.Namespace, console: Console) -> int:
    """Run ``taketurns export``; raises ``ConfigError`` for a bad run, format or level.
    Exit 1 when there was nothing to export (never 0 rows with exit 0)."""
    from taketurns._train.export import export_samples

    out = Path(args.output) if args.output else None
    done = export_samples(
        Path(args.dir), out, format=args.format, scale=args.scale, level=args.level
    )
    if done.rows == 0:
        console.print(f"[red]error:[/] nothing to export: {_why_empty(done)}", highlight=False)
        return 1
    kind = "message-level samples" if done.level == "messages" else "samples"
    console.print(
        f"wrote {done.rows} {kind} ({done.groups} task groups, {done.episodes} episodes, "
        f"{done.failed} failed and left out) to {done.path}",
        highlight=False,
    )
    if done.level == "messages" and args.level == "auto":
        console.print(
            "[yellow]no turn carried token ids, so each row is a conversation with the "
            "model's turns marked (message_mask), for trainers that tokenize themselves; "
            "for token-level rows run with --sampling.logprobs=true (and, on vLLM, "
            "--sampling.extra.return_token_ids=true)",
            highlight=False,
        )
    return 0


def _why_empty(done: Any) -> str:
    if done.episodes == 0:
        return "the run holds no episodes"
    if done.failed == done.episodes:
        return "every episode failed (rerun them with taketurns eval --resume -o DIR)"
    if done.level == "tokens":
        return (
            "no turn carried token ids: run with --sampling.logprobs=true (and, on vLLM, "
            "--sampling.extra.return_token_ids=true), or export --level messages"
        )
    return "no agent is trainable (every role has trainable = false)"
