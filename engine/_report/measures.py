"""The measurement a run made of its policy as a whole, in the report: the
``exploitability`` block ``taketurns exploitability`` writes into ``summary.json``
(``_eval.probe.measure``: each measure with its bootstrap interval, and the samples
per state it rests on). A run without one shows nothing here."""

from __future__ import annotations

from taketurns._report.markup import Json, as_dict, as_float, num, table

__all__ = ["measures_section"]

KEY = "exploitability"
_FACTS = (
    ("samples", "answers asked per information state (k)"),
    ("states", "information states asked"),
    ("answers", "answers that counted"),
    ("invalid", "answers that did not count (left out)"),
    ("resamples", "bootstrap resamples"),
)


def measures_section(summary: Json) -> str:
    """The section (escaped HTML), or "" when ``summary`` holds no measurement."""
    block = as_dict(summary.get(KEY))
    if not block:
        return ""
    rows = []
    for name, value in block.items():
        number = as_float(value)
        if name in dict(_FACTS) or name == "seed" or number is None:
            continue
        interval = _interval(block.get(f"{name}_ci95"))
        rows.append((name, num(number), interval))
    facts = [(text, str(block.get(key, ""))) for key, text in _FACTS if key in block]
    return (
        f'<section id="{KEY}"><h2>Policy measured: exploitability</h2><div class="tables">'
        f"{table(['measure', 'value', 'bootstrap 95% interval'], rows)}"
        f"{table(['what it rests on', ''], facts)}</div></section>"
    )


def _interval(value: object) -> str:
    if not isinstance(value, list) or len(value) != 2:
        return ""
    low, high = as_float(value[0]), as_float(value[1])
    return "" if low is None or high is None else f"[{num(low)}, {num(high)}]"
