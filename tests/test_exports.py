"""The public surface: ``taketurns.__all__`` is sorted, complete and resolvable; every
module's own ``__all__`` resolves; implementation modules are private (STYLE.md
item 2), and the only public submodules are the deliberate ones."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import taketurns

PUBLIC_SUBMODULES = {
    "taketurns.testing",
    "taketurns.report",
    "taketurns.envs",
    "taketurns.harnesses",
}


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


# -- one error root (STYLE.md item 7, issue 23) ------------------------------------------------

_BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def _drawn_tree() -> dict[str, str]:
    """``taketurns._errors``'s docstring drawing read back: class name -> its parent."""
    import taketurns._errors

    doc = taketurns._errors.__doc__ or ""
    lines = doc.split("::", 1)[1].splitlines()
    root = next(line.strip() for line in lines if line.strip())
    parents: dict[str, str] = {}
    stack = [root]  # the last class drawn at each depth
    for line in lines:
        found = _BRANCH.match(line.strip("\n")[4:])  # the drawing is indented 4
        if found is None:
            continue
        depth = len(found["indent"]) // 4 + 1
        del stack[depth:]
        parents[found["name"]] = stack[depth - 1]
        stack.append(found["name"])
    return {root: "", **parents}


def _exported_errors() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name in taketurns.__all__
        if inspect.isclass(value := getattr(taketurns, name)) and issubclass(value, BaseException)
    }


def test_the_drawn_error_tree_is_the_exported_one() -> None:
    tree = _drawn_tree()
    exported = _exported_errors()
    assert set(tree) == set(exported)
    for name, parent in tree.items():
        cls = exported[name]
        assert cls.__module__ == "taketurns._errors", name  # all in one module
        ours = [b.__name__ for b in cls.__bases__ if issubclass(b, taketurns.TaketurnsError)]
        assert ours == ([parent] if parent else []), (name, ours, parent)


def test_every_exported_error_has_the_one_root() -> None:
    for name, cls in _exported_errors().items():
        assert issubclass(cls, taketurns.TaketurnsError), name
    # the foreign bases they had before the root was theirs are kept
    for name in ("OptionError", "TurnError", "BadRequest", "ToolArgumentError"):
        assert issubclass(_exported_errors()[name], ValueError), name


def test_no_core_module_defines_an_error_class_but_the_errors_module() -> None:
    for module_name in MODULES:
        if module_name == "taketurns._errors" or module_name.startswith(
            ("taketurns.envs", "taketurns.harnesses")
        ):
            continue  # the errors module; built-in plugins, written against the public API
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module_name
                and not name.startswith("_")  # a module's private detail, never raised out
            ):
                raise AssertionError(f"{module_name}.{name}: define it in taketurns._errors")
