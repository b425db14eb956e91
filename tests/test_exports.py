"""The public surface: ``engine.__all__`` is sorted, complete and resolvable, and every
engine module's own ``__all__`` resolves (STYLE.md item 2)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import engine


def test_all_is_sorted_without_duplicates() -> None:
    assert engine.__all__ == sorted(engine.__all__)
    assert len(set(engine.__all__)) == len(engine.__all__)


@pytest.mark.parametrize("name", engine.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(engine, name)  # lazily imported names resolve too
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("engine."), f"{name} comes from {value.__module__}"


def test_everything_public_at_the_top_is_exported() -> None:
    public = {
        name
        for name, value in vars(engine).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public <= set(engine.__all__), sorted(public - set(engine.__all__))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = engine.no_such_name


MODULES = sorted(m.name for m in pkgutil.iter_modules(engine.__path__, "engine.") if not m.ispkg)


@pytest.mark.parametrize("module_name", MODULES)
def test_each_module_all_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [])
    for name in names:
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name!r}"
