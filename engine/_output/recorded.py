"""A finished run directory read back: its config (and env) as it ran, and its
recorded episodes. What ``rescore`` and ``replay`` start from.

``open_recorded`` checks that the directory holds ``episodes.jsonl`` and
``config.toml``, loads the stored config with the caller's ``--env.<field>=V``
overrides (anything else is refused) and builds the env; every problem is a
``ConfigError`` naming the command and the fix. ``recorded_episodes`` streams the
episodes back (``loads_episode``), skipping damaged lines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from taketurns._config.options import EvalConfig
from taketurns._config.settings import load_eval_config, read_toml
from taketurns._errors import ConfigError
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import env_class, make_env
from taketurns._output.records import loads_episode

__all__ = ["Recorded", "open_recorded", "recorded_episodes"]


@attrs.frozen
class Recorded:
    """A run directory (resolved) with the config it ran and its env, built anew."""

    path: Path
    config: EvalConfig
    env: Env

    @property
    def episodes_path(self) -> Path:
        return self.path / "episodes.jsonl"


def open_recorded(
    path: str | Path, overrides: Sequence[tuple[str, str]] = (), *, command: str
) -> Recorded:
    """The run directory ``path`` read back for ``command`` (``rescore``, ``replay``):
    its stored config with ``overrides`` (dotted ``env.<field>`` paths and raw values)
    applied, and the env built from it. Raises ``ConfigError`` for a directory that is
    no eval's, an override outside ``env.``, or a config that no longer loads."""
    source = Path(path).resolve()
    if not (source / "episodes.jsonl").is_file() or not (source / "config.toml").is_file():
        raise ConfigError(
            f"{command}: {path} holds no episodes.jsonl and config.toml; pass the -o "
            "directory of an eval"
        )
    bad = [f"--{field}={value}" for field, value in overrides if not field.startswith("env.")]
    if bad:
        raise ConfigError(
            [f"{item!r}: {command} takes only --env.<field>=V overrides" for item in bad]
        )
    file_data = read_toml(source / "config.toml")
    file_data.pop("output_dir", None)
    env_cls = env_class(str(file_data.get("env_id")), field="env")
    config = load_eval_config(env_cls.config_class, file_data=file_data, overrides=overrides)
    return Recorded(source, config, make_env(config))


def recorded_episodes(path: Path, damaged: list[int] | None = None) -> Iterator[Episode]:
    """The episodes of ``path`` (an ``episodes.jsonl``), one line at a time; damaged
    lines are skipped (their line numbers appended to ``damaged`` when given)."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                yield loads_episode(raw)
            except ValueError:
                if damaged is not None:
                    damaged.append(number)
