"""``taketurns envs``: what is registered, with every option and its default.

Options are listed as the dotted paths the command line takes (``env.player0.model``),
so the listing doubles as a reference for ``--env.<field>=VALUE``. A field whose
attrs metadata has ``choices`` (text, or a function returning it: called only here, so
a heavy optional import stays out of every other command) gets a row listing them.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import attrs
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from taketurns._config.options import AgentConfig
from taketurns._config.registry import Registry, envs, harnesses, tasksets
from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError

__all__ = ["choices_of", "options_of", "print_catalog", "print_entry"]


def _type_name(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", repr(tp))
    return str(text).replace("typing.", "")


_LONG = 60  # a default longer than this is shown cut, with its length


def options_of(
    cls: type, prefix: str, *, expand_roles: bool = False, owner: Any = None
) -> Iterator[tuple[str, str, str]]:
    """(dotted path, type, default) for every leaf option of an attrs config class (an
    unset field whose metadata has ``unset`` shows what None stands for);
    roles (``AgentConfig`` fields) as one row unless ``expand_roles``, their default
    the model and harness they run with (``owner``: the env class, whose
    ``default_harness`` decides) and what the env sets differently."""
    instance = cls()
    for field in attrs.fields(cls):
        value = getattr(instance, field.name)
        path = f"{prefix}.{field.name}"
        if isinstance(value, AgentConfig) and not expand_roles:
            yield path, "role", _role_default(owner, field.name, value)
        elif attrs.has(type(value)):
            yield from options_of(type(value), path)
        elif value is None and "unset" in field.metadata:  # what None stands for
            yield path, _type_name(field.type), field.metadata["unset"]
        else:
            yield path, _type_name(field.type), _shown(value)


def _shown(value: Any) -> str:
    text = repr(value)
    if len(text) <= _LONG:
        return text
    return f"{text[: _LONG - 12]}... ({len(str(value))} chars)"


def _role_default(owner: Any, role: str, config: AgentConfig) -> str:
    """``model: the eval's (--model), harness: null`` plus the role's own settings
    (``the eval's (--model), else builtin/tools`` for an env with a default model)."""
    model = config.model or "the eval's (--model)"
    if config.model is None and (fallback := _env_model(owner, role)):
        model += f", else {fallback}"
    harness = config.harness or _env_harness(owner, role)
    base = {path: default for path, _, default in _leaves(AgentConfig(), "")}
    own = [
        f"{path}={default}"
        for path, _, default in _leaves(config, "")
        if base.get(path) != default and path not in ("model", "harness")
    ]
    return ", ".join([f"model: {model}", f"harness: {harness}", *own])


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, str, str]]:
    """(dotted path, "", shown value) of every leaf of an attrs instance."""
    for field in attrs.fields(type(value)):
        item = getattr(value, field.name)
        path = f"{prefix}.{field.name}" if prefix else field.name
        if attrs.has(type(item)):
            yield from _leaves(item, path)
        else:
            yield path, "", _shown(item)


def _env_model(owner: Any, role: str) -> str | None:
    """What ``owner``'s ``default_model`` picks for ``role`` (None: the engine's)."""
    if owner is None:
        return None
    try:  # on a bare instance, as _env_harness
        found = owner.default_model(owner.__new__(owner), role)
    except Exception:
        return None
    return str(found) if found else None


def _env_harness(owner: Any, role: str) -> str:
    """What ``owner``'s ``default_harness`` picks for ``role``; an env that needs its
    taskset to say cannot be asked without one."""
    if owner is None:
        return "null"
    try:  # on a bare instance: only an env that needs its taskset's answer fails
        return str(owner.default_harness(owner.__new__(owner), role))
    except Exception:
        return "the taskset's"


def choices_of(cls: type, prefix: str) -> dict[str, str]:
    """Dotted path -> the accepted values of each field of ``cls`` that lists them."""
    found = {}
    for field in attrs.fields(cls):
        choices = field.metadata.get("choices")
        if choices is not None:
            found[f"{prefix}.{field.name}"] = str(choices() if callable(choices) else choices)
    return found


def _summary(cls: Any) -> str:
    """The first paragraph of the class's own docstring, else of its module's, on one
    line, without markup (``code`` quotes, a leading ``id``: title)."""
    doc = cls.__dict__.get("__doc__") or inspect.getmodule(cls).__doc__ or ""
    paragraph = inspect.cleandoc(doc).split("\n\n")[0]
    # a title naming the id ("``my-env``: two seats...", "The ``null`` harness: ...")
    paragraph = re.sub(r"^(The )?``[^`]+``( and ``[^`]+``)?( harness)?:\s+", "", paragraph)
    paragraph = re.sub(r":\w+:`([^`]*)`", r"\1", paragraph)  # :class:`X`
    text = " ".join(paragraph.replace("``", "").replace("`", "").split())
    return text[:1].upper() + text[1:]


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


def _env_rows(table: Table, cls: Any, prefix: str) -> None:
    choices = choices_of(cls.config_class, prefix)
    for path, kind, default in options_of(cls.config_class, prefix, owner=cls):
        table.add_row("", path, kind, default)
        if path in choices:
            table.add_row("", escape(f"  one of: {choices[path]}"), "", "")


def _harness_rows(table: Table, cls: Any) -> None:
    for name, param in inspect.signature(cls).parameters.items():
        default = "" if param.default is param.empty else repr(param.default)
        table.add_row("", f"harness_options.{name}", _type_name(param.annotation), default)


def print_catalog(console: Console) -> None:
    for title, registry, prefix in (("envs", envs, "env"), ("tasksets", tasksets, "env.taskset")):
        table = _table(title)
        for cls in _entries(table, registry):
            _env_rows(table, cls, prefix)
        console.print(table)
    table = _table("harnesses")
    for cls in _entries(table, harnesses):
        _harness_rows(table, cls)
    console.print(table)
    _print_roles(console)


def _print_roles(console: Console) -> None:
    table = _table("every role (env.<role>.*)")
    for path, kind, default in options_of(AgentConfig, "env.<role>", expand_roles=True):
        section, _, name = path.removeprefix("env.<role>.").rpartition(".")
        if default == "None":
            default = _ROLE_NONE.get(name) or _ROLE_NONE.get(section, default)
        table.add_row("", path, kind, default)
    console.print(table)


_KINDS = (("env", envs, "env"), ("taskset", tasksets, "env.taskset"), ("harness", harnesses, ""))


def print_entry(console: Console, id: str) -> None:
    """``taketurns envs ID``: one env, taskset or harness (registered id or class
    reference): its whole docstring, then its options (dotted path, type, default,
    accepted values); an env's roles are followed by the options every role takes.
    Raises ``ConfigError`` for an unknown id, with its near misses."""
    found = [entry for entry in _KINDS if id in entry[1].ids()]
    if not found:
        known = [i for _, registry, _ in _KINDS for i in registry.ids()]
        hint = did_you_mean(id, known)
        raise ConfigError(
            f"envs {id}: no env, taskset or harness has this id; {hint + ' ' if hint else ''}"
            "taketurns envs lists them all"
        )
    kind, registry, prefix = found[0]
    cls = registry.get(id)
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or inspect.getmodule(cls).__doc__ or "")
    console.print(f"[bold]{escape(id)}[/] ({kind})", highlight=False)
    if doc:  # without reST markup, as in the listing
        console.print(escape(doc.replace("``", "")), highlight=False)
    table = _table(f"options of {id}")
    if kind == "harness":
        _harness_rows(table, cls)
    else:
        _env_rows(table, cls, prefix)
    console.print(table)
    if kind == "env" and any(
        d == "role" for _, d, _ in options_of(cls.config_class, prefix, owner=cls)
    ):
        _print_roles(console)


# what an unset (None) role option means
_ROLE_NONE = {
    "model": "the eval's (--model)",
    "base_url": "the eval's (--base-url)",
    "api_key_var": "the eval's (--api-key-var)",
    "harness": "the env's choice (null unless the env says)",
    "sampling": "the eval's --sampling.*, else the endpoint's",
    "limits": "no limit",
    "timeouts": "no timeout",
    "max_concurrent_calls": "no cap beyond --max-concurrent-calls",
}
