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
        help="write a run directory's token-level training samples as a dataset",
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


def export_command(args: argparse.Namespace, console: Console) -> int:
    """Run ``taketurns export``; raises ``ConfigError`` for a bad run or format."""
    from taketurns._train.export import export_samples

    out = Path(args.output) if args.output else None
    done = export_samples(Path(args.dir), out, format=args.format, scale=args.scale)
    console.print(
        f"wrote {done.rows} samples ({done.groups} task groups, {done.episodes} episodes, "
        f"{done.failed} failed and left out) to {done.path}"
    )
    if done.rows == 0 and done.episodes > done.failed:
        console.print(
            "[yellow]no turn carried token ids: run with --sampling.logprobs=true "
            "(and, on vLLM, --sampling.extra.return_token_ids=true)"
        )
    return 0
