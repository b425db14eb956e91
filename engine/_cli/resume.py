"""What ``--resume`` may change, and where the resumed run is.

A resume compares the config it is given with the run directory's ``config.toml``:

- options that change **how** the run executes (``parser.EXECUTION``: concurrency,
  the endpoint URL and key variable, request timeout / retries / backoff, episode
  timeout and retries, backend, workers, max failures, the preflight, the
  interception server; and each role's ``base_url``, ``api_key_var`` and
  ``max_concurrent_calls``) may change;
- ``num_tasks`` and ``rollouts`` may grow (the new pairs run), never shrink;
- anything else changes **what** is computed (the env and its fields, the model,
  sampling, seeds) and is refused, one line per option.

Each resume is recorded in the run directory: one line appended to
``resumes.jsonl`` (``at``: the time, ``changed``: each changed option's dotted path
with its old and new value), and ``config.toml`` is rewritten with the new values, so
the next ``--resume`` (or ``-C DIR/config.toml``) runs as the last one did.

``--resume`` without ``-o`` resumes the newest run directory of that env (and of
that model, when ``--model`` is given) under ``outputs/``, or refuses, creating
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taketurns._cli.parser import EXECUTION
from taketurns._errors import ConfigError

__all__ = ["GROWABLE", "ROLE_EXECUTION", "compare", "newest_run", "run_dir_name"]

GROWABLE = ("num_tasks", "rollouts")  # may grow on a resume: the new pairs run
# a role's (``env.<role>.<option>``) options that change how it runs, not what
ROLE_EXECUTION = ("base_url", "api_key_var", "max_concurrent_calls")
OUTPUTS = Path("outputs")

_UNSET = object()


def safe(text: str) -> str:
    """``text`` as a file name a shell need not quote (``duel:Duel`` -> ``duel.Duel``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace(":", ".")).strip("_")


def run_dir_name(name: str, model: str, stamp: str) -> str:
    """A default run directory's name: ``<env>--<model>--<time>``."""
    return f"{safe(name)}--{safe(model)}--{stamp}"


def newest_run(name: str, model: str | None, root: Path = OUTPUTS) -> Path:
    """The newest run directory of env ``name`` (and ``model``, if given) under
    ``root`` that holds a ``config.toml``. Raises ``ConfigError`` (naming what was
    looked for and what to do) when there is none; creates nothing."""
    prefix = f"{safe(name)}--" + (f"{safe(model)}--" if model else "")
    found = []
    if root.is_dir():
        for path in root.iterdir():
            if path.name.startswith(prefix) and (path / "config.toml").is_file():
                found.append((_stamp(path.name), path))
    if not found:
        of = f"{name} with model {model}" if model else name
        raise ConfigError(
            f"--resume: no run of {of} under {root}/ (a directory {safe(name)}--"
            f"{safe(model) if model else '<model>'}--<time> holding config.toml); name the "
            "run directory with -o DIR"
        )
    return max(found)[1]


def _stamp(dirname: str) -> tuple[str, int]:
    """``YYYYmmdd-HHMMSS`` and the ``-n`` of a same-second twin, for ordering."""
    stamp = dirname.rsplit("--", 1)[-1]
    head, _, twin = stamp.rpartition("-")
    if head.count("-") == 1 and twin.isdigit():  # 20260101-120000-2
        return head, int(twin)
    return stamp, 1


def compare(
    stored: Mapping[str, Any], given: Mapping[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """(refused, changed) between a stored config and the one given to a resume, both
    as TOML data: one line per refused option (its dotted path and both values), and
    each allowed change as ``{path: [old, new]}`` (None for unset)."""
    old, new = _flat(stored), _flat(given)
    refused: list[str] = []
    changed: dict[str, Any] = {}
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, _UNSET), new.get(key, _UNSET)
        if before == after or key == "output_dir":
            continue
        if _executes(key) or _grows(key, before, after):
            changed[key] = [_plain(before), _plain(after)]
            continue
        line = f"{key}: {_shown(before)} in the stored config, {_shown(after)} now"
        if key in GROWABLE:
            line += " (a resume can add tasks or rollouts, never drop them)"
        refused.append(line)
    return refused, changed


def _executes(key: str) -> bool:
    if key in EXECUTION:
        return True
    parts = key.split(".")
    return len(parts) >= 3 and parts[0] == "env" and parts[-1] in ROLE_EXECUTION


def _grows(key: str, before: Any, after: Any) -> bool:
    return key in GROWABLE and isinstance(before, int) and isinstance(after, int) and after > before


def _plain(value: Any) -> Any:
    return None if value is _UNSET else value


def _shown(value: Any) -> str:
    return "unset" if value is _UNSET else repr(value)


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
