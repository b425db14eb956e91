"""Inline SVG charts for the HTML report (bar charts and histograms), drawn here:
no plotting library, nothing fetched."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import attrs

from taketurns._report.markup import esc, num

__all__ = ["PALETTE", "Series", "bar_chart", "histogram", "legend", "svg", "tick_values"]

PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f7f7f")


@attrs.frozen
class Series:
    name: str
    values: tuple[float, ...]  # one per category; NaN draws nothing
    tips: tuple[str, ...] = ()


def tick_values(lo: float, hi: float, *, integer: bool) -> list[float]:
    """Round axis ticks covering [lo, hi] (the 1-2-2.5-5 rule)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    start, stop = math.floor(lo / step), math.ceil(hi / step)
    return [round(i * step, 10) for i in range(start, stop + 1)]


W, H = 560, 280
LEFT, RIGHT, TOP, BOTTOM = 52, 14, 30, 50


def svg_text(
    x: float, y: float, text: str, cls: str, anchor: str = "middle", rot: bool = False
) -> str:
    where = (
        f'transform="translate({x:.1f},{y:.1f}) rotate(-90)"' if rot else f'x="{x:.1f}" y="{y:.1f}"'
    )
    return f'<text class="{cls}" {where} text-anchor="{anchor}">{esc(text)}</text>'


def bar_chart(
    plot_id: str,
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    integer: bool = False,
    values_on_bars: bool = False,
    empty: str = "no data",
) -> str:
    """Grouped bars: one band per category, one bar per series, a zero baseline (values
    may be negative), round y ticks, and a native tooltip (<title>) on every bar.
    ``empty``: the text shown when there is nothing to draw (say why, if known)."""
    finite = [v for s in series for v in s.values if math.isfinite(v)]
    if not categories or not finite:
        return svg(plot_id, [svg_text(W / 2, H / 2, empty, "empty")])
    pad = 1.12 if values_on_bars else 1.0  # headroom for the value labels
    ticks = tick_values(min(0.0, *finite) * pad, max(0.0, *finite) * pad, integer=integer)
    lo, hi = ticks[0], ticks[-1]
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (hi - v) / (hi - lo)

    parts = []
    for t in ticks:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}"/>'
        )
        parts.append(svg_text(LEFT - 6, y(t) + 4, num(t), "tick", "end"))
    band = plot_w / len(categories)
    bar_w = min(band * 0.8 / len(series), 64.0)
    group_w = bar_w * len(series)
    every = math.ceil(len(categories) / max(1, plot_w // 38))
    for ci, cat in enumerate(categories):
        x0 = LEFT + ci * band + (band - group_w) / 2
        if ci % every == 0:
            parts.append(svg_text(x0 + group_w / 2, H - BOTTOM + 16, cat, "tick"))
        for si, s in enumerate(series):
            v = s.values[ci]
            if not math.isfinite(v) or v == 0:
                continue
            top, bottom = y(max(v, 0.0)), y(min(v, 0.0))
            x = x0 + si * bar_w
            tip = s.tips[ci] if s.tips else f"{s.name} · {cat}: {num(v)}"
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                f"<title>{esc(tip)}</title></rect>"
            )
            if values_on_bars:
                parts.append(
                    svg_text(x + bar_w / 2, top - 4 if v > 0 else bottom + 12, num(v), "val")
                )
    parts.append(
        f'<path class="axis" d="M{LEFT},{TOP} V{TOP + plot_h} M{LEFT},{y(0.0):.1f} H{W - RIGHT}"/>'
    )
    parts.append(svg_text(LEFT + plot_w / 2, H - 10, x_label, "label"))
    parts.append(svg_text(14, TOP + plot_h / 2, y_label, "label", rot=True))
    parts.extend(legend(series))
    return svg(plot_id, parts)


def legend(series: Sequence[Series]) -> list[str]:
    parts, x = [], float(LEFT)
    for si, s in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        parts.append(
            f'<rect class="swatch" x="{x:.1f}" y="8" width="12" height="12" fill="{colour}"/>'
        )
        parts.append(f'<text class="legend" x="{x + 16:.1f}" y="18">{esc(s.name)}</text>')
        x += 28 + 7 * len(s.name)
    return parts


def svg(plot_id: str, parts: Iterable[str]) -> str:
    return (
        f'<svg id="{esc(plot_id)}" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'role="img" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def histogram(
    by_series: Mapping[str, Sequence[float] | Mapping[float, int]], *, integer: bool
) -> tuple[list[str], list[Series]]:
    """Counts per bin for each series over shared bins: one bin per value when there
    are few distinct values (game payoffs, pass/fail, turn counts), else 12 even bins.
    A series is its values, or a mapping value -> how many times it occurred (what a
    streaming reader keeps: memory by distinct value, not by value)."""
    counted = {
        name: values if isinstance(values, Mapping) else Counter(values)
        for name, values in by_series.items()
    }
    distinct = sorted({v for counts in counted.values() for v in counts})
    if not distinct:
        return [], []
    lo, hi = distinct[0], distinct[-1]
    if integer and hi - lo <= 30:
        edges = [float(v) for v in range(int(lo), int(hi) + 1)]
        labels = [num(v) for v in edges]
    elif not integer and len(distinct) <= 12:
        edges, labels = distinct, [num(v) for v in distinct]
    else:
        width = (hi - lo) / 12 if not integer else float(math.ceil((hi - lo + 1) / 12))
        edges = [lo + i * width for i in range(12)]
        labels = [num(edge) for edge in edges]
    series = []
    for name, counts in counted.items():
        bins: Counter[int] = Counter()
        for v, n in counts.items():
            bins[max(i for i, edge in enumerate(edges) if v >= edge)] += n
        series.append(Series(name, tuple(float(bins[i]) for i in range(len(edges)))))
    return labels, series
