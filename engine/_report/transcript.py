"""Per-episode transcripts for the HTML report: messages, turns, usage and errors.
Only ``data:image/...`` URLs become images; everything else is escaped text."""

from __future__ import annotations

import json
from typing import Any

from taketurns._exchange.outcome import describe_cause, record_cause
from taketurns._report.markup import (
    Json,
    agent_of,
    as_dict,
    as_float,
    as_int,
    as_list,
    clip,
    esc,
    num,
    shown,
    traces_of,
)

__all__ = ["episode_key", "render_episode", "render_transcripts", "transcripts"]

MAX_IMAGE_URL = 2_000_000  # a data: URL longer than this is not inlined


def episode_key(e: Json) -> tuple[int, int, str]:
    return (as_int(as_dict(e.get("task")).get("idx")), as_int(e.get("rollout")), str(e.get("id")))


def transcripts(episodes: list[Json], cap: int) -> str:
    """Every failed episode's transcript, and the first ``cap`` of the others (by
    task and rollout), in that order."""
    failed = [e for e in episodes if record_cause(e) is not None]
    others = sorted((e for e in episodes if record_cause(e) is None), key=episode_key)
    return render_transcripts(failed, others[: max(cap, 0)], len(others))


def render_transcripts(failed: list[Json], others: list[Json], others_total: int) -> str:
    """The transcripts section: every failed episode, then ``others`` (a selection of
    the ``others_total`` episodes that did not fail), each group by task and rollout."""
    shown = sorted(failed, key=episode_key) + sorted(others, key=episode_key)
    note = ""
    if others_total > len(others):
        which = f"the first {len(others)} of {others_total} episodes"
        if failed:
            which = f"all {len(failed)} failed episodes and {which.replace(' of ', ' of the ')}"
            which += " that did not fail"
        note = (
            f'<p class="warn" id="transcripts-capped">Showing {which} (by task and '
            "rollout); every episode is in episodes.jsonl and counts in the tables and "
            "plots.</p>"
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


def render_episode(i: int, e: Json) -> str:
    """One episode's transcript: a ``<details class="transcript" id="episode-<i>">``
    (open when ``i`` is 0), every value escaped."""
    return _episode(i, e)


def signed(value: object) -> str:
    """A reward as every table and the viewer print it (``+0.062``, issue 40: not
    ``0.0625`` here and ``+0.062`` there); ``-`` for none."""
    found = as_float(value)
    return "-" if found is None else f"{found:+.3f}"


def _reward(t: Json) -> str:
    """A trace's reward; ``-`` for one no rubric scored (a modeled user), not 0."""
    return signed(t.get("reward")) if as_dict(t.get("rewards")) else "-"


def _episode(i: int, e: Json) -> str:
    traces = traces_of(e)
    cause = record_cause(e)
    bad = cause is not None or bool(e.get("errors")) or any(t.get("errors") for t in traces)
    rewards = " · ".join(f"{agent_of(t)} {_reward(t)}" for t in traces)
    search = " ".join(
        [str(e.get("id")), str(e.get("stop"))]
        + [f"{agent_of(t)} {t.get('stop_condition')}" for t in traces]
    ).lower()
    ok = (
        '<span class="badge ok">ok</span>'
        if cause is None
        else f'<span class="badge bad">failed: {esc(describe_cause(cause))}</span>'
    )
    wall = as_float(as_dict(e.get("timing")).get("wall_s"))
    facts = f"stop {esc(e.get('stop'))}" + (f" · {wall:.3f} s" if wall is not None else "")
    return (
        f'<details class="transcript" id="episode-{i}" data-episode-id="{esc(e.get("id"))}" '
        f'data-bad="{int(bad)}" data-search="{esc(search)}"{" open" if i == 0 else ""}>'
        f'<summary><code class="ep-id">{esc(e.get("id"))}</code> {ok} '
        f'<span class="ep-rewards">{esc(rewards)}</span></summary>'
        f'<div class="episode-body"><p class="muted">{facts}</p>'
        f"{_errors(as_list(e.get('errors')), 'episode errors')}"
        f"{''.join(_trace(t) for t in traces)}</div></details>"
    )


def _trace(t: Json) -> str:
    stamp = as_dict(t.get("agent"))
    usage = as_dict(t.get("usage"))
    kv = {
        "reward": _reward(t),
        **{f"reward {k}": signed(v) for k, v in as_dict(t.get("rewards")).items()},
        **{f"metric {k}": shown(v) for k, v in as_dict(t.get("metrics")).items()},
        "stop": str(t.get("stop_condition")),
        "tokens": str(usage.get("total_tokens", 0)),
    }
    facts = "".join(f"<span><i>{esc(k)}</i> {esc(v)}</span>" for k, v in kv.items())
    info = as_dict(t.get("info"))
    info_html = ""
    if info:
        info_text = json.dumps(info, default=str, ensure_ascii=False)
        info_html = f'<p class="info"><i>info</i> <code>{clip(info_text, 2000)}</code></p>'
    messages = "".join(_message(m) for m in as_list(t.get("messages")) if isinstance(m, dict))
    return (
        f'<section class="trace" data-agent="{esc(agent_of(t))}"><h3>{esc(agent_of(t))} '
        f"<small>{esc(stamp.get('model'))} · harness {esc(stamp.get('harness'))}</small></h3>"
        f'<div class="kv">{facts}</div>{info_html}'
        f'<div class="messages">{messages or "<p class=muted>(no messages)</p>"}</div>'
        f"{_turns(as_list(t.get('turns')), _paid(t))}{_judge_calls(as_list(t.get('judge_calls')))}"
        f"{_errors(as_list(t.get('errors')), 'errors')}</section>"
    )


def _message(m: Json) -> str:
    role = str(m.get("role", "?"))
    css = role if role in ("system", "developer", "user", "assistant", "tool") else "other"
    head = esc(role)
    if role == "tool":
        name, call_id = esc(m.get("name") or ""), esc(m.get("tool_call_id", ""))
        head += f' <span class="muted">{name} {call_id}</span>'
    body = _content(m.get("content"))
    for call in as_list(m.get("tool_calls")):
        fn = as_dict(as_dict(call).get("function"))
        body += (
            f'<div class="tool-call"><b>call</b> <code>{esc(fn.get("name"))}</code>'
            f"<pre>{clip(str(fn.get('arguments', '')))}</pre></div>"
        )
    if role in ("system", "developer"):
        # long and repeated in every trace: folded, its first line as the summary
        first = _text_of(m.get("content")).strip().split("\n", 1)[0]
        teaser = first[:110] + ("…" if len(first) > 110 else "")
        return (
            f'<details class="msg role-{css}"><summary><span class="role">{head}</span> '
            f'<span class="teaser">{esc(teaser)}</span></summary>{body}</details>'
        )
    return f'<div class="msg role-{css}"><div class="role">{head}</div>{body}</div>'


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    return " ".join(str(as_dict(p).get("text", "")) for p in as_list(content))


def _content(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return f'<pre class="text">{clip(content)}</pre>'
    if not isinstance(content, list):
        return f'<pre class="text">{clip(json.dumps(content, default=str))}</pre>'
    out = []
    for part in content:
        part = as_dict(part)
        if part.get("type") == "image_url":
            image = part.get("image_url")
            out.append(_image(str(as_dict(image).get("url") if isinstance(image, dict) else image)))
        else:
            out.append(f'<pre class="text">{clip(str(part.get("text", "")))}</pre>')
    return "".join(out)


def _image(url: str) -> str:
    """Only an inline ``data:image/`` URL is shown; a remote one is never fetched."""
    if url.lstrip().lower().startswith("data:image/") and len(url) <= MAX_IMAGE_URL:
        return f'<img class="msg-image" alt="image from the transcript" src="{esc(url)}">'
    what = "remote image, not loaded" if len(url) <= MAX_IMAGE_URL else "image too large to inline"
    return f'<p class="remote-image"><i>{what}:</i> <code>{clip(url, 300)}</code></p>'


def _paid(t: Json) -> dict[object, str]:
    """The per-turn rewards of trace ``t`` as text, by turn index."""
    paid: dict[object, list[str]] = {}
    for r in as_list(t.get("turn_rewards")):
        r = as_dict(r)
        paid.setdefault(r.get("turn"), []).append(f"{r.get('name')} {shown(r.get('value'))}")
    return {turn: ", ".join(texts) for turn, texts in paid.items()}


def _turns(turns: list[Any], paid: dict[object, str]) -> str:
    if not turns:
        return ""
    rows = []
    for turn in turns:
        turn = as_dict(turn)
        usage = as_dict(turn.get("usage"))
        latency = as_float(turn.get("latency_s"))
        error = turn.get("error")
        rows.append(
            f"<tr><td>{esc(turn.get('index', ''))}</td>"
            f"<td>{esc(usage.get('prompt_tokens', 0))}</td>"
            f"<td>{esc(usage.get('completion_tokens', 0))}</td>"
            f"<td>{'' if latency is None else f'{latency * 1000:.1f}'}</td>"
            f"<td>{esc(turn.get('finish_reason') or '')}</td>"
            + (f"<td>{esc(paid.get(turn.get('index'), ''))}</td>" if paid else "")
            + f'<td class="error">{clip(str(error), 500) if error else ""}</td></tr>'
        )
    return (
        '<table class="turns"><thead><tr><th>turn</th><th>prompt tok</th><th>completion tok</th>'
        f"<th>latency ms</th><th>finish</th>{'<th>turn reward</th>' if paid else ''}"
        "<th>error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _judge_calls(calls: list[Any]) -> str:
    """The LLM judges' verdicts on the trace (not the agent's turns)."""
    if not calls:
        return ""
    rows = []
    for call in calls:
        call = as_dict(call)
        score = as_float(call.get("score"))
        rows.append(
            f"<tr><td>{esc(call.get('judge', ''))}</td><td>{esc(call.get('model', ''))}</td>"
            f"<td>{'' if score is None else num(score)}</td>"
            f"<td>{'yes' if call.get('cached') else ''}</td>"
            f"<td>{clip(str(call.get('response') or ''), 500)}</td>"
            f'<td class="error">{clip(str(call.get("error") or ""), 500)}</td></tr>'
        )
    return (
        '<table class="turns judge-calls"><thead><tr><th>judge</th><th>model</th>'
        "<th>score</th><th>cached</th><th>reply</th><th>error</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _errors(errors: list[Any], title: str) -> str:
    if not errors:
        return ""
    items = "".join(_error(x) for x in errors)
    return f'<div class="errors"><b>{esc(title)}</b><ul>{items}</ul></div>'


def _error(error: Any) -> str:
    """One error: kind, type, message, where (file:line) and its traceback (folded;
    records written before tracebacks were kept have none)."""
    x = as_dict(error)
    where = x.get("where")
    tb = x.get("traceback")
    return (
        f"<li><b>{esc(x.get('kind', '?'))}</b> <code>{esc(x.get('type', ''))}</code> "
        f"{clip(str(x.get('message', error)), 4000)}"
        + (f' <span class="where">at <code>{esc(where)}</code></span>' if where else "")
        + (
            f'<details class="traceback"><summary>traceback</summary><pre>{clip(str(tb))}</pre>'
            "</details>"
            if tb
            else ""
        )
        + "</li>"
    )


# --- inline CSS and JS (pinned by hash in the page's Content-Security-Policy) -------
