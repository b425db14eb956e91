"""Escaping and lenient readers for the HTML report: episode records are untrusted
JSON, so every value is escaped and every field read defensively."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_TEXT",
    "Json",
    "agent_of",
    "as_dict",
    "as_float",
    "as_int",
    "as_list",
    "clip",
    "esc",
    "num",
    "shown",
    "traces_of",
]

Json = dict[str, Any]
MAX_TEXT = 20_000  # characters of one message or error shown; the rest is elided


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def as_dict(value: object) -> Json:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def as_float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def num(value: float) -> str:
    """Short, exact-looking: 2, 0.5, 0.0333, 1.23e+04."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return esc(text)
    more = len(text) - limit
    return f'{esc(text[:limit])}<span class="elided">… ({more:,} more characters)</span>'


def traces_of(episode: Mapping[str, Any]) -> list[Json]:
    return [t for t in as_list(episode.get("traces")) if isinstance(t, dict)]


def agent_of(trace: Mapping[str, Any]) -> str:
    return str(as_dict(trace.get("agent")).get("name", "?"))


def shown(value: object) -> str:
    return num(value) if isinstance(value, float) else str(value)
