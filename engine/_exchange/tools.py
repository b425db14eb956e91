"""Python functions as model tools: a JSON schema from the signature and docstring,
and a call from the model's JSON arguments.

A tool is any function (sync or async) with annotated parameters. Its docstring's
first paragraph describes it; an ``Args:`` section (``name: description`` lines)
describes parameters. Sync tools run inline on the event loop, so keep them quick
(a dictionary lookup, not a network call); anything that blocks should be async.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from taketurns._errors import ToolArgumentError
from taketurns._models.messages import ToolCall, ToolMessage

__all__ = ["Tool", "as_tools", "tool_schema"]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
}


def _type_schema(annotation: Any) -> tuple[dict[str, Any], bool]:
    """(schema, optional) for a parameter annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return _type_schema(args[0])[0], optional
        return {"anyOf": [_type_schema(a)[0] for a in args]}, optional
    if origin is Literal:
        values = list(typing.get_args(annotation))
        return {"type": _JSON_TYPES.get(type(values[0]), "string"), "enum": values}, False
    if origin in (list, tuple, Sequence, typing.Sequence):
        items = typing.get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if items and items[0] is not Ellipsis:
            schema["items"] = _type_schema(items[0])[0]
        return schema, False
    if origin in (dict, Mapping):
        return {"type": "object"}, False
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}, False
    return {}, False


_ARGS = re.compile(r"(?:Args|Arguments|Parameters):\s*")
_SECTION = re.compile(r"[A-Z][A-Za-z ]*:\s*")
_PARAM = re.compile(r"(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)")


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(summary, parameter descriptions) from a Google-style docstring: the summary is
    the first paragraph (up to a blank line or a section header such as ``Args:``);
    a parameter's description may run on over more-indented lines."""
    lines = (inspect.getdoc(fn) or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.fullmatch(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    in_args, indent, name = False, 0, ""
    for line in lines:
        if not line.strip():
            continue
        if not line[0].isspace():  # a section header, or text at the margin
            in_args, name = bool(_ARGS.fullmatch(line)), ""
            continue
        depth = len(line) - len(line.lstrip())
        found = _PARAM.fullmatch(line.strip())
        if in_args and found and (not name or depth <= indent):
            indent, name = depth, found.group(1)
            params[name] = found.group(2).strip()
        elif in_args and name:
            params[name] = f"{params[name]} {line.strip()}".strip()
    return " ".join(summary), params


def tool_schema(fn: Callable[..., Any], *, name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool object (``{"type": "function", "function": {...}}``) for ``fn``."""
    hints = typing.get_type_hints(fn)
    summary, described = _doc_parts(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema, optional = _type_schema(hints.get(param.name, Any))
        if param.name in described:
            schema = {**schema, "description": described[param.name]}
        properties[param.name] = schema
        if param.default is param.empty and not optional:
            required.append(param.name)
    return {
        "type": "function",
        "function": {
            "name": name or fn.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


class Tool:
    """A function offered to the model. ``call`` never raises for the model's
    mistakes or the tool's own failures: they come back as the tool message's text
    (``Error: ...``) so the model can recover. ``Cancelled`` propagates."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        self.fn = fn
        self.schema = tool_schema(fn, name=name)
        self.name: str = self.schema["function"]["name"]
        self._params = inspect.signature(fn).parameters
        self._required = self.schema["function"]["parameters"]["required"]

    def _arguments(self, raw: str) -> dict[str, Any]:
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"the arguments are not valid JSON ({exc})") from None
        if not isinstance(args, dict):
            raise ToolArgumentError("the arguments must be a JSON object")
        missing = [p for p in self._required if p not in args]
        if missing:
            raise ToolArgumentError(f"missing required arguments: {', '.join(missing)}")
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in self._params.values())
        unknown = [a for a in args if a not in self._params]
        if unknown and not accepts_any:
            raise ToolArgumentError(f"unknown arguments: {', '.join(unknown)}")
        return args

    async def call(self, call: ToolCall) -> ToolMessage:
        """Run the tool for one of the model's calls; the answer as a tool message."""
        try:
            result = self.fn(**self._arguments(call.arguments))
            if inspect.isawaitable(result):
                result = await result
            text = result if isinstance(result, str) else json.dumps(result, default=str)
        except Exception as exc:
            text = f"Error: {type(exc).__name__}: {exc}"
        return ToolMessage(call.id, text, self.name)


def as_tools(fns: Sequence[Callable[..., Any] | Tool]) -> dict[str, Tool]:
    """Tools by name; refuses two tools with one name."""
    tools: dict[str, Tool] = {}
    for fn in fns:
        tool = fn if isinstance(fn, Tool) else Tool(fn)
        if tool.name in tools:
            raise ValueError(f"two tools are named {tool.name!r}")
        tools[tool.name] = tool
    return tools
