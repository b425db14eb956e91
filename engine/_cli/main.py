"""The ``taketurns`` command line.

``taketurns eval ENV [-n N] [-r R] [-c C] [--model M] [--base-url URL]
[--api-key-var VAR] [-C run.toml] [--env.<field>=V ...] [-o DIR] [--resume|--overwrite]
[--backend local|ray|processes] [--workers N] [--ray-address ADDR]``;
``taketurns export DIR [--format jsonl|parquet] [-o FILE] [--scale]``;
``taketurns compare A B [--json]``;
``taketurns rescore DIR [-o NEW] [--overwrite] [--env.<field>=V ...]``;
``taketurns replay DIR [--episode ID ...] [-o OUT] [--overwrite] [--env.<field>=V ...]``;
``taketurns view [DIR ...] [--host H] [--port P]`` (``_view.command``);
``taketurns exploitability ENV [-k K] [--model M] ...`` (``_cli.exploitability``)

Any ``--a.b.c=V`` (or ``--a.b.c V``) is a dotted override of the config; dashes and
underscores are interchangeable. Exit codes: 0 done, 1 some episodes failed (an infrastructure
failure, ``_exchange.outcome``; everything is written and ``--resume`` reruns them; also
when too many failed and the run stopped early, ``_eval.brake``) or
the run directory could not be written (a full disk) or a replayed episode diverged or
failed, 2 bad config or usage (also a
run directory another process is writing), 130 interrupted (finished episodes are on
disk; ``--resume`` continues). A model server the run started (``llamacpp/`` models,
``--model-server``) that cannot start or dies: 1, its log named in the message.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
from rich.console import Console
from rich.markup import escape

from taketurns._cli.interrupts import quiet_interrupts, status_decided
from taketurns._cli.parser import (
    FLAGS,
    parser,
    refuse_leading_flag,
    split_overrides,
    unknown_argument,
)
from taketurns._cli.resume import OUTPUTS, compare, newest_run, run_dir_name
from taketurns._cli.rundirs import compare_command, replay_command, rescore_command
from taketurns._cli.served_model import asks_for_model, served_model
from taketurns._config.options import EvalConfig
from taketurns._config.reference import absolute, is_reference, reference_name
from taketurns._config.registry import envs, tasksets
from taketurns._config.settings import dump_toml, load_eval_config, read_toml
from taketurns._errors import (
    ConfigError,
    Interrupted,
    ModelServerError,
    OutputError,
    WorkerError,
    WorkerLost,
)
from taketurns._eval.plan import Plan, env_class, make_env, preflight
from taketurns._eval.taskset import Taskset
from taketurns._exchange.outcome import describe_cause
from taketurns._gc import tuned_gc
from taketurns._output.failures import failure_lines
from taketurns._output.rundir import RunDir
from taketurns._output.summary import render
from taketurns._runner import run_eval
from taketurns._train.cli import export_command

__all__ = ["main"]

SINGLE_AGENT = "single-agent"


def _default_dir(name: str, model: str) -> Path:
    """``outputs/<env>--<model>--<time>``, with ``-2``, ``-3``... when two runs start
    in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = OUTPUTS / run_dir_name(name, model, stamp)
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _load_config(
    args: argparse.Namespace, extra: Sequence[str], *, say: Callable[[str], None] | None = None
) -> tuple[EvalConfig, str]:
    """The validated eval config (file < flags < dotted overrides) and the name the run
    goes by (a bare taskset id runs under the single-agent env). ``--base-url`` without
    a model anywhere: the model is the one the server lists (``served_model``)."""
    overrides = split_overrides(extra)
    flags = [(field, getattr(args, flag)) for flag, field in FLAGS.items()]
    overrides = [(f, str(v)) for f, v in flags if v is not None] + overrides
    file_data = read_toml(args.config) if args.config else {}
    if args.config and _is_own_dir(file_data.get("output_dir"), Path(args.config).parent):
        # a run directory's own config.toml (older runs stored their location): a
        # rerun goes to a new directory
        file_data.pop("output_dir")
    if args.resume and args.output_dir and not args.config:
        stored = Path(args.output_dir) / "config.toml"
        file_data = read_toml(stored) if stored.exists() else {}
    env_id = args.env or file_data.get("env_id")
    if not env_id:
        raise ConfigError("env: name the env to run (taketurns eval ENV); see `taketurns envs`")
    env_id = str(env_id)
    name = reference_name(env_id) if is_reference(env_id) else env_id
    is_taskset = _is_taskset(env_id)  # imports a reference: a bad one is refused here
    if not is_taskset:
        env_class(env_id, field="env")
    env_id = absolute(env_id)  # a file reference reruns from any directory
    if is_taskset:
        # a bare taskset runs under the single-agent env (one-shot agent.run)
        env_section = dict(file_data.get("env") or {})
        env_section.setdefault("taskset", env_id)
        file_data = {**file_data, "env": env_section}
        env_id = SINGLE_AGENT
    file_data = {**file_data, "env_id": env_id}
    env_cls = env_class(env_id, field="env")
    config = load_eval_config(env_cls.config_class, file_data=file_data, overrides=overrides)
    if "model" not in file_data and args.model is None and asks_for_model(config):
        config.model = served_model(config, say=say or partial(print, file=sys.stderr))
    return config, name


def _is_taskset(env_id: str) -> bool:
    """Whether ``env_id`` names a taskset (registered, or a ``Taskset`` class by
    reference) rather than an env."""
    if env_id in envs.ids():
        return False
    if env_id in tasksets.ids():
        return True
    if not is_reference(env_id):
        return False
    obj = envs.get(env_id, field="env")  # imports it: a bad reference is refused here
    return isinstance(obj, type) and issubclass(obj, Taskset)


def _open_run_dir(
    args: argparse.Namespace, config: EvalConfig, name: str, model: str, note: str = ""
) -> RunDir:
    """The run directory, prepared and locked: a fresh one gets config.toml; a resumed
    one must hold the same config but for how the run executes (``_cli.resume``: the
    change is recorded). The stored config never names the directory, so a run
    directory can be moved or copied and resumed where it is."""
    out = args.output_dir or config.output_dir or _default_dir(name, model)
    config.output_dir = str(out)
    run_dir = RunDir(out)
    run_dir.prepare(resume=args.resume, overwrite=args.overwrite)
    try:
        text = dump_toml(attrs.evolve(config, output_dir=None)) + note
        if args.resume and run_dir.config_path.exists():
            changed = _resumed_changes(run_dir.config_path, config)
            run_dir.record_resume(changed)
            if changed:
                run_dir.write_config(text)
        else:
            run_dir.write_config(text)
    except BaseException:
        run_dir.unlock()
        raise
    return run_dir


def _resumed_changes(stored_path: Path, config: EvalConfig) -> dict[str, Any]:
    """What a resume changes in the stored config (how the run executes); a change in
    what the run computes is refused with ``ConfigError``, one line per option. Sync
    and cheap: checked before the endpoint preflight, so a refused resume is the
    first thing the user sees, then again where the run directory is opened."""
    text = dump_toml(attrs.evolve(config, output_dir=None))
    stored = _normalised(read_toml(stored_path), config)
    refused, changed = compare(stored, tomllib.loads(text))
    if refused:
        raise ConfigError(
            [
                f"--resume: the config differs from {stored_path} in what "
                "the run computes; resume with the same options (or none: the stored "
                "config is reused; how it runs, e.g. -c, --base-url, timeouts, may "
                "change, and -n/-r may grow):",
                *refused,
            ]
        )
    return changed


def _normalised(stored: dict[str, Any], config: EvalConfig) -> dict[str, Any]:
    """A stored config as this version writes it (options added since then take
    their defaults); as it is when it no longer loads (the comparison then names
    what differs)."""
    try:
        again = load_eval_config(type(config.env), file_data=stored)
    except ConfigError:
        return stored
    return tomllib.loads(dump_toml(attrs.evolve(again, output_dir=None)))


def _eval(args: argparse.Namespace, extra: Sequence[str], console: Console) -> int:
    if args.resume and not args.output_dir and not args.config and args.env:
        name = reference_name(args.env) if is_reference(args.env) else args.env
        args.output_dir = str(newest_run(name, args.model))
    config, name = _load_config(args, extra, say=lambda text: console.print(text, highlight=False))
    env = make_env(config)
    plan = Plan(config, env)
    if config.backend == "ray":
        from taketurns._backends.ray import require_ray

        require_ray(config.env_id)
    tasks = env.tasks(config.num_tasks)  # a bad taskset file or missing data fails here
    # the default directory is named after --model, else the first role's model
    model = config.model or next((r.model for r in plan.roles.values() if r.model), "none")
    resumed = Path(args.output_dir or config.output_dir or ".") / "config.toml"
    if args.resume and resumed.is_file():
        _resumed_changes(resumed, config)  # a refused resume: before the preflight
    trio.run(partial(preflight, say=lambda text: console.print(text, highlight=False)), config, env)
    run_dir = _open_run_dir(args, config, name, model, plan.sampling_note())
    console.print(
        f"{'resuming' if args.resume else 'running'} {name}: {len(tasks)} tasks x "
        f"{config.rollouts} rollouts, {config.concurrency} at once ({config.backend}), "
        f"into {run_dir.path}",
        highlight=False,
        soft_wrap=True,
    )

    def note(text: str) -> None:
        console.print(f"[yellow]{escape(text)}", highlight=False, soft_wrap=True)

    try:
        with tuned_gc():  # this process is the CLI's own
            result = trio.run(
                lambda: run_eval(
                    config,
                    run_dir,
                    env=env,
                    plan=plan,
                    tasks=tasks,
                    progress=not args.no_progress,
                    handle_signals=True,
                    notify=note,
                )
            )
    except Interrupted as exc:
        status_decided()  # before the line that says so
        console.print(f"[yellow]{exc}; continue with --resume -o {run_dir.path}")
        return 130
    s = result.summary
    console.print(render(s))
    if result.written:
        rate = result.written / s["wall_s"] if s.get("wall_s") else 0.0
        done = f"{result.written} new episodes, {rate:.1f} episodes/s"
    else:
        done = "nothing to do: every (task, rollout) pair was already written"
    console.print(f"[green]wrote {run_dir.path}[/] ({done})", highlight=False, soft_wrap=True)
    if result.stopped:
        line = escape(_stopped_line(result.stopped, s, config, run_dir.path))
        console.print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True)
    if s.get("failed"):
        line = escape(_failed_line(s, run_dir.path))
        console.print(f"[red]error:[/] {line}", highlight=False, soft_wrap=True)
        for text in failure_lines(s, run_dir.path):
            console.print(text, highlight=False, markup=False, soft_wrap=True)
        return 1
    return 0


def _failed_line(summary: Mapping[str, Any], path: Path) -> str:
    """``3 of 50 episodes failed, mostly because the model endpoint failed (3); ...``"""
    causes = summary.get("failed_by_cause") or {}
    main_cause, count = max(causes.items(), key=lambda kv: kv[1], default=("?", 0))
    return (
        f"{summary['failed']} of {summary['episodes']} episodes failed, mostly because "
        f"{describe_cause(main_cause)} ({count}); their rewards are left out of the means. "
        f"Rerun them with --resume -o {path}"
    )


def _stopped_line(reason: str, summary: Mapping[str, Any], config: EvalConfig, path: Path) -> str:
    """``stopped early: <why>; 250 pairs not played. Once ... --resume -o DIR``"""
    left = config.num_tasks * config.rollouts - int(summary.get("episodes") or 0)
    return (
        f"stopped early: {reason}; {left} (task, rollout) pairs were not played. Once the "
        f"cause is fixed, continue with --resume -o {path} (failed episodes run again too)"
    )


def _report(run_dir: Path, console: Console) -> int:
    from taketurns._report.feed import write_report

    if not (run_dir / "episodes.jsonl").exists():
        raise ConfigError(f"report: {run_dir} holds no episodes.jsonl")

    def note(text: str) -> None:
        console.print(f"[yellow]{escape(text)}", highlight=False, soft_wrap=True)

    console.print(f"wrote {write_report(run_dir, notify=note)}")
    return 0


def _is_own_dir(output_dir: object, folder: Path) -> bool:
    if not isinstance(output_dir, str):
        return False
    return Path(output_dir).resolve() == folder.resolve()


def _cannot_listen(host: str, port: int, group: BaseExceptionGroup[OSError]) -> str:
    """``--host/--port: cannot listen on H:P (the OS's reason); ...`` from the first
    ``OSError`` inside trio's (possibly nested) exception groups."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return (
        f"--host/--port: cannot listen on {host}:{port} ({error}); is another server "
        "there? pick another port with --port (0: any free port)"
    )


def _serve(args: argparse.Namespace, console: Console) -> int:
    from taketurns._http.server import serve
    from taketurns._models.builtin import BuiltinModel

    model = BuiltinModel(
        args.policy, latency=args.latency_ms / 1000, seed=args.seed, field="--policy"
    )

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(
                    partial(serve, model, host=args.host, port=args.port, names=args.name)
                )
                console.print(f"serving builtin/{args.policy} at {url} (Ctrl-C stops)")
                print(url, flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

    try:
        trio.run(run)
    except* OSError as group:
        raise ConfigError(_cannot_listen(args.host, args.port, group)) from None
    return 0


@quiet_interrupts
def main(argv: Sequence[str] | None = None) -> int:
    # soft_wrap: a message is never hard-wrapped (at 80 columns off a terminal)
    console = Console(stderr=True, soft_wrap=True)
    try:
        refuse_leading_flag(sys.argv[1:] if argv is None else argv)
        args, extra = parser().parse_known_args(argv)
        if args.command == "eval":
            return _eval(args, extra, console)
        if args.command == "rescore":
            return rescore_command(args, extra, console)
        if args.command == "replay":
            return replay_command(args, extra, console)
        if args.command == "exploitability":
            from taketurns._cli.exploitability import exploitability_command

            return exploitability_command(args, extra, console, _load_config, _open_run_dir)
        if extra:
            raise ConfigError([unknown_argument(item, args.command) for item in extra])
        if args.command == "serve":
            return _serve(args, console)
        if args.command == "report":
            return _report(Path(args.dir), console)
        if args.command == "compare":
            return compare_command(args, console)
        if args.command == "view":
            from taketurns._view.command import view_command

            return view_command(args, console)
        if args.command == "export":
            return export_command(args, console)
        from taketurns._cli.catalog import print_catalog, print_entry

        out = Console()
        out = out if out.is_terminal else Console(width=160)
        if args.id:
            print_entry(out, args.id)
        else:
            print_catalog(out)
        return 0
    except ConfigError as exc:
        console.print("[red]error:", highlight=False)
        for problem in exc.problems:
            # one line per problem at any width (soft_wrap: never wrapped or cut)
            console.print(f"  - {problem}", highlight=False, markup=False, soft_wrap=True)
        return 2
    except (WorkerLost, WorkerError, OutputError, ModelServerError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
