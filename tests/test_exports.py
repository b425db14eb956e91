"""The public surface: ``taketurns.__all__`` is sorted, complete and resolvable; every
module's own ``__all__`` resolves; implementation modules are private (STYLE.md
item 2), and the only public submodules are the deliberate ones."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import taketurns

PUBLIC_SUBMODULES = {"taketurns.testing", "taketurns.envs", "taketurns.harnesses"}


def test_all_is_sorted_without_duplicates() -> None:
    assert taketurns.__all__ == sorted(taketurns.__all__)
    assert len(set(taketurns.__all__)) == len(taketurns.__all__)


def test_the_programmatic_eval_and_the_core_nouns_are_exported() -> None:
    wanted = {"Agent", "Env", "Task", "reward", "run_eval", "load_eval_config", "RunDir"}
    assert wanted <= set(taketurns.__all__)
    assert {"read_episodes", "EvalRun", "Interrupted", "NullHarness"} <= set(taketurns.__all__)


@pytest.mark.parametrize("name", taketurns.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(taketurns, name)  # lazily imported names resolve too
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("taketurns."), f"{name} is from {value.__module__}"


def test_everything_public_at_the_top_is_exported() -> None:
    public = {
        name
        for name, value in vars(taketurns).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public <= set(taketurns.__all__), sorted(public - set(taketurns.__all__))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = taketurns.no_such_name


def _walk(package: str) -> set[str]:
    # each of the three folders on its own: an editable install maps envs/ and
    # harnesses/ into the package without putting them under engine/
    root = importlib.import_module(package)
    return {package} | {m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")}


MODULES = sorted(
    (_walk("taketurns") | _walk("taketurns.envs") | _walk("taketurns.harnesses"))
    - {"taketurns", "taketurns.__main__"}
)


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")[1:])


def test_implementation_modules_are_private() -> None:
    public = {
        m
        for m in MODULES
        if not _is_private(m) and not m.startswith(("taketurns.envs.", "taketurns.harnesses."))
    }
    assert public == PUBLIC_SUBMODULES
    # the layout the architecture is read from
    subpackages = {m for m in MODULES if m.count(".") == 1 and m.split(".")[1].startswith("_")}
    assert {
        "taketurns._exchange",
        "taketurns._models",
        "taketurns._http",
        "taketurns._eval",
        "taketurns._output",
        "taketurns._backends",
        "taketurns._report",
        "taketurns._cli",
        "taketurns._config",
    } <= subpackages


@pytest.mark.parametrize("module_name", MODULES)
def test_each_module_all_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [])
    for name in names:
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name!r}"
