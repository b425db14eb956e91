"""Loading configs: TOML file + dotted command-line overrides -> validated attrs records.

Precedence: command line > file > defaults. Every problem is reported at once, one
line each, naming the dotted path, the value given and what is accepted; nothing
runs until the whole config is valid. ``settings`` is the private (strict) cattrs
converter for this format: an int field takes only integers, a float field only
numbers, a bool field only booleans; unknown keys are refused.
"""

from __future__ import annotations

import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
import tomli_w
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from taketurns._config.options import EvalConfig, Raw, literal
from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError, OptionError

__all__ = ["Raw", "apply_override", "dump_toml", "load_eval_config", "read_toml", "structure"]


_NONE = {"none", "null"}


def _strict(kind: type, accept: tuple[type, ...], parse: Any) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, Raw):
            try:
                return parse(value)
            except ValueError:
                raise OptionError("", str(value), _WHAT[kind]) from None
        if isinstance(value, bool) and kind is not bool:
            raise OptionError("", value, _WHAT[kind])
        if not isinstance(value, accept):
            raise OptionError("", value, _WHAT[kind])
        return kind(value)

    return hook


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(raw)


_WHAT = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}

settings = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
settings.register_structure_hook(int, _strict(int, (int,), int))
settings.register_structure_hook(float, _strict(float, (int, float), float))
settings.register_structure_hook(bool, _strict(bool, (bool,), _parse_bool))
settings.register_structure_hook(str, _strict(str, (str,), str))
# Untyped (Any) values pass as they are, command-line ``Raw`` text included: whoever
# structures them later (a taskset's config, say) gives them their type.


def _is_sequence(tp: Any) -> bool:
    return typing.get_origin(tp) in (list, tuple, set, frozenset)


def _sequence_hook(tp: Any) -> Any:
    """Lists: a TOML array, or on the command line ``--opt=a,b,c``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    element = args[0] if args else Any

    def hook(value: Any, _: Any) -> Any:
        if isinstance(value, Raw):
            value = [Raw(item.strip()) for item in value.split(",") if item.strip()]
        if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
            raise OptionError("", value, 'a list (a,b on the command line, ["a", "b"] in TOML)')
        return origin(settings.structure(item, element) for item in value)

    return hook


settings.register_structure_hook_factory(_is_sequence, _sequence_hook)


def _options_table(value: Any, _: Any) -> dict[str, Any]:
    """An untyped table of options (``harness_options``, ``sampling.extra``): a single
    value where it belongs is refused by name (``harness_options = 7``)."""
    if not isinstance(value, Mapping):
        raise OptionError("", value, "a table of options, not a single value")
    return dict(value)


settings.register_structure_hook_func(lambda tp: tp == dict[str, Any], _options_table)


def _table_hook(cls: type) -> Any:
    """Config sections: a value where a table of options belongs is refused by name
    (``--env.player0=3``, ``sampling = "hot"``) instead of failing inside cattrs."""
    inner: Any = settings.gen_structure_attrs_fromdict(cls)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise OptionError("", value, "a table of options, not a single value")
        return inner(value, cls)

    return hook


settings.register_structure_hook_factory(attrs.has, _table_hook)


def _render(exc: BaseException, path: str) -> list[str]:
    if isinstance(exc, ClassValidationError | IterableValidationError):
        with_notes, without = exc.group_exceptions()
        lines = []
        for inner, note in with_notes:
            name = getattr(note, "name", getattr(note, "index", "?"))
            where = f"{path}.{name}" if isinstance(name, str) else f"{path}[{name}]"
            lines += _render(inner, where)
        for inner in without:
            lines += _render(inner, path)
        return lines
    if isinstance(exc, ForbiddenExtraKeysError):
        known = sorted(f.name for f in attrs.fields(exc.cl)) if attrs.has(exc.cl) else []
        nested = _nested_options(exc.cl)
        return [
            _unknown_option(f"{path}.{key}", key, known, nested) for key in sorted(exc.extra_fields)
        ]
    if isinstance(exc, OptionError):
        where = f"{path}.{exc.field}" if exc.field and not path.endswith(exc.field) else path
        return [f"{where} = {exc.value!r}: expected {exc.accepted}"]
    if isinstance(exc, KeyError):
        name = str(exc.args[0])
        where = path if path.endswith(f".{name}") else f"{path}.{name}"
        return [f"{where}: required option is missing"]
    return [f"{path}: {exc}"]


def _nested_options(cls: Any) -> list[str]:
    """``section.option`` for each option of ``cls``'s attrs sections (``limits.max_turns``
    in a role): where an option given one level too high lives."""
    if not attrs.has(cls):
        return []
    try:
        attrs.resolve_types(cls)  # string annotations (``from __future__ import annotations``)
    except NameError:
        return []
    found = []
    for field in attrs.fields(cls):
        if isinstance(field.type, type) and attrs.has(field.type):
            found += [f"{field.name}.{inner.name}" for inner in attrs.fields(field.type)]
    return found


def _unknown_option(where: str, key: str, known: list[str], nested: list[str]) -> str:
    """``env.plyer0: unknown option; did you mean 'player0'? known options here: ...``;
    an option of a section one level down is named with its section."""
    deeper = [path for path in nested if path.rpartition(".")[2] == key.replace("-", "_")]
    hint = f"did you mean '{deeper[0]}'?" if deeper else did_you_mean(key, known)
    return f"{where}: unknown option; {hint + ' ' if hint else ''}known options here: " + (
        ", ".join(known)
    )


def structure(data: Mapping[str, Any], cls: type, *, path: str) -> Any:
    """Build ``cls`` from ``data`` or raise ``ConfigError`` listing every problem."""
    try:
        return settings.structure(dict(data), cls)
    except (ClassValidationError, IterableValidationError, OptionError, ValueError) as exc:
        raise ConfigError(_render(exc, path)) from None


def _key(segment: str) -> str:
    return segment.strip().replace("-", "_")


def apply_override(tree: dict[str, Any], dotted: str, raw: str) -> None:
    """Set ``tree[a][b][c] = Raw(raw)`` for ``dotted == "a.b.c"`` (dashes or
    underscores); ``none``/``null`` set the option to None (its default).

    A section may be named by id: ``--env.taskset=jsonl --env.taskset.path=f.jsonl``
    gives ``{"taskset": {"id": "jsonl", "path": "f.jsonl"}}`` in either order."""
    parts = [_key(p) for p in dotted.split(".")]
    if not all(parts):
        raise ConfigError(f"--{dotted}: an option path cannot have empty parts")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if isinstance(child, str):
            child = node[part] = {"id": child}
        if not isinstance(child, dict):
            raise ConfigError(f"--{dotted}: {part!r} is a value, not a section")
        node = child
    value: Any = Raw(raw)
    if raw.strip().lower() in _NONE:
        value = None
    elif raw.strip()[:1] in ("[", "{"):
        value = literal(raw)
    if isinstance(node.get(parts[-1]), dict) and isinstance(value, str):
        node[parts[-1]]["id"] = value
        return
    node[parts[-1]] = value


def read_toml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"-C {path}: no such file") from None
    except OSError as exc:  # a directory, no permission, ...
        raise ConfigError(f"-C {path}: cannot read the file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"-C {path}: not valid TOML ({exc})") from None


def _drop_none(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _drop_none(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [_drop_none(v) for v in data]
    return data


def dump_toml(config: EvalConfig) -> str:
    """The fully resolved config as TOML (None values are the defaults: omitted)."""
    return tomli_w.dumps(_drop_none(settings.unstructure(config)))


def load_eval_config(
    env_config_class: type,
    *,
    file_data: Mapping[str, Any] | None = None,
    overrides: Iterable[tuple[str, str]] = (),
) -> EvalConfig:
    """Merge ``file_data`` and ``overrides`` (dotted path, raw text) and validate the
    whole eval config, its ``env`` section with ``env_config_class``."""
    tree: dict[str, Any] = _deep_copy(file_data or {})
    problems: list[str] = []
    for dotted, raw in overrides:
        try:
            apply_override(tree, dotted, raw)
        except ConfigError as exc:
            problems += exc.problems
    env_data = tree.pop("env", None) or {}
    if not isinstance(env_data, dict):
        problems.append(f"env: expected a section of env options, got {env_data!r}")
        env_data = {}
    config = env = None
    try:
        config = structure(tree, EvalConfig, path="$")
    except ConfigError as exc:
        problems += exc.problems
    try:
        env = structure(env_data, env_config_class, path="env")
    except ConfigError as exc:
        problems += exc.problems
    if problems or config is None:
        raise ConfigError([p.replace("$.", "", 1) for p in problems])
    config.env = env
    return config


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}
