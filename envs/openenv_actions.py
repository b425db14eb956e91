"""Reading a model's reply as an OpenEnv action, against the env's action schema (the
JSON schema ``GET /schema`` returns). Pure: no I/O.

A reply is read, in order, as: a fenced JSON block (```json ... ```), the whole reply
as JSON, the first JSON object inside the text, and, when the schema has exactly one
field (besides OpenEnv's own ``metadata``), the bare value of that field (optionally
in square brackets, backticks or quotes: ``[5]``, ``5``, ``"north"``). The action is
checked against the schema's properties (known fields, required fields, simple types
and enums) before it is stepped; the server validates it again. ``InvalidReply`` says
what was wrong, in words the model can act on.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["ActionSchema", "InvalidReply", "parse_action"]

_FENCED = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_WRAPPED = (("[", "]"), ("`", "`"), ('"', '"'), ("'", "'"))
_OWN = ("metadata",)  # OpenEnv's Action base field: not the model's to fill
_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


class InvalidReply(ValueError):
    """A reply that cannot be stepped; the message says why."""


@attrs.frozen
class ActionSchema:
    """The action's JSON schema, with its fields (OpenEnv's ``metadata`` left out)."""

    schema: Mapping[str, Any]

    @property
    def fields(self) -> dict[str, Mapping[str, Any]]:
        props = self.schema.get("properties") or {}
        return {k: v for k, v in props.items() if k not in _OWN}

    @property
    def required(self) -> list[str]:
        return [k for k in self.schema.get("required") or () if k not in _OWN]

    @property
    def single_field(self) -> str | None:
        """The one field's name when the action has exactly one."""
        fields = list(self.fields)
        return fields[0] if len(fields) == 1 else None

    def describe(self) -> str:
        """The schema as the model is shown it (compact JSON, ``metadata`` left out)."""
        shown = dict(self.schema)
        shown["properties"] = self.fields
        shown["required"] = self.required
        shown.pop("additionalProperties", None)
        return json.dumps(shown, separators=(",", ":"))


def _json_values(text: str) -> list[Any]:
    """The JSON values the reply may mean, most explicit first."""
    values = []
    for block in _FENCED.findall(text):
        try:
            values.append(json.loads(block))
        except json.JSONDecodeError:
            continue
    with contextlib.suppress(json.JSONDecodeError):
        values.append(json.loads(text))
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            values.append(value)
            break
    return values


def _unwrap(text: str) -> str:
    for left, right in _WRAPPED:
        if len(text) >= 2 and text.startswith(left) and text.endswith(right):
            return text[1:-1].strip()
    return text


def _bare(text: str, spec: Mapping[str, Any]) -> Any:
    """The bare reply as a value of the field's type (text for a string field)."""
    raw = _unwrap(text)
    kinds = _kinds(spec)
    if "string" in kinds or not kinds:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise InvalidReply(f"{raw!r} is not a {' or '.join(kinds)}") from None


def _kinds(spec: Mapping[str, Any]) -> list[str]:
    if "type" in spec:
        kind = spec["type"]
        return list(kind) if isinstance(kind, list) else [kind]
    return [k for option in spec.get("anyOf") or () for k in _kinds(option)]


def _check_value(name: str, value: Any, spec: Mapping[str, Any]) -> None:
    kinds = _kinds(spec)
    fits = any(
        isinstance(value, _TYPES.get(kind, object))
        and not (isinstance(value, bool) and kind in ("integer", "number"))
        for kind in kinds
    )
    if kinds and not fits:
        raise InvalidReply(f"{name} must be a {' or '.join(kinds)}, not {json.dumps(value)}")
    if "enum" in spec and value not in spec["enum"]:
        choices = ", ".join(json.dumps(v) for v in spec["enum"])
        raise InvalidReply(f"{name} must be one of {choices}, not {json.dumps(value)}")


def check_action(action: Any, schema: ActionSchema) -> dict[str, Any]:
    """``action`` if it fits ``schema``; ``InvalidReply`` saying why not."""
    if not isinstance(action, dict):
        raise InvalidReply(f"an action is a JSON object, not {json.dumps(action)}")
    fields = schema.fields
    unknown = sorted(set(action) - set(fields) - set(_OWN))
    if unknown:
        raise InvalidReply(
            f"unknown field(s) {', '.join(unknown)}; the action's fields: {', '.join(fields)}"
        )
    missing = [name for name in schema.required if name not in action]
    if missing:
        raise InvalidReply(f"missing required field(s) {', '.join(missing)}")
    for name, value in action.items():
        if name in fields:
            _check_value(name, value, fields[name])
    return action


def parse_action(text: str, schema: ActionSchema) -> dict[str, Any]:
    """The action in the reply ``text``; ``InvalidReply`` when there is none."""
    text = text.strip()
    if not text:
        raise InvalidReply("the reply is empty")
    single = schema.single_field
    problem: InvalidReply | None = None
    for value in _json_values(text):
        if single is not None and not isinstance(value, dict):
            value = {single: value}
        try:
            return check_action(value, schema)
        except InvalidReply as exc:
            problem = problem or exc
    if single is not None:
        try:
            return check_action({single: _bare(text, schema.fields[single])}, schema)
        except InvalidReply as exc:
            problem = problem or exc
    if problem is not None:
        raise problem
    raise InvalidReply("no JSON action object found in the reply")
