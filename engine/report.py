"""``report.html``: one self-contained page describing a run directory.

Everything is inline: the CSS, the plots (SVG drawn here, no plotting library) and a
few lines of optional JavaScript that filter the transcripts. Episode content is
untrusted, so every value is escaped, only ``data:image/...`` URLs become images, and
a Content-Security-Policy (the script and style pinned by hash, ``data:`` images only)
stops the page from running or fetching anything else even if an escape were missed.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from engine.errors import ConfigError
from engine.records import read_episodes
from engine.summary import summarize

__all__ = ["write_report"]

REPORT = "report.html"
MAX_TRANSCRIPTS = 500
MAX_TEXT = 20_000  # characters of one message or error shown; the rest is elided
MAX_IMAGE_URL = 2_000_000  # a data: URL longer than this is not inlined
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f7f7f")
KUHN_CARDS = ("J", "Q", "K")

Json = dict[str, Any]


def write_report(run_dir: Path, *, max_transcripts: int = MAX_TRANSCRIPTS) -> Path:
    """Write ``run_dir/report.html`` from the run's ``episodes.jsonl``, ``summary.json``
    (recomputed if missing) and ``config.toml``; returns the report's path. At most
    ``max_transcripts`` episodes get a transcript (every episode counts in the plots)."""
    run_dir = Path(run_dir)
    episodes_path = run_dir / "episodes.jsonl"
    if not episodes_path.is_file():
        raise ConfigError(
            f"report {run_dir}: no episodes.jsonl there; pass the -o directory of an eval"
        )
    episodes = [e for e in read_episodes(episodes_path) if isinstance(e, dict)]
    config_path = run_dir / "config.toml"
    config_text = config_path.read_text(encoding="utf-8") if config_path.is_file() else ""
    try:
        config: Json = tomllib.loads(config_text)
    except tomllib.TOMLDecodeError:
        config = {}
    summary_path = run_dir / "summary.json"
    if summary_path.is_file():
        summary: Json = json.loads(summary_path.read_text(encoding="utf-8"))
    else:
        rollouts = config.get("rollouts")
        if not isinstance(rollouts, int):
            rollouts = 1 + max((_int(e.get("rollout")) for e in episodes), default=0)
        summary = summarize(episodes, rollouts=rollouts)
    page = _page(run_dir, episodes, summary, config, config_text, max_transcripts)
    out = run_dir / REPORT
    tmp = out.with_suffix(".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out


# --- small helpers -----------------------------------------------------------------


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _dict(value: object) -> Json:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _num(value: float) -> str:
    """Short, exact-looking: 2, 0.5, 0.0333, 1.23e+04."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return _e(text)
    more = len(text) - limit
    return f'{_e(text[:limit])}<span class="elided">… ({more:,} more characters)</span>'


def _traces(episode: Mapping[str, Any]) -> list[Json]:
    return [t for t in _list(episode.get("traces")) if isinstance(t, dict)]


def _agent(trace: Mapping[str, Any]) -> str:
    return str(_dict(trace.get("agent")).get("name", "?"))


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# --- the page ----------------------------------------------------------------------


def _page(
    run_dir: Path,
    episodes: list[Json],
    summary: Json,
    config: Json,
    config_text: str,
    max_transcripts: int,
) -> str:
    env_id = str(config.get("env_id") or next((e.get("env") for e in episodes), "?"))
    csp = (
        f"default-src 'none'; img-src data:; style-src '{_hash(_CSS)}'; "
        f"script-src '{_hash(_JS)}'; base-uri 'none'; form-action 'none'"
    )
    body = "\n".join(
        [
            _header(run_dir, env_id, episodes, summary, config),
            _tables(episodes, summary),
            _plots(env_id, episodes, summary),
            _transcripts(episodes, max_transcripts),
            '<section id="config"><details><summary><h2>config.toml</h2></summary>'
            f"<pre>{_e(config_text or '(no config.toml in the run directory)')}</pre>"
            "</details></section>",
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>taketurns report: {_e(env_id)}</title><style>{_CSS}</style></head>\n"
        f"<body><main>\n{body}\n</main><script>{_JS}</script></body></html>\n"
    )


def _models(episodes: list[Json], config: Json) -> str:
    by_agent: dict[str, set[str]] = defaultdict(set)
    for e in episodes:
        for t in _traces(e):
            by_agent[_agent(t)].add(str(_dict(t.get("agent")).get("model", "?")))
    every = set().union(*by_agent.values()) if by_agent else set()
    if len(every) <= 1:
        return next(iter(every), str(config.get("model", "?")))
    return ", ".join(f"{a}: {' / '.join(sorted(m))}" for a, m in sorted(by_agent.items()))


def _header(run_dir: Path, env_id: str, episodes: list[Json], summary: Json, config: Json) -> str:
    traces = sum(len(_traces(e)) for e in episodes)
    taskset = _dict(config.get("env")).get("taskset")
    facts = [
        ("env", env_id + (f" (taskset {taskset})" if isinstance(taskset, str) else "")),
        ("model", _models(episodes, config)),
        ("episodes", f"{summary.get('episodes', len(episodes))}"),
        ("ok", f"{summary.get('ok', '?')}"),
        ("failed", f"{summary.get('failed', '?')}"),
        ("traces", f"{traces}"),
    ]
    wall = _float(summary.get("wall_s"))
    if wall is not None:
        rate = _float(summary.get("episodes_per_s")) or 0.0
        facts.append(("wall time", f"{wall:.2f} s ({rate:.1f} episodes/s)"))
    items = "".join(
        f'<div class="fact" data-fact="{_e(k)}"><span>{_e(k)}</span><b>{_e(v)}</b></div>'
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
        f'<header id="header"><h1>taketurns report: {_e(env_id)}</h1>'
        f'<div class="facts">{items}</div>{warn}'
        f'<p class="muted">{_e(run_dir.resolve())} · generated {_e(stamp)}</p></header>'
    )


# --- summary tables ----------------------------------------------------------------


def _cell(agent: str, stat: str, value: object, text: str, extra: str = "") -> str:
    return (
        f'<td data-agent="{_e(agent)}" data-stat="{_e(stat)}" '
        f'data-value="{_e(value)}"{extra}>{_e(text)}</td>'
    )


def _shown(value: object) -> str:
    return _num(value) if isinstance(value, float) else str(value)


def _reward_cell(agent: str, stats: Json) -> str:
    mean, stderr = _float(stats.get("reward_mean")), _float(stats.get("reward_stderr"))
    if mean is None:
        return '<td class="na">–</td>'
    text = f"{mean:+.3f} ± {stderr or 0.0:.3f}"
    return _cell(agent, "reward_mean", mean, text, f' data-stderr="{_e(stderr)}"')


def _agent_rows(agents: Json) -> list[tuple[str, str, list[str]]]:
    """(label, stat key, one <td> per agent) for the per-agent table; ``stat`` is the
    dotted path of the number in ``summary.json`` (``rewards.payoff``)."""
    names = list(agents)
    rows = [("reward (mean ± stderr)", "reward_mean", [_reward_cell(n, agents[n]) for n in names])]

    def union(field: str) -> list[str]:
        return sorted({k for a in agents.values() for k in _dict(_dict(a).get(field))})

    keys = [("traces", "traces")]
    keys += [(f"reward: {k}", f"rewards.{k}") for k in union("rewards")]
    keys += [(f"metric: {k}", f"metrics.{k}") for k in union("metrics")]
    keys += [
        (f"pass@{k}", f"pass_at_k.{k}")
        for k in sorted(union("pass_at_k"), key=lambda s: (len(s), s))
    ]
    keys += [
        ("turns (mean)", "turns_mean"),
        ("tokens (mean)", "tokens_mean"),
        ("tokens (total)", "tokens_total"),
        ("traces with errors", "errors"),
    ]
    keys += [(f"stop: {k}", f"stop_conditions.{k}") for k in union("stop_conditions")]
    # any statistic summary.py grows later still gets a row
    known = {stat.partition(".")[0] for _, stat in keys} | {"reward_mean", "reward_stderr"}
    for field in sorted({k for a in agents.values() for k in _dict(a)} - known):
        values = [_dict(a).get(field) for a in agents.values()]
        if any(_float(v) is not None for v in values):
            keys.append((field.replace("_", " "), field))
        elif any(isinstance(v, dict) for v in values):
            keys += [(f"{field}: {k}", f"{field}.{k}") for k in union(field)]
    for label, stat in keys:
        cells = []
        for name in names:
            field, _, sub = stat.partition(".")
            value = _dict(agents[name]).get(field)
            if sub:
                value = _dict(value).get(sub, 0 if field == "stop_conditions" else None)
            if value is None:
                cells.append('<td class="na">–</td>')
            else:
                cells.append(_cell(name, stat, value, _shown(value)))
        rows.append((label, stat, cells))
    return rows


def _tables(episodes: list[Json], summary: Json) -> str:
    agents = list(_dict(summary.get("agents")))
    ident: dict[str, tuple[str, str]] = {}
    for e in episodes:
        for t in _traces(e):
            stamp = _dict(t.get("agent"))
            ident.setdefault(_agent(t), (str(stamp.get("model")), str(stamp.get("harness"))))
    head = "".join(f'<th scope="col">{_e(a)}</th>' for a in agents)
    who = "".join(
        f'<td class="who">{_e(ident.get(a, ("?", "?"))[0])}<br>'
        f'<span class="muted">harness {_e(ident.get(a, ("?", "?"))[1])}</span></td>'
        for a in agents
    )
    body = f'<tr><th scope="row">model</th>{who}</tr>' + "".join(
        f'<tr data-row="{_e(key)}"><th scope="row">{_e(label)}</th>{"".join(cells)}</tr>'
        for label, key, cells in _agent_rows(_dict(summary.get("agents")))
    )
    stops = _dict(summary.get("episode_stops"))
    ep_rows = [("episodes", summary.get("episodes")), ("ok", summary.get("ok"))]
    ep_rows += [("failed", summary.get("failed"))]
    ep_rows += [(f"episode stop: {k}", v) for k, v in sorted(stops.items())]
    ep_body = "".join(
        f'<tr><th scope="row">{_e(k)}</th><td data-stat="{_e(k)}" data-value="{_e(v)}">'
        f"{_e(v)}</td></tr>"
        for k, v in ep_rows
    )
    return (
        '<section id="summary"><h2>Summary</h2><div class="tables">'
        f'<table id="summary-agents"><thead><tr><th></th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
        f'<table id="summary-episodes"><tbody>{ep_body}</tbody></table></div></section>'
    )


# --- plots: grouped bar charts as inline SVG ---------------------------------------


@attrs.frozen
class _Series:
    name: str
    values: tuple[float, ...]  # one per category; NaN draws nothing
    tips: tuple[str, ...] = ()


def _ticks(lo: float, hi: float, *, integer: bool) -> list[float]:
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


def _text(
    x: float, y: float, text: str, cls: str, anchor: str = "middle", rot: bool = False
) -> str:
    where = (
        f'transform="translate({x:.1f},{y:.1f}) rotate(-90)"' if rot else f'x="{x:.1f}" y="{y:.1f}"'
    )
    return f'<text class="{cls}" {where} text-anchor="{anchor}">{_e(text)}</text>'


def _bar_chart(
    plot_id: str,
    categories: Sequence[str],
    series: Sequence[_Series],
    *,
    x_label: str,
    y_label: str,
    integer: bool = False,
    values_on_bars: bool = False,
) -> str:
    """Grouped bars: one band per category, one bar per series, a zero baseline (values
    may be negative), round y ticks, and a native tooltip (<title>) on every bar."""
    finite = [v for s in series for v in s.values if math.isfinite(v)]
    if not categories or not finite:
        return _svg(plot_id, [_text(W / 2, H / 2, "no data", "empty")])
    pad = 1.12 if values_on_bars else 1.0  # headroom for the value labels
    ticks = _ticks(min(0.0, *finite) * pad, max(0.0, *finite) * pad, integer=integer)
    lo, hi = ticks[0], ticks[-1]
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + plot_h * (hi - v) / (hi - lo)

    parts = []
    for t in ticks:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}"/>'
        )
        parts.append(_text(LEFT - 6, y(t) + 4, _num(t), "tick", "end"))
    band = plot_w / len(categories)
    bar_w = min(band * 0.8 / len(series), 64.0)
    group_w = bar_w * len(series)
    every = math.ceil(len(categories) / max(1, plot_w // 38))
    for ci, cat in enumerate(categories):
        x0 = LEFT + ci * band + (band - group_w) / 2
        if ci % every == 0:
            parts.append(_text(x0 + group_w / 2, H - BOTTOM + 16, cat, "tick"))
        for si, s in enumerate(series):
            v = s.values[ci]
            if not math.isfinite(v) or v == 0:
                continue
            top, bottom = y(max(v, 0.0)), y(min(v, 0.0))
            x = x0 + si * bar_w
            tip = s.tips[ci] if s.tips else f"{s.name} · {cat}: {_num(v)}"
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{PALETTE[si % len(PALETTE)]}">'
                f"<title>{_e(tip)}</title></rect>"
            )
            if values_on_bars:
                parts.append(
                    _text(x + bar_w / 2, top - 4 if v > 0 else bottom + 12, _num(v), "val")
                )
    parts.append(
        f'<path class="axis" d="M{LEFT},{TOP} V{TOP + plot_h} M{LEFT},{y(0.0):.1f} H{W - RIGHT}"/>'
    )
    parts.append(_text(LEFT + plot_w / 2, H - 10, x_label, "label"))
    parts.append(_text(14, TOP + plot_h / 2, y_label, "label", rot=True))
    parts.extend(_legend(series))
    return _svg(plot_id, parts)


def _legend(series: Sequence[_Series]) -> list[str]:
    parts, x = [], float(LEFT)
    for si, s in enumerate(series):
        colour = PALETTE[si % len(PALETTE)]
        parts.append(
            f'<rect class="swatch" x="{x:.1f}" y="8" width="12" height="12" fill="{colour}"/>'
        )
        parts.append(f'<text class="legend" x="{x + 16:.1f}" y="18">{_e(s.name)}</text>')
        x += 28 + 7 * len(s.name)
    return parts


def _svg(plot_id: str, parts: Iterable[str]) -> str:
    return (
        f'<svg id="{_e(plot_id)}" class="plot" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        f'role="img" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>'
    )


def _histogram(
    by_series: Mapping[str, Sequence[float]], *, integer: bool
) -> tuple[list[str], list[_Series]]:
    """Counts per bin for each series over shared bins: one bin per value when there
    are few distinct values (game payoffs, pass/fail, turn counts), else 12 even bins."""
    every = [v for vs in by_series.values() for v in vs]
    if not every:
        return [], []
    lo, hi = min(every), max(every)
    distinct = sorted(set(every))
    if integer and hi - lo <= 30:
        edges = [float(v) for v in range(int(lo), int(hi) + 1)]
        labels = [_num(v) for v in edges]
    elif not integer and len(distinct) <= 12:
        edges, labels = distinct, [_num(v) for v in distinct]
    else:
        width = (hi - lo) / 12 if not integer else float(math.ceil((hi - lo + 1) / 12))
        edges = [lo + i * width for i in range(12)]
        labels = [_num(edge) for edge in edges]
    series = []
    for name, values in by_series.items():
        counts = Counter(max(i for i, edge in enumerate(edges) if v >= edge) for v in values)
        series.append(_Series(name, tuple(float(counts[i]) for i in range(len(edges)))))
    return labels, series


def _figure(title: str, svg: str, note: str = "") -> str:
    note_html = f'<p class="muted">{_e(note)}</p>' if note else ""
    return f"<figure><figcaption>{_e(title)}</figcaption>{svg}{note_html}</figure>"


def _plots(env_id: str, episodes: list[Json], summary: Json) -> str:
    rewards: dict[str, list[float]] = defaultdict(list)
    turns: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        for t in _traces(e):
            rewards[_agent(t)].append(_float(t.get("reward")) or 0.0)
            turns[_agent(t)].append(float(len(_list(t.get("turns")))))
    order = sorted(rewards)
    cats, series = _histogram({a: rewards[a] for a in order}, integer=False)
    figures = [
        _figure(
            "Reward distribution per agent",
            _bar_chart("plot-reward", cats, series, x_label="reward", y_label="traces"),
        )
    ]
    cats, series = _histogram({a: turns[a] for a in order}, integer=True)
    figures.append(
        _figure(
            "Model turns per episode, per agent",
            _bar_chart("plot-turns", cats, series, x_label="turns", y_label="traces", integer=True),
        )
    )
    stops = {a: _dict(s.get("stop_conditions")) for a, s in _dict(summary.get("agents")).items()}
    kinds = sorted({k for s in stops.values() for k in s})
    series = [
        _Series(a, tuple(float(_float(s.get(k)) or 0.0) for k in kinds)) for a, s in stops.items()
    ]
    figures.append(
        _figure(
            "Stop conditions per agent",
            _bar_chart(
                "plot-stops",
                kinds,
                series,
                x_label="stop condition",
                y_label="traces",
                integer=True,
                values_on_bars=True,
            ),
        )
    )
    if env_id == "kuhn-poker":
        figures.append(_kuhn_payoff(episodes))
    return (
        f'<section id="plots"><h2>Plots</h2><div class="plots">{"".join(figures)}</div></section>'
    )


def _kuhn_payoff(episodes: list[Json]) -> str:
    """Mean payoff by the card held, one bar per seat (from trace.info card/seat)."""
    payoffs: dict[tuple[int, str], list[float]] = defaultdict(list)
    seat_names: dict[int, str] = {}
    for e in episodes:
        for t in _traces(e):
            info = _dict(t.get("info"))
            payoff = _float(_dict(t.get("rewards")).get("payoff"))
            if payoff is None:
                payoff = _float(info.get("payoff"))
            seat, card = info.get("seat"), info.get("card")
            if payoff is None or not isinstance(seat, int) or card is None:
                continue
            payoffs[(seat, str(card))].append(payoff)
            seat_names.setdefault(seat, _agent(t))
    cards = [c for c in KUHN_CARDS if any(k[1] == c for k in payoffs)]
    cards += sorted({k[1] for k in payoffs} - set(KUHN_CARDS))
    series = []
    for seat in sorted(seat_names):
        values, tips = [], []
        for card in cards:
            got = payoffs.get((seat, card), [])
            values.append(sum(got) / len(got) if got else math.nan)
            tips.append(
                f"seat {seat} · {card}: mean payoff {_num(values[-1])} over {len(got)} hands"
            )
        series.append(_Series(f"seat {seat} ({seat_names[seat]})", tuple(values), tuple(tips)))
    svg = _bar_chart(
        "plot-kuhn-payoff",
        cards,
        series,
        x_label="card held",
        y_label="mean payoff (chips)",
        values_on_bars=True,
    )
    return _figure("Kuhn poker: mean payoff by card and seat", svg)


# --- transcripts -------------------------------------------------------------------


def _episode_key(e: Json) -> tuple[int, int, str]:
    return (_int(_dict(e.get("task")).get("idx")), _int(e.get("rollout")), str(e.get("id")))


def _transcripts(episodes: list[Json], cap: int) -> str:
    shown = sorted(episodes, key=_episode_key)[: max(cap, 0)]
    note = ""
    if len(episodes) > len(shown):
        note = (
            f'<p class="warn" id="transcripts-capped">Showing the first {len(shown)} of '
            f"{len(episodes)} episodes (by task and rollout); every episode is in "
            "episodes.jsonl and counts in the tables and plots.</p>"
        )
    controls = (
        '<div id="transcript-filter" hidden><input id="filter-text" type="search" '
        'placeholder="filter: episode id, agent, stop condition…"> '
        '<label><input id="filter-bad" type="checkbox"> failed or with errors only</label> '
        '<button id="expand-all" type="button">expand all</button> '
        '<button id="collapse-all" type="button">collapse all</button></div>'
    )
    items = "".join(_episode(i, e) for i, e in enumerate(shown))
    return (
        f'<section id="transcripts"><h2>Transcripts</h2>{note}{controls}'
        f'<div class="episodes">{items}</div></section>'
    )


def _episode(i: int, e: Json) -> str:
    traces = _traces(e)
    bad = not e.get("ok") or bool(e.get("errors")) or any(t.get("errors") for t in traces)
    rewards = " · ".join(f"{_agent(t)} {_num(_float(t.get('reward')) or 0.0)}" for t in traces)
    search = " ".join(
        [str(e.get("id")), str(e.get("stop"))]
        + [f"{_agent(t)} {t.get('stop_condition')}" for t in traces]
    ).lower()
    ok = (
        '<span class="badge ok">ok</span>'
        if e.get("ok")
        else '<span class="badge bad">failed</span>'
    )
    wall = _float(_dict(e.get("timing")).get("wall_s"))
    facts = f"stop {_e(e.get('stop'))}" + (f" · {wall:.3f} s" if wall is not None else "")
    return (
        f'<details class="transcript" id="episode-{i}" data-episode-id="{_e(e.get("id"))}" '
        f'data-bad="{int(bad)}" data-search="{_e(search)}"{" open" if i == 0 else ""}>'
        f'<summary><code class="ep-id">{_e(e.get("id"))}</code> {ok} '
        f'<span class="ep-rewards">{_e(rewards)}</span></summary>'
        f'<div class="episode-body"><p class="muted">{facts}</p>'
        f"{_errors(_list(e.get('errors')), 'episode errors')}"
        f"{''.join(_trace(t) for t in traces)}</div></details>"
    )


def _trace(t: Json) -> str:
    stamp = _dict(t.get("agent"))
    usage = _dict(t.get("usage"))
    kv = {
        "reward": _num(_float(t.get("reward")) or 0.0),
        **{f"reward {k}": _shown(v) for k, v in _dict(t.get("rewards")).items()},
        **{f"metric {k}": _shown(v) for k, v in _dict(t.get("metrics")).items()},
        "stop": str(t.get("stop_condition")),
        "tokens": str(usage.get("total_tokens", 0)),
    }
    facts = "".join(f"<span><i>{_e(k)}</i> {_e(v)}</span>" for k, v in kv.items())
    info = _dict(t.get("info"))
    info_html = ""
    if info:
        info_text = json.dumps(info, default=str, ensure_ascii=False)
        info_html = f'<p class="info"><i>info</i> <code>{_clip(info_text, 2000)}</code></p>'
    messages = "".join(_message(m) for m in _list(t.get("messages")) if isinstance(m, dict))
    return (
        f'<section class="trace" data-agent="{_e(_agent(t))}"><h3>{_e(_agent(t))} '
        f"<small>{_e(stamp.get('model'))} · harness {_e(stamp.get('harness'))}</small></h3>"
        f'<div class="kv">{facts}</div>{info_html}'
        f'<div class="messages">{messages or "<p class=muted>(no messages)</p>"}</div>'
        f"{_turns(_list(t.get('turns')))}{_errors(_list(t.get('errors')), 'errors')}</section>"
    )


def _message(m: Json) -> str:
    role = str(m.get("role", "?"))
    css = role if role in ("system", "developer", "user", "assistant", "tool") else "other"
    head = _e(role)
    if role == "tool":
        head += (
            f' <span class="muted">{_e(m.get("name") or "")} {_e(m.get("tool_call_id", ""))}</span>'
        )
    body = _content(m.get("content"))
    for call in _list(m.get("tool_calls")):
        fn = _dict(_dict(call).get("function"))
        body += (
            f'<div class="tool-call"><b>call</b> <code>{_e(fn.get("name"))}</code>'
            f"<pre>{_clip(str(fn.get('arguments', '')))}</pre></div>"
        )
    if role in ("system", "developer"):
        # long and repeated in every trace: folded, its first line as the summary
        first = _text_of(m.get("content")).strip().split("\n", 1)[0]
        teaser = first[:110] + ("…" if len(first) > 110 else "")
        return (
            f'<details class="msg role-{css}"><summary><span class="role">{head}</span> '
            f'<span class="teaser">{_e(teaser)}</span></summary>{body}</details>'
        )
    return f'<div class="msg role-{css}"><div class="role">{head}</div>{body}</div>'


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(_dict(p).get("text", "")) for p in _list(content))


def _content(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return f'<pre class="text">{_clip(content)}</pre>'
    if not isinstance(content, list):
        return f'<pre class="text">{_clip(json.dumps(content, default=str))}</pre>'
    out = []
    for part in content:
        part = _dict(part)
        if part.get("type") == "image_url":
            image = part.get("image_url")
            out.append(_image(str(_dict(image).get("url") if isinstance(image, dict) else image)))
        else:
            out.append(f'<pre class="text">{_clip(str(part.get("text", "")))}</pre>')
    return "".join(out)


def _image(url: str) -> str:
    """Only an inline ``data:image/`` URL is shown; a remote one is never fetched."""
    if url.lstrip().lower().startswith("data:image/") and len(url) <= MAX_IMAGE_URL:
        return f'<img class="msg-image" alt="image from the transcript" src="{_e(url)}">'
    what = "remote image, not loaded" if len(url) <= MAX_IMAGE_URL else "image too large to inline"
    return f'<p class="remote-image"><i>{what}:</i> <code>{_clip(url, 300)}</code></p>'


def _turns(turns: list[Any]) -> str:
    if not turns:
        return ""
    rows = []
    for turn in turns:
        turn = _dict(turn)
        usage = _dict(turn.get("usage"))
        latency = _float(turn.get("latency_s"))
        error = turn.get("error")
        rows.append(
            f"<tr><td>{_e(turn.get('index', ''))}</td><td>{_e(usage.get('prompt_tokens', 0))}</td>"
            f"<td>{_e(usage.get('completion_tokens', 0))}</td>"
            f"<td>{'' if latency is None else f'{latency * 1000:.1f}'}</td>"
            f"<td>{_e(turn.get('finish_reason') or '')}</td>"
            f'<td class="error">{_clip(str(error), 500) if error else ""}</td></tr>'
        )
    return (
        '<table class="turns"><thead><tr><th>turn</th><th>prompt tok</th><th>completion tok</th>'
        "<th>latency ms</th><th>finish</th><th>error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _errors(errors: list[Any], title: str) -> str:
    if not errors:
        return ""
    items = "".join(
        f"<li><b>{_e(_dict(x).get('kind', '?'))}</b> <code>{_e(_dict(x).get('type', ''))}</code> "
        f"{_clip(str(_dict(x).get('message', x)), 4000)}</li>"
        for x in errors
    )
    return f'<div class="errors"><b>{_e(title)}</b><ul>{items}</ul></div>'


# --- inline CSS and JS (pinned by hash in the page's Content-Security-Policy) -------

_CSS = """
:root{--fg:#1d2433;--muted:#667085;--line:#e4e7ec;--bg:#f7f8fa;--card:#fff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1220px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 10px}
h3{font-size:14px;margin:0 0 6px}h3 small{color:var(--muted);font-weight:400}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
.muted{color:var(--muted)}
.facts{display:flex;flex-wrap:wrap;gap:8px}
.fact{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px 12px}
.fact span{display:block;color:var(--muted);font-size:11px;text-transform:uppercase}
.warn{background:#fff4e5;border:1px solid #f5c27a;border-radius:6px;padding:8px 12px}
.tables{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line)}
th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:right}
th[scope=row],thead th{text-align:left;font-weight:600}
td.who{text-align:left;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px}
figcaption{font-weight:600;margin-bottom:4px}
svg.plot{width:100%;height:auto;display:block}
svg .grid{stroke:#eef0f3}svg .axis{stroke:#98a2b3;fill:none}
svg text{font-size:11px;fill:#475467}svg .label{font-size:12px;fill:#1d2433}
svg .val{font-size:10px}svg .empty{text-anchor:middle;fill:#98a2b3}
#transcript-filter{margin:0 0 10px;display:flex;gap:10px;align-items:center}
#filter-text{width:320px;padding:4px 8px}
details.transcript{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:0 0 6px}
details.transcript>summary{padding:6px 12px;cursor:pointer}
.episode-body{padding:0 14px 12px;border-top:1px solid var(--line)}
.badge{border-radius:10px;padding:0 8px;font-size:12px}
.badge.ok{background:#dcfae6;color:#067647}.badge.bad{background:#fee4e2;color:#b42318}
.ep-rewards{color:var(--muted);margin-left:8px}
.trace{border-left:3px solid var(--line);padding:4px 0 4px 12px;margin:12px 0}
.kv{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12.5px;margin-bottom:6px}
.kv i,.info i{color:var(--muted);font-style:normal}.info{margin:0 0 6px;font-size:12px}
.msg{border-radius:6px;padding:6px 10px;margin:4px 0;border:1px solid transparent}
.msg .role,.msg>summary .role{font-size:11px;font-weight:700;text-transform:uppercase}
.msg>summary{cursor:pointer}.teaser{color:var(--muted)}
.msg .role .muted{text-transform:none;font-weight:400}
.role-system,.role-developer{background:#f2f4f7;border-color:#e4e7ec}
.role-user{background:#eff8ff;border-color:#b2ddff}.role-user .role{color:#175cd3}
.role-assistant{background:#ecfdf3;border-color:#abefc6}.role-assistant .role{color:#067647}
.role-tool{background:#fffaeb;border-color:#fedf89}.role-tool .role{color:#b54708}
.role-other{background:#f9f5ff;border-color:#e9d7fe}
.tool-call{margin-top:4px}.msg-image{max-width:360px;max-height:360px;display:block}
.remote-image{margin:4px 0;color:#b54708}
table.turns{font-size:12px;margin-top:6px}
.errors{background:#fef3f2;border:1px solid #fecdca;border-radius:6px;padding:6px 10px;
margin:6px 0}.errors ul{margin:4px 0 0;padding-left:18px}td.error{color:#b42318;text-align:left}
.elided{color:var(--muted);font-style:italic}
#config pre{background:var(--card);border:1px solid var(--line);padding:10px}
#config summary h2{display:inline}#config summary{cursor:pointer}
"""

_JS = """
(function () {
  var box = document.getElementById("transcript-filter");
  if (!box) return;
  box.hidden = false;
  var items = Array.prototype.slice.call(document.querySelectorAll("details.transcript"));
  var text = document.getElementById("filter-text");
  var bad = document.getElementById("filter-bad");
  function apply() {
    var q = text.value.toLowerCase();
    items.forEach(function (d) {
      d.hidden = !((!q || d.dataset.search.indexOf(q) >= 0) &&
                   (!bad.checked || d.dataset.bad === "1"));
    });
  }
  function openAll(open) {
    items.forEach(function (d) { if (!d.hidden) d.open = open; });
  }
  text.addEventListener("input", apply);
  bad.addEventListener("change", apply);
  document.getElementById("expand-all").onclick = function () { openAll(true); };
  document.getElementById("collapse-all").onclick = function () { openAll(false); };
})();
"""
