"""Escaping and lenient readers for the HTML report: episode records are untrusted
JSON, so every value is escaped and every field read defensively."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
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
    "details",
    "esc",
    "num",
    "shown",
    "table",
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


TAGS = 7  # tag colours in the page's CSS (.tag.t0 ... .tag.t6), reused in turn


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    tag_column: int | None = None,
    tags: Sequence[str] = (),
    mono: Sequence[int] = (),
) -> str:
    """An HTML table, every cell escaped text (clipped at ``MAX_TEXT``): ``columns``
    head it; ``tag_column``'s values are drawn as coloured tags, one colour per
    distinct value in order of appearance (who did what, at a glance), the values in
    ``tags`` first, in its order (to match a chart's series colours); ``mono``:
    the columns set in a monospace font (arguments, code). Wide tables scroll
    sideways instead of widening the page."""
    colours = {value: i % TAGS for i, value in enumerate(dict.fromkeys(tags))}
    head = "".join(f'<th scope="col">{esc(c)}</th>' for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            text = value if isinstance(value, str) else shown(value)
            if i == tag_column:
                colour = colours.setdefault(text, len(colours) % TAGS)
                cells.append(f'<td><span class="tag t{colour}">{clip(text)}</span></td>')
            else:
                cls = ' class="mono"' if i in mono else ""
                cells.append(f"<td{cls}>{clip(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        '<div class="table-wrap"><table class="env-table">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def details(summary: str, html: str, *, open: bool = False) -> str:
    """A disclosure box: ``summary`` (plain text, escaped) always shown, ``html``
    (markup, e.g. a ``table``) when opened (``open``: opened at first)."""
    flag = " open" if open else ""
    return f'<details class="env-box"{flag}><summary>{esc(summary)}</summary>{html}</details>'
