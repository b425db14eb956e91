"""``taketurns envs``: what is registered, with every option and its default.

Options are listed as the dotted paths the command line takes (``env.player0.model``),
so the listing doubles as a reference for ``--env.<field>=VALUE``. A field whose
attrs metadata has ``choices`` (text, or a function returning it: called only here, so
a heavy optional import stays out of every other command) gets a row listing them.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import attrs
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from taketurns._config.options import AgentConfig
from taketurns._config.registry import Registry, envs, harnesses, tasksets
from taketurns._errors import ConfigError

__all__ = ["choices_of", "options_of", "print_catalog"]


def _type_name(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", repr(tp))
    return str(text).replace("typing.", "")


def options_of(
    cls: type, prefix: str, *, expand_roles: bool = False
) -> Iterator[tuple[str, str, str]]:
    """(dotted path, type, default) for every leaf option of an attrs config class;
    roles (``AgentConfig`` fields) as one row unless ``expand_roles``."""
    instance = cls()
    for field in attrs.fields(cls):
        value = getattr(instance, field.name)
        path = f"{prefix}.{field.name}"
        if isinstance(value, AgentConfig) and not expand_roles:
            harness = value.harness or "env's choice"
            yield path, "role (AgentConfig)", f"model={value.model}, harness={harness}"
        elif attrs.has(type(value)):
            yield from options_of(type(value), path)
        else:
            yield path, _type_name(field.type), repr(value)


def choices_of(cls: type, prefix: str) -> dict[str, str]:
    """Dotted path -> the accepted values of each field of ``cls`` that lists them."""
    found = {}
    for field in attrs.fields(cls):
        choices = field.metadata.get("choices")
        if choices is not None:
            found[f"{prefix}.{field.name}"] = str(choices() if callable(choices) else choices)
    return found


def _summary(cls: Any) -> str:
    """The first line of the class's own docstring, else of its module's."""
    doc = cls.__dict__.get("__doc__") or inspect.getmodule(cls).__doc__ or ""
    return inspect.cleandoc(doc).split("\n")[0]


def _load(registry: Registry, id: str) -> Any:
    try:
        return registry.get(id)
    except ConfigError as exc:
        return exc


def _table(title: str) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in ("id", "option", "type", "default"):
        table.add_column(column)
    return table


def _entries(table: Table, registry: Registry) -> Iterator[Any]:
    """Each loadable class of ``registry`` after its title row; an entry that fails to
    load gets one row saying why."""
    for id in registry.ids():
        cls = _load(registry, id)
        if isinstance(cls, Exception):
            table.add_row(id, escape(f"(unavailable: {cls})"), "", "")
        else:
            table.add_row(f"[bold]{id}[/]", escape(_summary(cls)), "", "")
            yield cls


def print_catalog(console: Console) -> None:
    for title, registry, prefix in (("envs", envs, "env"), ("tasksets", tasksets, "env.taskset")):
        table = _table(title)
        for cls in _entries(table, registry):
            choices = choices_of(cls.config_class, prefix)
            for path, kind, default in options_of(cls.config_class, prefix):
                table.add_row("", path, kind, default)
                if path in choices:
                    table.add_row("", escape(f"  one of: {choices[path]}"), "", "")
        console.print(table)
    table = _table("harnesses")
    for cls in _entries(table, harnesses):
        for name, param in inspect.signature(cls).parameters.items():
            default = "" if param.default is param.empty else repr(param.default)
            table.add_row("", f"harness_options.{name}", _type_name(param.annotation), default)
    console.print(table)
    table = _table("every role (env.<role>.*)")
    for path, kind, default in options_of(AgentConfig, "env.<role>", expand_roles=True):
        table.add_row("", path, kind, default)
    console.print(table)
