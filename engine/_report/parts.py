"""What an env adds to its runs' report (``Env.report_figures``,
``Env.report_sections``): figures in the Plots grid and sections of their own.

Titles and notes are plain text (the page escapes them); ``svg`` and ``html`` are
markup, drawn with ``taketurns.report``'s helpers, which escape what they are given.
Markup an env writes itself must escape every value read from an episode
(``taketurns.report.esc``): episode content is untrusted. The page's
Content-Security-Policy runs no script and loads nothing but ``data:`` images, so
markup can only lay out what it carries.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

__all__ = ["Figure", "Section"]

_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _anchor(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value and not (isinstance(value, str) and _ID.match(value)):
        raise ValueError(
            f"{attribute.name}={value!r}: an HTML id is a letter then letters, digits, - or _"
        )


@attrs.frozen
class Figure:
    """One plot beside the report's own: ``title`` over it, ``svg`` (a chart from
    ``taketurns.report.bar_chart``), ``note`` under it (plain text, may be empty)."""

    title: str
    svg: str
    note: str = ""


@attrs.frozen
class Section:
    """A section of the report after the plots: ``title`` (its heading), ``html``
    (its body: ``taketurns.report.table`` or other escaped markup), ``id`` (its
    anchor; the page makes one from the title when empty)."""

    title: str
    html: str
    id: str = attrs.field(default="", validator=_anchor)
