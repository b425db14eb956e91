"""The commands over finished run directories: ``taketurns compare A B [--json]``
(``_output.comparison``) and ``taketurns rescore DIR [-o NEW] [--overwrite]
[--env.<field>=V ...]`` (``_rescore``). Both raise ``ConfigError`` for bad input (exit
2); ``rescore`` returns 1 when the new run holds failed episodes, as ``eval`` does."""

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
from taketurns._config.settings import dump_toml, load_eval_config, read_toml
from taketurns._errors import ConfigError
from taketurns._eval.plan import env_class, make_env
from taketurns._exchange.outcome import describe_cause
from taketurns._output.rundir import RunDir
from taketurns._output.summary import render

__all__ = ["compare_command", "rescore_command"]


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
    from taketurns._report.page import write_report
    from taketurns._rescore import render_change, rescore_run

    source = Path(args.dir).resolve()
    if not (source / "episodes.jsonl").is_file() or not (source / "config.toml").is_file():
        raise ConfigError(
            f"rescore: {args.dir} holds no episodes.jsonl and config.toml; pass the -o "
            "directory of an eval"
        )
    bad = [item for item in extra if not item.startswith("--env.")]
    if bad:
        raise ConfigError(
            [f"{item!r}: rescore takes only --env.<field>=V overrides" for item in bad]
        )
    file_data = read_toml(source / "config.toml")
    file_data.pop("output_dir", None)
    env_cls = env_class(str(file_data.get("env_id")), field="env")
    config = load_eval_config(
        env_cls.config_class, file_data=file_data, overrides=split_overrides(extra, "rescore")
    )
    env = make_env(config)
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
