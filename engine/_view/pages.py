"""The viewer's HTML: plain server-rendered pages (the runs table, a run; the
comparison: ``comparison``) and the fragments the live script swaps in. Every value that comes from
a run directory is escaped (``_report.markup.esc``); transcripts, tables and figures
are the report's own (``_report``)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from taketurns._exchange.outcome import CAUSES, describe_cause
from taketurns._report.env_parts import EnvParts
from taketurns._report.markup import Json, as_dict, as_float, esc
from taketurns._report.page import env_sections, sections
from taketurns._report.transcript import render_episode
from taketurns._view.filters import ANY_FAILURE, NO_FAILURE, EpisodeFilter
from taketurns._view.paging import Page
from taketurns._view.run import RUNNING, RunView

__all__ = [
    "episode_page",
    "figures",
    "layout",
    "live_facts",
    "newest",
    "run_page",
    "run_row",
    "runs_page",
]


def url(run: RunView, suffix: str = "") -> str:
    return "/run/" + quote(run.id, safe="/~") + suffix


def layout(title: str, body: str, *, page: str, data: Mapping[str, str] | None = None) -> str:
    attrs = "".join(f' data-{k}="{esc(v)}"' for k, v in (data or {}).items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{esc(title)} · taketurns view</title>"
        '<link rel="stylesheet" href="/static/report.css">'
        '<link rel="stylesheet" href="/static/view.css">'
        '<script src="/static/view.js" defer></script></head>\n'
        f'<body data-page="{esc(page)}"{attrs}>'
        '<header class="bar"><a class="brand" href="/">taketurns view</a></header>'
        f"<main>\n{body}\n</main></body></html>\n"
    )


# --- small formatters ----------------------------------------------------------------


def signed(value: object) -> str:
    found = as_float(value)
    return "-" if found is None else f"{found:+.3f}"


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h {m:02d}m" if hours else f"{m}m {s:02d}s"


def count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def state_badge(state: str) -> str:
    return f'<span class="state state-{esc(state)}">{esc(state)}</span>'


def _interval(stats: Mapping[str, Any], kind: str) -> str:
    ci = stats.get("reward_ci95")
    if not (isinstance(ci, list) and len(ci) == 2):
        return ""
    mark = "≈" if kind == "normal" else ""
    return f' <span class="ci">{mark}[{signed(ci[0])}, {signed(ci[1])}]</span>'


def _means(counts: Mapping[str, Any], *, intervals: bool = True) -> str:
    """Each agent's mean (and, with ``intervals``, its 95% interval)."""
    agents = as_dict(counts.get("agents"))
    if not agents:
        return '<span class="muted">-</span>'
    kind = str(counts.get("interval"))
    return "".join(
        f'<span class="mean"><span class="agent">{esc(name)}</span> '
        f"<b>{signed(as_dict(s).get('reward_mean'))}</b>"
        f"{_interval(as_dict(s), kind) if intervals else ''}</span>"
        for name, s in agents.items()
    )


def models_cell(models: Mapping[str, Sequence[str]]) -> str:
    every = {m for ms in models.values() for m in ms}
    if len(every) == 1:
        return f"<code>{esc(next(iter(every)))}</code>"
    return "<br>".join(
        f'<span class="agent">{esc(a)}</span> <code>{esc(", ".join(ms))}</code>'
        for a, ms in models.items()
    )


# --- the runs table -------------------------------------------------------------------


def run_row(run: RunView) -> str:
    """One ``<tr>`` of the runs table (sent again, whole, by the live stream)."""
    row = run.row()
    first_mean: Json = next(iter(as_dict(row.get("agents")).values()), {})
    done = row.get("episodes")
    planned = row.get("planned")
    progress = ""
    if isinstance(done, int) and isinstance(planned, int) and planned:
        progress = f'<progress max="{planned}" value="{min(done, planned)}"></progress>'
    cells = [
        f'<td class="pick"><input type="checkbox" name="run" value="{esc(run.id)}" '
        f'aria-label="compare {esc(run.id)}"></td>',
        f'<td class="run" data-value="{esc(run.id)}">'
        f'<a href="{esc(url(run))}">{esc(run.id)}</a></td>',
        f'<td class="env" data-value="{esc(row["env"])}">{esc(row["env"])}</td>',
        f'<td class="models">{models_cell(row["models"])}</td>',
        f'<td data-value="{esc(row["state"])}">{state_badge(row["state"])}</td>',
        f'<td class="n" data-value="{esc(-1 if planned is None else planned)}">'
        f"{count(planned)}</td>",
        f'<td class="n done" data-value="{esc(done if done is not None else -1)}">{count(done)}'
        f"{progress}</td>",
        f'<td class="n" data-value="{esc(row.get("ok") or 0)}">{count(row.get("ok"))}</td>',
        f'<td class="n{" bad" if row.get("failed") else ""}" '
        f'data-value="{esc(row.get("failed") or 0)}">'
        f"{count(row.get('failed'))}</td>",
        f'<td class="means" data-value="{esc(as_dict(first_mean).get("reward_mean") or "")}">'
        f"{_means(row)}</td>",
        f'<td class="when" data-value="{esc(row["started"] or 0)}">'
        f"{esc(_when(row['started']))}</td>",
        f'<td class="n" data-value="{esc(row["duration_s"] or 0)}">'
        f"{esc(_duration(row['duration_s']))}</td>",
    ]
    cells = [
        c.replace("<td", f'<td data-label="{label}"', 1)
        for c, (label, _) in zip(cells, _COLUMNS, strict=True)
    ]
    search = " ".join(
        [run.id, row["env"], row["state"], *(m for ms in row["models"].values() for m in ms)]
    )
    return (
        f'<tr data-run="{esc(run.id)}" data-state="{esc(row["state"])}" '
        f'data-search="{esc(search.lower())}">{"".join(cells)}</tr>'
    )


_COLUMNS = [
    ("", ""),
    ("run", "text"),
    ("env", "text"),
    ("models", ""),
    ("state", "text"),
    ("planned", "num"),
    ("done", "num"),
    ("ok", "num"),
    ("failed", "num"),
    ("reward: mean, 95% CI", "num"),  # the first agent's mean sorts
    ("started", "num"),
    ("duration", "num"),
]


def runs_page(runs: Sequence[RunView], roots: Sequence[str]) -> str:
    head = "".join(
        f'<th scope="col"{f" data-sort={chr(34)}{kind}{chr(34)} tabindex=0" if kind else ""}>'
        f"{esc(label)}</th>"
        for label, kind in _COLUMNS
    )
    rows = "".join(run_row(r) for r in runs)
    empty = (
        ""
        if runs
        else '<p class="muted" id="no-runs">No run directories yet (a folder holding '
        "episodes.jsonl or config.toml); new ones appear here as evals start.</p>"
    )
    body = (
        f'<h1>Runs</h1><p class="muted">under {esc(", ".join(roots))} · '
        f'<span id="run-count">{len(runs)}</span> runs · updates live</p>'
        '<div class="toolbar"><input id="runs-filter" type="search" '
        'placeholder="filter: run, env, model…" aria-label="filter runs">'
        '<select id="state-filter" aria-label="state"><option value="">every state</option>'
        '<option value="running">running</option><option value="finished">finished</option>'
        '<option value="interrupted">interrupted</option></select>'
        '<button id="compare-button" type="submit" form="compare-form">compare selected</button>'
        '<span class="muted" id="compare-hint">tick two or more runs; the first is A</span></div>'
        '<form id="compare-form" action="/compare" method="get"><div class="scroll">'
        f'<table id="runs" class="grid"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody>'
        f"</table></div></form>{empty}"
    )
    return layout("runs", body, page="runs")


# --- one run ----------------------------------------------------------------------------


def live_facts(run: RunView) -> str:
    """The run's headline numbers (swapped in live)."""
    row = run.row()
    facts = [
        ("state", state_badge(row["state"])),
        ("planned", esc(count(row["planned"]))),
        ("done", esc(count(row.get("episodes")))),
        ("ok", esc(count(row.get("ok")))),
        ("failed", esc(count(row.get("failed")))),
        ("started", esc(_when(row["started"]))),
        ("duration", esc(_duration(row["duration_s"]))),
    ]
    items = "".join(
        f'<div class="fact" data-fact="{esc(k)}"><span>{esc(k)}</span><b>{v}</b></div>'
        for k, v in facts
    )
    # the means without an interval: the run's one interval is the summary table's
    # (issue 40: a live ≈[...] here disagreed with the table's [...] below)
    means = _means(row, intervals=False)
    reading = ""
    if run.scanned < len(run.index):
        reading = (
            f'<p class="muted" id="reading">reading episodes.jsonl: {run.scanned:,} of '
            f"{len(run.index):,} lines</p>"
        )
    return f'<div class="facts">{items}</div><p class="means-line">{means}</p>{reading}'


def newest(run: RunView) -> str:
    """The newest episodes read (swapped in live), each linking to its transcript."""
    items = []
    for e in reversed(run.tally.newest):
        rewards = " · ".join(f"{esc(a)} {signed(r)}" for a, r in e["rewards"].items())
        badge = (
            '<span class="badge ok">ok</span>'
            if e["cause"] is None
            else f'<span class="badge bad">failed: {esc(describe_cause(e["cause"]))}</span>'
        )
        items.append(
            f'<li><a href="{esc(url(run, "/episode/" + str(e["line"] + 1)))}">'
            f"<code>{esc(e['id'])}</code></a> "
            f'{badge} <span class="muted">{esc(e["stop"])}</span> {rewards}</li>'
        )
    if not items:
        return '<p class="muted">none read yet</p>'
    return f'<ol class="newest">{"".join(items)}</ol>'


def figures(run: RunView, summary: Json, own: EnvParts | None = None) -> str:
    """The report's summary tables and figures over the episodes read so far; the
    env's own figures and sections (``own``) once the run ended. Final (no more
    refreshes) when the run ended, every line is read and ``own`` is drawn."""
    final = run.state != RUNNING and run.caught_up and own is not None
    if not run.scanned and len(run.index):
        return (
            '<div data-final="0"><h2>Summary</h2><p class="muted">reading episodes.jsonl '
            f"({len(run.index):,} lines)…</p></div>"
        )
    # while the run goes on, its counts are the live ones at the top of the page only
    # (issue 40: the table's count lagged behind them): one count on the page
    tables, plots = sections(run.scan, summary, own, counts=run.state != RUNNING)
    note = ""
    if run.scanned < len(run.index):
        note = (
            f'<p class="muted">over the first {run.scanned:,} of {len(run.index):,} episodes '
            "read so far; updates as reading goes on</p>"
        )
    if run.state == RUNNING:
        note += '<p class="muted">the env\'s own figures, if it has any, come when the run ends</p>'
    elif own is None:
        note += '<p class="muted">drawing the env\'s own figures, if it has any…</p>'
    return f'<div data-final="{int(final)}">{note}{tables}{plots}</div>'


def _failures(run: RunView, summary: Json) -> str:
    causes = as_dict(summary.get("failed_by_cause")) or dict(run.tally.causes)
    if not causes:
        return ""
    links = "".join(
        f'<li><a href="{esc(url(run, "?" + urlencode({"cause": c})))}#transcripts">'
        f"{esc(describe_cause(c))}</a>: {esc(n)}</li>"
        for c, n in causes.items()
    )
    firsts = "".join(
        f"<li><b>{esc(describe_cause(str(f.get('cause'))))}</b> "
        f"<code>{esc(f.get('type', ''))}</code> "
        f"{esc(f.get('message', ''))}"
        + (
            f' <span class="muted">at <code>{esc(f.get("where"))}</code></span>'
            if f.get("where")
            else ""
        )
        + (
            f' <span class="muted">(first: {esc(f.get("episode"))})</span>'
            if f.get("episode")
            else ""
        )
        + "</li>"
        for f in summary.get("failures") or ()
        if isinstance(f, dict)
    )
    return (
        '<section id="failures"><h2>Failed episodes</h2><p>by cause (each opens its '
        f"transcripts, tracebacks included):</p><ul>{links}</ul>"
        + (f"<p>first failure of each kind:</p><ul>{firsts}</ul>" if firsts else "")
        + "</section>"
    )


def _options(name: str, label: str, values: Sequence[tuple[str, str]], chosen: str) -> str:
    opts = "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(text)}</option>'
        for v, text in [("", f"any {label}"), *values]
    )
    return f'<select name="{name}" aria-label="{esc(label)}">{opts}</select>'


def _filter_form(run: RunView, flt: EpisodeFilter) -> str:
    agents = sorted(run.tally.models or run.models())
    stops = sorted({s for c in run.tally.stops.values() for s in c})
    if flt.stop and flt.stop not in stops:
        stops.append(flt.stop)
    causes = [(NO_FAILURE, "ok only"), (ANY_FAILURE, "failed (any cause)")]
    causes += [(c, f"failed: {describe_cause(c)}") for c in CAUSES]
    low = "" if flt.min_reward is None else f"{flt.min_reward:g}"
    high = "" if flt.max_reward is None else f"{flt.max_reward:g}"
    return (
        '<form id="episode-filter" class="toolbar" method="get" '
        f'action="{esc(url(run))}#transcripts">'
        + _options("agent", "agent", [(a, a) for a in agents], flt.agent)
        + _options("stop", "stop condition", [(s, s) for s in stops], flt.stop)
        + _options("cause", "outcome", causes, flt.cause)
        + f'<label>reward <input name="min_reward" size="5" value="{esc(low)}" placeholder="min" '
        'aria-label="lowest reward"></label>'
        f'<label>to <input name="max_reward" size="5" value="{esc(high)}" placeholder="max" '
        'aria-label="highest reward"></label>'
        f'<input name="q" type="search" value="{esc(flt.text)}" placeholder="search text…" '
        'aria-label="search text">'
        '<button type="submit">filter</button>'
        f'<a href="{esc(url(run))}#transcripts">clear</a></form>'
    )


def transcripts(run: RunView, flt: EpisodeFilter, page: Page) -> str:
    items = "".join(render_episode(i + 1, e) for i, (_, e) in enumerate(page.episodes))
    of = f"{page.total:,}" if page.indexed_all else f"at least {page.total:,}"
    lines = f"lines {page.offset + 1:,}–{page.offset + page.scanned:,} of {of}"
    status = f"{len(page.episodes)} episode{'s' if len(page.episodes) != 1 else ''} ({lines})"
    more = ""
    if page.next is not None:
        query = urlencode({**flt.query(), "offset": page.next})
        more = f'<p><a id="more" href="{esc(url(run, "?" + query))}#transcripts">more →</a></p>'
    elif not page.episodes:
        status = "no episode matches" + ("" if flt.empty else " the filter") + f" ({lines})"
    if page.offset:
        back = urlencode(flt.query())
        status += f' · <a href="{esc(url(run, "?" + back))}#transcripts">from the start</a>'
    return (
        f'<section id="transcripts"><h2>Transcripts</h2>{_filter_form(run, flt)}'
        f'<p class="muted" id="page-status">{status}</p>'
        f'<div class="episodes">{items}</div>{more}</section>'
    )


def _figures_box(run: RunView, summary: Json) -> str:
    """The figures inline when final (a finished run read to its end), else a box the
    script fills from ``/run/<id>/figures`` (and refreshes while the run goes on)."""
    own = run.drawn
    if run.state != RUNNING and summary and run.caught_up and own is not None:
        return f'<div id="figures">{figures(run, summary, own)}</div>'
    return (
        '<div id="figures"><div data-final="0"><h2>Summary</h2>'
        '<p class="muted">loading the tables and figures…</p></div></div>'
    )


def run_page(run: RunView, summary: Json, flt: EpisodeFilter, page: Page) -> str:
    body = (
        f'<nav class="crumbs"><a href="/">runs</a> / {esc(run.id)}</nav>'
        f'<h1>{esc(run.env)} <small class="muted">{esc(run.id)}</small></h1>'
        f'<p class="muted path">{esc(run.path)}</p>'
        f'<section id="live-facts">{live_facts(run)}</section>'
        '<section id="newest-box"><h2>Latest episodes</h2>'
        f'<div id="newest">{newest(run)}</div></section>'
        f"{_failures(run, summary)}"
        f'<section id="report">{_figures_box(run, summary)}</section>'
        f"{transcripts(run, flt, page)}"
        '<section id="config"><details><summary><h2>config.toml</h2></summary>'
        f"<pre>{esc(run.config_text or '(no config.toml in the run directory)')}</pre></details>"
        "</section>"
    )
    data = {"run": run.id, "state": run.state}
    return layout(run.id, body, page="run", data=data)


def episode_page(run: RunView, line: int, record: Json, own: EnvParts | None = None) -> str:
    """One transcript, then the env's own sections drawn over this episode alone
    (``own``: its ``report_sections`` hook, e.g. its scores and logs), if it has any."""
    body = (
        f'<nav class="crumbs"><a href="/">runs</a> / <a href="{esc(url(run))}">{esc(run.id)}</a>'
        f" / line {line + 1:,}</nav>"
        f'<section id="transcripts">{render_episode(0, record)}</section>'
    )
    if own is not None and (own.sections or own.notes):
        body += f'<section id="report">{env_sections(own)}</section>'
    return layout(f"{run.id} line {line + 1}", body, page="episode")
