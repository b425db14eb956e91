"""The commands over finished run directories: ``taketurns compare A B [--json]``
(``_output.comparison``), ``taketurns rescore DIR [-o NEW] [--overwrite]
[--env.<field>=V ...]`` (``_rescore``) and ``taketurns replay DIR [--episode ID ...]
[-o OUT] [--overwrite] [--env.<field>=V ...]`` (``_replay``). All raise ``ConfigError``
for bad input (exit 2), before anything runs; ``rescore`` returns 1 when the new run
holds failed episodes, as ``eval`` does, ``replay`` when an episode diverged or failed."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import attrs
import trio
from rich.console import Console
from rich.markup import escape

from taketurns._cli.parser import split_overrides
from taketurns._config.settings import dump_toml, read_toml
from taketurns._errors import ConfigError
from taketurns._exchange.outcome import describe_cause
from taketurns._output.recorded import open_recorded
from taketurns._output.rundir import RunDir
from taketurns._output.summary import render

__all__ = ["compare_command", "replay_command", "rescore_command"]


def compare_command(args: argparse.Namespace, console: Console) -> int:
    """``taketurns compare A B``: the table on stderr, or the JSON object on stdout."""
    from taketurns._output.comparison import compare, render_comparison
    from taketurns._output.records import read_episodes

    dirs = [Path(args.a), Path(args.b)]
    for label, path in zip("AB", dirs, strict=True):
        if not (path / "episodes.jsonl").is_file():
            raise ConfigError(
                f"compare {label}: {path} holds no episodes.jsonl; pass the -o directory of an eval"
            )
    a, b = (read_episodes(path / "episodes.jsonl") for path in dirs)
    result = compare(a, b)
    env_a, env_b = (_env_id(path) for path in dirs)
    if env_a != env_b:
        note = f"note: A ran {env_a} and B ran {env_b}; tasks are matched by index and name"
        console.print(f"[yellow]{escape(note)}", highlight=False)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(render_comparison(result, a=str(dirs[0]), b=str(dirs[1])))
    return 0


def rescore_command(args: argparse.Namespace, extra: Sequence[str], console: Console) -> int:
    """``taketurns rescore DIR``: the new run directory, its summary and report."""
    from taketurns._report.feed import write_report
    from taketurns._rescore import render_change, rescore_run

    recorded = open_recorded(args.dir, _env_overrides(extra, "rescore"), command="rescore")
    source, config, env = recorded.path, recorded.config, recorded.env
    out = (
        Path(args.output_dir)
        if args.output_dir
        else _free(source.with_name(source.name + "-rescored"))
    )
    if out.resolve() == source:
        raise ConfigError(f"-o {out}: is the run being rescored; name a new directory")
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=args.overwrite)
    try:
        run_dir.write_config(dump_toml(attrs.evolve(config, output_dir=None)))
        run_dir.open()
        try:
            summary = trio.run(partial(rescore_run, source, run_dir, config, env))
        finally:
            run_dir.close()
        run_dir.write_summary(summary)
        write_report(run_dir.path, env=env)
    finally:
        run_dir.unlock()
    console.print(render(summary))
    console.print(render_change(summary))
    console.print(f"[green]wrote {run_dir.path}[/]", highlight=False, soft_wrap=True)
    if summary.get("failed"):
        causes = ", ".join(
            f"{describe_cause(k)} {v}" for k, v in summary["failed_by_cause"].items()
        )
        line = (
            f"{summary['failed']} of {summary['episodes']} episodes failed ({causes}); "
            f"see {run_dir.path / 'report.html'}"
        )
        console.print(f"[red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
        return 1
    return 0


def replay_command(args: argparse.Namespace, extra: Sequence[str], console: Console) -> int:
    """``taketurns replay DIR``: the new run directory, its summary, which episodes
    diverged or failed, and the report."""
    from taketurns._replay.run import prepare_replay
    from taketurns._replay.rundir import render_replay, replay_run
    from taketurns._report.feed import write_report

    overrides = _env_overrides(extra, "replay")
    replaying = prepare_replay(args.dir, args.episode or (), overrides)
    source = replaying.recorded.path
    out = (
        Path(args.output_dir)
        if args.output_dir
        else _free(source.with_name(source.name + "-replayed"))
    )
    if out.resolve() == source:
        raise ConfigError(f"-o {out}: is the run being replayed; name a new directory")
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=args.overwrite)

    def note(text: str) -> None:
        console.print(f"[yellow]{escape(text)}", highlight=False, soft_wrap=True)

    try:
        config = replaying.recorded.config
        run_dir.write_config(dump_toml(attrs.evolve(config, output_dir=None)))
        run_dir.open()
        try:
            summary = replay_run(replaying, run_dir, notify=note)
        finally:
            run_dir.close()
        run_dir.write_summary(summary)
        write_report(run_dir.path)
    finally:
        run_dir.unlock()
    console.print(render(summary))
    lines = render_replay(summary)
    source_counts = summary["replayed_from"]
    bad = source_counts["diverged"] + source_counts["failed"]
    console.print(lines[0], style="red" if bad else "green", highlight=False, soft_wrap=True)
    for line in lines[1:]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"[green]wrote {run_dir.path}[/]", highlight=False, soft_wrap=True)
    return 1 if bad else 0


def _env_overrides(extra: Sequence[str], command: str) -> list[tuple[str, str]]:
    """``command``'s ``--env.<field>=V`` overrides; any other argument is refused."""
    bad = [item for item in extra if not item.startswith("--env.")]
    if bad:
        raise ConfigError(
            [f"{item!r}: {command} takes only --env.<field>=V overrides" for item in bad]
        )
    return split_overrides(extra, command)


def _free(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... the first that does not exist."""
    found, n = path, 1
    while found.exists():
        n += 1
        found = path.with_name(f"{path.name}-{n}")
    return found


def _env_id(run_dir: Path) -> str:
    """The env a run directory's ``config.toml`` names (``?`` without one)."""
    path = run_dir / "config.toml"
    return str(read_toml(path).get("env_id", "?")) if path.is_file() else "?"
