"""The comparison page (``/compare?run=A&run=B...``): for each B, per agent, the
paired difference B - A by task with its bootstrap interval (``_output.comparison``),
drawn as a table and a small interval-around-0 bar."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from taketurns._report.markup import Json, as_dict, as_float, esc
from taketurns._view.pages import count, layout, models_cell, signed, state_badge, url
from taketurns._view.run import RunView

__all__ = ["comparison_page"]


def _diff_bar(row: Mapping[str, Any]) -> str:
    """B - A and its interval on a small axis around 0 (SVG)."""
    diff, ci = as_float(row.get("diff")), row.get("diff_ci95")
    if diff is None or not (isinstance(ci, list) and len(ci) == 2):
        return ""
    low, high = float(ci[0]), float(ci[1])
    span = max(abs(low), abs(high), abs(diff), 1e-9) * 1.1
    x = lambda v: 100 + 95 * v / span  # noqa: E731 - a one-line scale
    color = "#067647" if low > 0 else "#b42318" if high < 0 else "#667085"
    return (
        '<svg class="diffbar" viewBox="0 0 200 20" role="img" '
        f'aria-label="B - A {diff:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}]">'
        '<line x1="100" y1="2" x2="100" y2="18" stroke="#98a2b3"/>'
        f'<line x1="{x(low):.1f}" y1="10" x2="{x(high):.1f}" y2="10" stroke="{color}" '
        'stroke-width="3"/>'
        f'<circle cx="{x(diff):.1f}" cy="10" r="4" fill="{color}"/></svg>'
    )


def comparison_page(runs: Sequence[RunView], results: Sequence[Json]) -> str:
    base = runs[0]
    heads = "".join(
        f'<tr><th scope="row">{"A" if i == 0 else f"B{i}"}</th>'
        f'<td class="run"><a href="{esc(url(r))}">{esc(r.id)}</a></td>'
        f'<td class="env">{esc(r.env)}</td><td class="models">{models_cell(r.models())}</td>'
        f"<td>{state_badge(r.state)}</td>"
        f'<td class="n">{count(r.row().get("episodes"))}</td></tr>'
        for i, r in enumerate(runs)
    )
    notes = ""
    envs = {r.env for r in runs}
    if len(envs) > 1:
        notes = (
            '<p class="warn">These runs ran different envs; tasks are matched by index and '
            "name.</p>"
        )
    pairs = []
    for i, (run, result) in enumerate(zip(runs[1:], results, strict=True), 1):
        rows = []
        for name, row in as_dict(result.get("agents")).items():
            ci = row.get("diff_ci95")
            ci_text = "-" if not ci else f"[{signed(ci[0])}, {signed(ci[1])}]"
            rows.append(
                f'<tr data-agent="{esc(name)}"><th scope="row">{esc(name)}</th>'
                f'<td class="n">{esc(row["matched"])} '
                f"({esc(row['tasks_a'])}, {esc(row['tasks_b'])})</td>"
                f'<td class="n">{signed(row["mean_a"])}</td>'
                f'<td class="n">{signed(row["mean_b"])}</td>'
                f'<td class="n diff" data-value="{esc(row["diff"])}">'
                f"<b>{signed(row['diff'])}</b></td>"
                f'<td class="n">{esc(ci_text)}</td><td>{_diff_bar(row)}</td>'
                f'<td class="n">{esc(row["b_higher"])}/{esc(row["b_lower"])}/'
                f"{esc(row['tied'])}</td></tr>"
            )
        table = (
            '<div class="scroll"><table class="grid compare"><thead><tr><th>agent</th>'
            "<th>tasks matched (A, B)</th><th>A mean</th><th>B mean</th><th>B − A</th>"
            "<th>95% CI</th><th>B − A around 0</th><th>B &gt;/&lt;/= A</th></tr></thead>"
            f"<tbody>{''.join(rows) or '<tr><td colspan=8>no scored agent in common</td></tr>'}"
            "</tbody></table></div>"
        )
        pairs.append(
            f'<section class="pair" id="pair-{i}">'
            f"<h2>B{i} − A: {esc(run.id)} vs {esc(base.id)}</h2>"
            f"{table}</section>"
        )
    body = (
        '<nav class="crumbs"><a href="/">runs</a> / comparison</nav><h1>Comparison</h1>'
        '<p class="muted">Per agent, the paired difference of mean rewards over the tasks both '
        "runs hold (a task's value: the mean of its ok rollouts), with a bootstrap 95% interval "
        "over tasks, as <code>taketurns compare</code> computes it.</p>"
        f'{notes}<div class="scroll"><table class="grid" id="compared">'
        "<thead><tr><th></th><th>run</th>"
        f"<th>env</th><th>models</th><th>state</th><th>episodes</th></tr></thead><tbody>{heads}"
        f"</tbody></table></div>{''.join(pairs)}"
    )
    return layout("comparison", body, page="compare")
