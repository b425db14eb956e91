"""The ``taketurns`` command line's arguments, with the defaults they stand for.

Flags of ``eval`` parse to None when absent (so that a stored or ``-C`` config is not
overridden by a default); their help states the default, read from ``EvalConfig`` so
the two cannot drift apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taketurns._config.options import DEFAULT_MODEL, EvalConfig
from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError
from taketurns._train.cli import add_export_command

__all__ = ["EXECUTION", "FLAGS", "flag_names", "parser", "split_overrides", "unknown_argument"]

# flag (argparse dest) -> EvalConfig field
FLAGS = {
    "num_tasks": "num_tasks",
    "rollouts": "rollouts",
    "concurrency": "concurrency",
    "seed": "seed",
    "model": "model",
    "base_url": "base_url",
    "api_key_var": "api_key_var",
    "episode_timeout": "episode_timeout_s",
    "episode_retries": "episode_retries",
    "retry_causes": "retry_causes",
    "request_timeout": "request_timeout_s",
    "request_retries": "request_retries",
    "request_backoff": "request_backoff_s",
    "preflight_timeout": "preflight_timeout_s",
    "model_server": "model_server",
    "model_server_args": "model_server_args",
    "model_server_timeout": "model_server_timeout_s",
    "max_concurrent_calls": "max_concurrent_calls",
    "backend": "backend",
    "workers": "workers",
    "ray_address": "ray_address",
    "max_failures": "max_failures",
}
# how a run executes, not what it computes: --resume may change them (``_cli.resume``;
# output_dir: a run directory may be moved; older config.toml files named it)
EXECUTION = (
    "concurrency",
    "base_url",
    "api_key_var",
    "request_timeout_s",
    "request_retries",
    "request_backoff_s",
    "preflight_timeout_s",
    "episode_timeout_s",
    "episode_retries",
    "retry_causes",
    "max_concurrent_calls",
    "max_failures",
    "backend",
    "workers",
    "ray_address",
    "interception_host",
    "interception_port",
    "interception_public_url",
    "interception_max_body_bytes",
    "output_dir",
)

_EVAL_HELP = {
    "num_tasks": ("N", "tasks to run"),
    "rollouts": ("R", "rollouts of each task"),
    "concurrency": ("C", "episodes at once"),
    "seed": (
        "S",
        "the run's seed: the tasks, each episode's RNG, the built-in model's choices and "
        "the seed sent with every model call derive from it",
    ),
    "model": (
        "M",
        "model name; builtin/<policy> runs in process, no endpoint; llamacpp/FILE.gguf or "
        "llamacpp/smollm2-135m-instruct starts a local llama.cpp server for the run",
    ),
    "base_url": ("URL", "OpenAI-compatible endpoint, e.g. http://host:8000/v1"),
    "api_key_var": ("VAR", "environment variable holding the API key"),
    "episode_timeout": ("S", "seconds an episode may take"),
    "episode_retries": ("N", "play an episode that failed by infrastructure up to N more times"),
    "retry_causes": ("C,C", "failure causes a retry reruns (model, harness, env, scoring)"),
    "request_timeout": ("S", "seconds one model request may take, connect to last byte"),
    "request_retries": ("N", "retries of a failed model call (429, 5xx, timeouts)"),
    "request_backoff": ("S", "first wait before a retry, doubled each retry (max 30)"),
    "preflight_timeout": ("S", "seconds for the endpoint check before the first episode"),
    "model_server": (
        "CMD",
        "start this OpenAI server for the run, {port} where its port goes (e.g. "
        "'vllm serve MODEL --port {port}'); roles without --base-url use it",
    ),
    "model_server_args": ("ARGS", "more arguments for the llama.cpp server of llamacpp/ models"),
    "model_server_timeout": ("S", "seconds a model server may take to start"),
    "max_concurrent_calls": ("N", "cap on model calls at once"),
    "backend": ("B", "where episodes run: local, ray, or processes (on this machine)"),
    "workers": ("N", "worker processes or Ray tasks"),
    "ray_address": ("ADDR", "Ray cluster to join"),
    "max_failures": ("N|P%", "stop admitting episodes once more than N (P%%) failed"),
}
_NONE_MEANS = {
    "model": f"the env's default for each role, else {DEFAULT_MODEL}",
    "base_url": "none: the built-in model",
    "model_server": "none",
    "episode_timeout_s": "none",
    "max_concurrent_calls": "no cap",
    "workers": "one per CPU",
    "ray_address": "$RAY_ADDRESS, else a private local instance",
    "max_failures": "stop when the endpoint fails 10 episodes in a row",
}


# refused by argparse itself (a usage error) when not numbers; the other flags' values
# are checked by the config, which names the option
_TYPED: dict[str, Callable[[str], Any]] = {
    "num_tasks": int,
    "rollouts": int,
    "concurrency": int,
    "seed": int,
    "max_concurrent_calls": int,
    "episode_timeout": float,
    "model_server_timeout": float,
}


def _default(field: str) -> Any:
    default = attrs.fields_dict(EvalConfig)[field].default
    make = getattr(default, "factory", None)  # an attrs.Factory default (a list)
    if callable(make):
        default = make()
    return ",".join(default) if isinstance(default, list) else default


def _add_eval_flags(ev: argparse.ArgumentParser) -> None:
    for dest, field in FLAGS.items():
        metavar, text = _EVAL_HELP[dest]
        default = _default(field)
        if default is None:
            shown = _NONE_MEANS.get(field, "none")
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        names = ["--" + dest.replace("_", "-")]
        short = {"num_tasks": "-n", "rollouts": "-r", "concurrency": "-c"}.get(dest)
        if short:
            names.insert(0, short)
        ev.add_argument(
            *names,
            dest=dest,
            metavar=metavar,
            type=_TYPED.get(dest, str),
            help=f"{text} (default: {shown})",
        )


def _version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("taketurns")
    except PackageNotFoundError:  # imported from a source tree, not installed
        return "(not installed)"


# the eval flags ``exploitability`` takes (the others parse to None: the config's own)
_EXPLOITABILITY_TAKES = (
    "concurrency", "seed", "model", "base_url", "api_key_var", "request_timeout",
)  # fmt: skip


def _add_exploitability_command(sub: Any) -> None:
    """The ``exploitability`` sub-command's arguments (``_cli.exploitability``)."""
    cmd = sub.add_parser(
        "exploitability",
        help="NashConv and exploitability of a model's policy over a small game",
        description="Ask each seat at every information state of the env's game K times "
        "(seeded, through the engine like any turn), build the empirical tabular policy and "
        "measure it with the env's own measure (the env's PolicyProbe), with a bootstrap 95% "
        "interval over the K answers of each state.",
        epilog="Any other option is a dotted config override, e.g. --env.game=NAME.",
    )
    cmd.add_argument("env", help="an env that can be asked at each information state")
    k_help = "answers asked per information state (default: 100)"
    cmd.add_argument("-k", "--samples", type=int, default=100, metavar="K", help=k_help)
    r_help = "bootstrap resamples of the interval (default: 200; 0: none)"
    cmd.add_argument("--resamples", type=int, default=200, metavar="R", help=r_help)
    cmd.add_argument("-c", "--concurrency", type=int, metavar="C", help="episodes at once")
    cmd.add_argument("--seed", type=int, metavar="S", help="the run's seed (default: 0)")
    cmd.add_argument("--model", metavar="M", help="model name (default: builtin/bracket)")
    cmd.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint")
    cmd.add_argument("--api-key-var", metavar="VAR", help="environment variable of the key")
    cmd.add_argument("--request-timeout", type=float, metavar="S", help="seconds per request")
    cmd.add_argument("-C", "--config", metavar="TOML", help="config file")
    o_help = "run directory (default: outputs/<env>-exploitability--<model>--<time>)"
    cmd.add_argument("-o", "--output-dir", metavar="DIR", help=o_help)
    cmd.add_argument("--overwrite", action="store_true", help="replace the run in -o DIR")
    cmd.add_argument("--no-progress", action="store_true", help="no progress line")
    cmd.set_defaults(resume=False, **{d: None for d in FLAGS if d not in _EXPLOITABILITY_TAKES})


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``ConfigError``, printed
    by ``main`` as every refused input is), never the usage block first."""

    def error(self, message: str) -> Any:
        command = self.prog.removeprefix("taketurns").strip()
        listing = f"taketurns {command} --help" if command else "taketurns --help"
        if message.startswith("argument command: invalid choice:"):
            given = message.split("'")[1] if "'" in message else ""
            hint = did_you_mean(given, COMMANDS, quote="")
            raise ConfigError(
                f"{given!r}: unknown command; {hint + ' ' if hint else ''}"
                f"(commands: {', '.join(COMMANDS)}; taketurns --help)"
            )
        raise ConfigError(f"{message.removeprefix('argument ')} ({listing} lists the flags)")


COMMANDS = ("eval", "envs", "report", "compare", "rescore", "replay", "export", "view", "serve")


def refuse_leading_flag(argv: Sequence[str]) -> None:
    """Refuse a flag given before the command (``taketurns -n 5 eval ...``): every
    flag belongs to a command and goes after it."""
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        command = next((a for a in argv if a in COMMANDS), "eval")
        raise ConfigError(
            f"{argv[0]!r}: a flag goes after the command: taketurns {command} ... "
            f"{argv[0]} (taketurns {command} --help lists its flags)"
        )


def parser() -> argparse.ArgumentParser:
    """The whole command line: ``eval``, ``envs``, ``report``, ``compare``, ``export``,
    ``exploitability``, ``serve``, ``view``."""
    top = _Parser(
        prog="taketurns",
        description="Run, record and score multi-turn LLM rollouts (trio-based).",
    )
    top.add_argument("--version", action="version", version=f"taketurns {_version()}")
    sub = top.add_subparsers(dest="command", required=True)
    ev = sub.add_parser(
        "eval",
        help="run an env's tasks and record every episode",
        epilog=(
            "Any other option is a dotted config override: --env.<field>=V, "
            "--env.<role>.model=M, --sampling.temperature=0.7 (see `taketurns envs`). "
            "Exit codes: 0 done, 1 episodes failed or the run directory could not be "
            "written (--resume continues), 2 refused config, 130 interrupted (--resume "
            "continues)."
        ),
    )
    ev.add_argument(
        "env",
        nargs="?",
        help="env or taskset id (see `taketurns envs`), or a class: ./file.py:Class, "
        "package.module:Class",
    )
    _add_eval_flags(ev)
    ev.add_argument("-C", "--config", metavar="TOML", help="config file (e.g. DIR/config.toml)")
    ev.add_argument(
        "-o",
        "--output-dir",
        metavar="DIR",
        help="run directory (default: outputs/<env>--<model>--<time>)",
    )
    mode = ev.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the run in -o DIR")
    mode.add_argument("--overwrite", action="store_true", help="replace the run in -o DIR")
    ev.add_argument("--no-progress", action="store_true", help="no progress line")
    envs = sub.add_parser("envs", help="list envs, tasksets and harnesses with their options")
    envs.add_argument("id", nargs="?", help="show one env, taskset or harness")
    rep = sub.add_parser("report", help="write DIR/report.html for a run directory")
    rep.add_argument("dir", help="run directory (holds episodes.jsonl)")
    cmp = sub.add_parser(
        "compare",
        help="paired difference per task between two run directories, per agent",
        description="For each agent (by name), B - A of mean rewards over the tasks both "
        "runs hold, with a bootstrap 95%% interval over tasks (seeded: deterministic).",
    )
    cmp.add_argument("a", metavar="A", help="run directory (holds episodes.jsonl)")
    cmp.add_argument("b", metavar="B", help="run directory compared with A")
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    res = sub.add_parser(
        "rescore",
        help="score a run's recorded traces again with the env's current rubric",
        description="Recompute every recorded trace's rewards and metrics with the env's "
        "current rubric (judges call the run's endpoints; no agent model is called) into a "
        "new run directory.",
        epilog="Any other option is an override of the env's config: --env.<field>=V.",
    )
    res.add_argument("dir", help="run directory (holds episodes.jsonl and config.toml)")
    res.add_argument(
        "-o", "--output-dir", metavar="NEW", help="new run directory (default: DIR-rescored)"
    )
    res.add_argument("--overwrite", action="store_true", help="replace the run in -o NEW")
    rpl = sub.add_parser(
        "replay",
        help="re-drive a run's recorded episodes with their recorded replies",
        description="Play each recorded episode's env again on its recorded task, every seat's "
        "model call answered with the reply recorded for it, in order; a call the record "
        "does not hold (the env or its rules changed) is a named divergence (episode, seat, "
        "turn, what differed). Each replayed record is compared with the recorded one and "
        "written to a new run directory. Exit 1 when any episode diverged or failed.",
        epilog="Any other option is an override of the env's config: --env.<field>=V.",
    )
    rpl.add_argument("dir", help="run directory (holds episodes.jsonl and config.toml)")
    rpl.add_argument(
        "--episode",
        action="append",
        metavar="ID",
        help="replay only this episode (repeatable; default: every episode)",
    )
    rpl.add_argument(
        "-o", "--output-dir", metavar="OUT", help="new run directory (default: DIR-replayed)"
    )
    rpl.add_argument("--overwrite", action="store_true", help="replace the run in -o OUT")
    add_export_command(sub)
    _add_exploitability_command(sub)
    view = sub.add_parser(
        "view",
        help="a local web app over run directories, live while evals run",
        description="Serve a read-only web app over every run directory under DIR "
        "(default: outputs/): the runs, each run's figures and transcripts, comparisons, "
        "live while evals write them, and a JSON API under /api/.",
    )
    view.add_argument("dirs", nargs="*", metavar="DIR", help="folders of run directories")
    view.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    view.add_argument("--port", type=int, default=8765, help="0 picks a free port (default: 8765)")
    srv = sub.add_parser("serve", help="serve the built-in model over OpenAI-compatible HTTP")
    srv.add_argument("--policy", default="bracket", help="built-in policy (default: bracket)")
    srv.add_argument(
        "--latency-ms", type=float, default=0.0, help="fixed latency per call (default: 0)"
    )
    srv.add_argument("--seed", type=int, default=0, help="(default: 0)")
    srv.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model name to answer to besides builtin/<policy> and <policy> "
        "(repeatable); any other name is refused (404), as a real endpoint does",
    )
    srv.add_argument("--host", default="127.0.0.1", help="(default: 127.0.0.1)")
    srv.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: 8000)")
    return top


def flag_names(command: str) -> list[str]:
    """Every option string ``taketurns COMMAND`` takes (``--concurrency``, ``-c``, ...)."""
    top = parser()
    for action in top._actions:  # argparse keeps sub-commands on a private attribute
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[command]
            return [name for a in sub._actions for name in a.option_strings]
    return []


def unknown_argument(item: str, command: str) -> str:
    """The message for an argument ``taketurns COMMAND`` does not take: the flags it
    is close to, else where the flags and the dotted options are listed."""
    given = item.split("=", 1)[0]
    hint = did_you_mean(given, [f for f in flag_names(command) if f.startswith("--")], quote="")
    if hint:
        return f"{item!r}: unknown argument; {hint} (taketurns {command} --help lists the flags)"
    dotted = (
        "; options of a config section are dotted, e.g. --env.invalid_retries=2 or "
        "--sampling.temperature 0.7 (taketurns envs lists them)"
        if command == "eval"
        else ""
    )
    return f"{item!r}: unknown argument; taketurns {command} --help lists the flags{dotted}"


def split_overrides(extra: Sequence[str], command: str = "eval") -> list[tuple[str, str]]:
    """``--a.b=V`` / ``--a.b V`` pairs; anything else is a usage error (of ``command``)."""
    pairs: list[tuple[str, str]] = []
    items = list(extra)
    while items:
        item = items.pop(0)
        if not item.startswith("--") or "." not in item.split("=", 1)[0]:
            raise ConfigError(unknown_argument(item, command))
        key, eq, value = item[2:].partition("=")
        if not eq:
            if not items:
                raise ConfigError(f"--{key}: needs a value (--{key}=VALUE)")
            value = items.pop(0)
        pairs.append((key, value))
    return pairs
