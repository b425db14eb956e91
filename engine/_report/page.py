"""``report.html``'s page: one self-contained HTML document describing a run
(``page_html``; built from a run's records and written by ``_report.feed``).

Everything is inline: the CSS, the plots (SVG drawn here, no plotting library) and a
few lines of optional JavaScript that filter the transcripts. Episode content is
untrusted, so every value is escaped, only ``data:image/...`` URLs become images, and
a Content-Security-Policy (the script and style pinned by hash, ``data:`` images only)
stops the page from running or fetching anything else even if an escape were missed.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from taketurns._exchange.outcome import describe_cause
from taketurns._report.charts import Series, bar_chart, histogram
from taketurns._report.env_parts import EnvParts
from taketurns._report.markup import (
    Json,
    as_dict,
    as_float,
    esc,
    num,
    shown,
)
from taketurns._report.measures import measures_section
from taketurns._report.scan import Scan
from taketurns._report.style import REPORT_CSS, REPORT_JS
from taketurns._report.transcript import render_transcripts

if TYPE_CHECKING:
    pass

__all__ = ["env_sections", "page_html", "sections"]


def sections(
    scan: Scan, summary: Json, own: EnvParts | None = None, *, counts: bool = True
) -> tuple[str, str]:
    """The report's summary tables, and its figures with the env's own figures and
    sections (``own``: ``env_parts``, when drawn), as HTML (escaped) the way
    ``report.html`` shows them: for other pages over a run (``taketurns view``). Style
    them with ``REPORT_CSS``. ``counts`` False leaves out the episode counts table (a
    page that shows live counts elsewhere)."""
    own = own or EnvParts()
    return _tables(scan, summary, counts=counts), _plots(scan, summary, own) + _sections(own)


# --- small helpers -----------------------------------------------------------------


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# --- the page ----------------------------------------------------------------------


def page_html(
    run_dir: Path,
    scan: Scan,
    summary: Json,
    config: Json,
    config_text: str,
    note: str = "",
    own: EnvParts | None = None,
) -> str:
    own = own or EnvParts()
    env_id = str(config.get("env_id") or scan.env or "?")
    csp = (
        f"default-src 'none'; img-src data:; style-src '{_hash(REPORT_CSS)}'; "
        f"script-src '{_hash(REPORT_JS)}'; base-uri 'none'; form-action 'none'"
    )
    body = "\n".join(
        [
            _header(run_dir, env_id, scan, summary, config),
            f'<p class="warn" id="damaged">{esc(note)}</p>' if note else "",
            "".join(f'<p class="warn env-note">{esc(n)}</p>' for n in own.notes),
            _rescored(summary),
            _tables(scan, summary),
            _plots(scan, summary, own),
            _sections(own),
            render_transcripts(scan.failed, scan.shown, scan.others),
            '<section id="config"><details><summary><h2>config.toml</h2></summary>'
            f"<pre>{esc(config_text or '(no config.toml in the run directory)')}</pre>"
            "</details></section>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>taketurns report: {esc(env_id)}</title><style>{REPORT_CSS}</style></head>\n"
        f"<body><main>\n{body}\n</main><script>{REPORT_JS}</script></body></html>\n"
    )


def _models(scan: Scan, config: Json) -> str:
    by_agent = scan.models
    every = set().union(*by_agent.values()) if by_agent else set()
    if len(every) <= 1:
        return next(iter(every), str(config.get("model", "?")))
    return ", ".join(f"{a}: {' / '.join(sorted(m))}" for a, m in sorted(by_agent.items()))


def _header(run_dir: Path, env_id: str, scan: Scan, summary: Json, config: Json) -> str:
    traces = scan.traces
    taskset = as_dict(config.get("env")).get("taskset")
    facts = [
        ("env", env_id + (f" (taskset {taskset})" if isinstance(taskset, str) else "")),
        ("model", _models(scan, config)),
        ("episodes", f"{summary.get('episodes', scan.episodes)}"),
        ("ok", f"{summary.get('ok', '?')}"),
        ("failed", _failed_fact(summary)),
        ("traces", f"{traces}"),
    ]
    wall = as_float(summary.get("wall_s"))
    if wall is not None:
        rate = as_float(summary.get("episodes_per_s")) or 0.0
        facts.append(("wall time", f"{wall:.2f} s ({rate:.1f} episodes/s)"))
    items = "".join(
        f'<div class="fact" data-fact="{esc(k)}"><span>{esc(k)}</span><b>{esc(v)}</b></div>'
        for k, v in facts
    )
    warn = ""
    if summary.get("interrupted"):
        warn = (
            '<p class="warn" id="interrupted">This run was interrupted: the numbers cover '
            "the episodes finished so far (continue it with --resume).</p>"
        )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f'<header id="header"><h1>taketurns report: {esc(env_id)}</h1>'
        f'<div class="facts">{items}</div>{warn}'
        f'<p class="muted">{esc(run_dir.resolve())} · generated {esc(stamp)}</p></header>'
    )


def _failed_fact(summary: Json) -> str:
    """``3 (the model endpoint failed 2, the env raised 1)``."""
    causes = as_dict(summary.get("failed_by_cause"))
    text = f"{summary.get('failed', '?')}"
    if causes:
        text += " (" + ", ".join(f"{describe_cause(k)} {v}" for k, v in causes.items()) + ")"
    return text


# --- summary tables ----------------------------------------------------------------


def _cell(agent: str, stat: str, value: object, text: str, extra: str = "") -> str:
    return (
        f'<td data-agent="{esc(agent)}" data-stat="{esc(stat)}" '
        f'data-value="{esc(value)}"{extra}>{esc(text)}</td>'
    )


def _reward_cell(agent: str, stats: Json) -> str:
    mean, stderr = as_float(stats.get("reward_mean")), as_float(stats.get("reward_stderr"))
    if mean is None:
        return '<td class="na">-</td>'
    text = f"{mean:+.3f} ± {stderr or 0.0:.3f}"
    return _cell(agent, "reward_mean", mean, text, f' data-stderr="{esc(stderr)}"')


def _interval_cell(agent: str, stats: Json) -> str:
    """The bootstrap 95% interval of the mean (``summary.json`` ``reward_ci95``)."""
    ci = stats.get("reward_ci95")
    low, high = (as_float(v) for v in ci) if isinstance(ci, list) and len(ci) == 2 else (None, None)
    if low is None or high is None:
        return '<td class="na">-</td>'
    extra = f' data-low="{esc(low)}" data-high="{esc(high)}"'
    return _cell(agent, "reward_ci95", f"{low},{high}", f"[{low:+.3f}, {high:+.3f}]", extra)


def _agent_rows(agents: Json) -> list[tuple[str, str, list[str]]]:
    """(label, stat key, one <td> per agent) for the per-agent table; ``stat`` is the
    dotted path of the number in ``summary.json`` (``rewards.payoff``)."""
    names = list(agents)
    rows = [("reward (mean ± stderr)", "reward_mean", [_reward_cell(n, agents[n]) for n in names])]
    rows.append(
        ("reward: bootstrap 95% CI", "reward_ci95", [_interval_cell(n, agents[n]) for n in names])
    )

    def union(field: str) -> list[str]:
        return sorted({k for a in agents.values() for k in as_dict(as_dict(a).get(field))})

    keys = [("traces", "traces")]
    keys += [(f"reward: {k}", f"rewards.{k}") for k in union("rewards")]
    keys += [(f"metric: {k}", f"metrics.{k}") for k in union("metrics")]
    for field, mark in (("pass_at_k", "@"), ("pass_hat_k", "^")):
        keys += [
            (f"pass{mark}{k}", f"{field}.{k}")
            for k in sorted(union(field), key=lambda s: (len(s), s))
        ]
    if union("task_spread"):
        keys += [
            ("task reward sd (mean)", "task_spread.sd_mean"),
            ("task reward sd (max)", "task_spread.sd_max"),
            ("tasks mixed pass/fail", "task_spread.mixed"),
            ("tasks with 2+ rollouts", "task_spread.tasks"),
        ]
    keys += [
        ("turns (mean)", "turns_mean"),
        ("tokens (mean)", "tokens_mean"),
        ("tokens (total)", "tokens_total"),
        ("traces with errors", "errors"),
    ]
    keys += [(f"stop: {k}", f"stop_conditions.{k}") for k in union("stop_conditions")]
    # any statistic summary.py grows later still gets a row
    known = {stat.partition(".")[0] for _, stat in keys}
    known |= {"reward_mean", "reward_stderr", "reward_ci95"}
    for field in sorted({k for a in agents.values() for k in as_dict(a)} - known):
        values = [as_dict(a).get(field) for a in agents.values()]
        if any(as_float(v) is not None for v in values):
            keys.append((field.replace("_", " "), field))
        elif any(isinstance(v, dict) for v in values):
            keys += [(f"{field}: {k}", f"{field}.{k}") for k in union(field)]
    for label, stat in keys:
        cells = []
        for name in names:
            field, _, sub = stat.partition(".")
            value = as_dict(agents[name]).get(field)
            if sub:
                value = as_dict(value).get(sub, 0 if field == "stop_conditions" else None)
            if value is None:
                cells.append('<td class="na">-</td>')
            else:
                cells.append(_cell(name, stat, value, shown(value)))
        rows.append((label, stat, cells))
    return rows


def _tables(scan: Scan, summary: Json, *, counts: bool = True) -> str:
    agents = list(as_dict(summary.get("agents")))
    ident = scan.ident
    head = "".join(f'<th scope="col">{esc(a)}</th>' for a in agents)
    who = "".join(
        f'<td class="who">{esc(ident.get(a, ("?", "?"))[0])}<br>'
        f'<span class="muted">harness {esc(ident.get(a, ("?", "?"))[1])}</span></td>'
        for a in agents
    )
    body = f'<tr><th scope="row">model</th>{who}</tr>' + "".join(
        f'<tr data-row="{esc(key)}"><th scope="row">{esc(label)}</th>{"".join(cells)}</tr>'
        for label, key, cells in _agent_rows(as_dict(summary.get("agents")))
    )
    stops = as_dict(summary.get("episode_stops"))
    ep_rows = [("episodes", summary.get("episodes")), ("ok", summary.get("ok"))]
    ep_rows += [("failed", summary.get("failed"))]
    causes = as_dict(summary.get("failed_by_cause"))
    ep_rows += [(f"failed: {describe_cause(k)}", v) for k, v in causes.items()]
    ep_rows += [(f"episode stop: {k}", v) for k, v in sorted(stops.items())]
    ep_body = "".join(
        f'<tr><th scope="row">{esc(k)}</th><td data-stat="{esc(k)}" data-value="{esc(v)}">'
        f"{esc(v)}</td></tr>"
        for k, v in ep_rows
    )
    episodes = f'<table id="summary-episodes"><tbody>{ep_body}</tbody></table>' if counts else ""
    return (
        '<section id="summary"><h2>Summary</h2><div class="tables">'
        f'<table id="summary-agents"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
        f"{episodes}</div></section>"
        f"{measures_section(summary)}"
    )


def _rescored(summary: Json) -> str:
    """A rescored run (``taketurns rescore``): where it came from and each agent's
    mean before and after; "" for any other run."""
    source = as_dict(summary.get("rescored_from"))
    if not source:
        return ""
    rows = []
    for name, row in as_dict(source.get("agents")).items():
        old = as_float(as_dict(row).get("reward_mean_before"))
        new = as_float(as_dict(row).get("reward_mean_after"))
        change = None if old is None or new is None else new - old
        cells = "".join(
            '<td class="na">-</td>'
            if value is None
            else f'<td data-agent="{esc(name)}" data-stat="{stat}" data-value="{esc(value)}">'
            f"{value:+.3f}</td>"
            for stat, value in (("before", old), ("after", new), ("change", change))
        )
        rows.append(f'<tr><th scope="row">{esc(name)}</th>{cells}</tr>')
    return (
        '<section id="rescored"><h2>Rescored</h2>'
        f'<p class="muted">rewards recomputed from the traces of {esc(source.get("run"))}'
        " with the env's current rubric (no agent model call)</p>"
        '<table id="rescored-means"><thead><tr><th>agent</th><th>mean before</th>'
        f"<th>mean after</th><th>change</th></tr></thead><tbody>{''.join(rows)}</tbody>"
        "</table></section>"
    )


# --- plots (drawn by taketurns._report.charts) ---------------------------------------------------


def _figure(title: str, svg: str, note: str = "") -> str:
    note_html = f'<p class="muted">{esc(note)}</p>' if note else ""
    return f"<figure><figcaption>{esc(title)}</figcaption>{svg}{note_html}</figure>"


def _plots(scan: Scan, summary: Json, own: EnvParts) -> str:
    rewards, turns = scan.rewards, scan.turns  # failed episodes left out
    scored = scan.scored  # agents with rewards (a modeled user has none)
    order = sorted(rewards)
    cats, series = histogram({a: rewards[a] for a in order if a in scored}, integer=False)
    figures = [
        _figure(
            "Reward distribution per agent",
            bar_chart("plot-reward", cats, series, x_label="reward", y_label="traces"),
        )
    ]
    cats, series = histogram({a: turns[a] for a in order}, integer=True)
    figures.append(
        _figure(
            "Model turns per episode, per agent",
            bar_chart("plot-turns", cats, series, x_label="turns", y_label="traces", integer=True),
        )
    )
    stops = {
        a: as_dict(s.get("stop_conditions")) for a, s in as_dict(summary.get("agents")).items()
    }
    kinds = sorted({k for s in stops.values() for k in s})
    series = [
        Series(a, tuple(float(as_float(s.get(k)) or 0.0) for k in kinds)) for a, s in stops.items()
    ]
    failed = summary.get("failed")
    empty = (
        f"no data: all {failed} episodes failed (failed episodes are left out)"
        if isinstance(failed, int) and failed and not summary.get("ok")
        else "no data"
    )
    figures.append(
        _figure(
            "Stop conditions per agent",
            bar_chart(
                "plot-stops",
                kinds,
                series,
                x_label="stop condition",
                y_label="traces",
                integer=True,
                values_on_bars=True,
                empty=empty,
            ),
        )
    )
    if scan.turn_rewards:
        figures.append(_turn_rewards(scan))
    figures += [_figure(f.title, f.svg, f.note) for f in own.figures]
    return (
        f'<section id="plots"><h2>Plots</h2><div class="plots">{"".join(figures)}</div></section>'
    )


def _turn_rewards(scan: Scan) -> str:
    """Mean per-turn reward (``Trace.record_turn_reward``) by the order of the turn it
    paid in its trace, one bar per agent (and reward name, when there are several)."""
    keys = sorted(scan.turn_rewards)
    names = {name for _, name in keys}
    ordinals = sorted({k for key in keys for k in scan.turn_rewards[key]})
    series = []
    for agent, name in keys:
        label = agent if len(names) == 1 else f"{agent} · {name}"
        by_k = scan.turn_rewards[(agent, name)]
        values, tips = [], []
        for k in ordinals:
            total, n = by_k.get(k, (0.0, 0.0))
            values.append(total / n if n else math.nan)
            tips.append(f"{label} · rewarded turn {k}: mean {num(values[-1])} over {n:.0f}")
        series.append(Series(label, tuple(values), tuple(tips)))
    svg = bar_chart(
        "plot-turn-rewards",
        [str(k) for k in ordinals],
        series,
        x_label=f"rewarded turn of the trace ({', '.join(sorted(names))})",
        y_label="mean per-turn reward",
        values_on_bars=len(ordinals) * len(series) <= 24,
    )
    return _figure("Per-turn rewards: mean by turn and agent", svg)


def env_sections(own: EnvParts) -> str:
    """The env's own sections and its notes (why a part is left out), as HTML the
    way ``report.html`` shows them: for the viewer's page of one episode."""
    notes = "".join(f'<p class="warn env-note">{esc(n)}</p>' for n in own.notes)
    return notes + _sections(own)


def _sections(own: EnvParts) -> str:
    """The env's own sections, each under its heading and anchor."""
    out, taken = [], set()
    for section in own.sections:
        anchor = section.id or "env-" + (
            re.sub(r"[^a-z0-9]+", "-", section.title.lower()).strip("-") or "section"
        )
        while anchor in taken:
            anchor += "-2"
        taken.add(anchor)
        out.append(
            f'<section class="env-section" id="{esc(anchor)}"><h2>{esc(section.title)}</h2>'
            f"{section.html}</section>"
        )
    return "\n".join(out)
