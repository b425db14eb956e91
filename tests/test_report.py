"""``_report.page``: report.html as written (its HTML) and as headless Chromium renders it.

Every run directory here is produced by the real CLI; the HTML is read back with the
standard library's parser, so the tests see elements, not substrings.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter, defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import attrs
import pytest

from taketurns import read_episodes
from taketurns._cli.main import main
from taketurns._errors import ConfigError
from taketurns._output.summary import summarize
from taketurns._report.feed import write_report
from taketurns._view.tally import Tally

APT_INSTALL = "apt-get install -y chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
PLOTS = ("plot-reward", "plot-turns", "plot-stops")


# --- reading the HTML back -----------------------------------------------------------


@attrs.define(eq=False)
class El:
    tag: str
    attrs: dict[str, str]
    ancestors: tuple[El, ...]
    chunks: list[str] = attrs.field(factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Doc(HTMLParser):
    VOID = frozenset(
        [
            *("area", "base", "br", "col", "embed", "hr", "img"),
            *("input", "link", "meta", "source", "track", "wbr"),
        ]
    )

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[El] = []
        self._open: list[El] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = El(tag, {k: v or "" for k, v in attrs}, tuple(self._open))
        self.elements.append(el)
        if tag not in self.VOID:
            self._open.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(El(tag, {k: v or "" for k, v in attrs}, tuple(self._open)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        for el in self._open:
            el.chunks.append(data)

    def by_id(self, id_: str) -> El:
        found = [el for el in self.elements if el.attrs.get("id") == id_]
        assert len(found) == 1, f"expected one element #{id_}, found {len(found)}"
        return found[0]

    def has_id(self, id_: str) -> bool:
        return any(el.attrs.get("id") == id_ for el in self.elements)

    def select(self, tag: str | None = None, cls: str | None = None, within: El | None = None):
        return [
            el
            for el in self.elements
            if (tag is None or el.tag == tag)
            and (cls is None or cls in el.classes)
            and (within is None or within in el.ancestors)
        ]


def _report(run: Path, **kwargs: Any) -> tuple[str, Doc]:
    text = write_report(run, **kwargs).read_text(encoding="utf-8")
    return text, Doc(text)


def _bar_counts(doc: Doc, plot_id: str) -> dict[str, Counter[str]]:
    """{series: {category: count}} from the bars' tooltips ("series · category: n")."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for title in doc.select("title", within=doc.by_id(plot_id)):
        series, _, rest = title.text.partition(" · ")
        category, _, value = rest.rpartition(": ")
        counts[series][category] += int(value)
    return counts


# --- run directories made by the real CLI ----------------------------------------------


def _eval(out: Path, *args: str) -> Path:
    assert main(["eval", *args, "-o", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def kuhn_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _eval(tmp_path_factory.mktemp("kuhn") / "run", "kuhn-poker", "-n", "20")


@pytest.fixture
def kuhn_copy(kuhn_run: Path, tmp_path: Path) -> Path:
    """A private copy of the kuhn run, for tests that edit it."""
    return Path(shutil.copytree(kuhn_run, tmp_path / "run"))


def _episodes(run: Path) -> list[dict[str, Any]]:
    return list(read_episodes(run / "episodes.jsonl"))


def _rewrite(run: Path, episodes: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(e) + "\n" for e in episodes)
    (run / "episodes.jsonl").write_text(lines, encoding="utf-8")


# --- the HTML ---------------------------------------------------------------------------


def test_report_is_self_contained(kuhn_run: Path) -> None:
    text, doc = _report(kuhn_run)
    assert (kuhn_run / "report.html").is_file()
    # nothing to fetch: no external script, stylesheet, image, font or frame
    for el in doc.elements:
        for name in ("src", "href"):
            assert not el.attrs.get(name, "data:").startswith(("http", "//", "file")), el
    assert not doc.select("link")
    assert not doc.select("iframe")
    assert "@import" not in text
    assert "url(" not in text
    [csp] = [
        m for m in doc.select("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"
    ]
    assert "default-src 'none'" in csp.attrs["content"]
    assert "img-src data:" in csp.attrs["content"]
    header = doc.by_id("header").text
    for fact in ("kuhn-poker", "builtin/bracket", "20", "wall time"):
        assert fact in header


def test_plots_count_every_trace(kuhn_run: Path) -> None:
    _, doc = _report(kuhn_run)
    for plot_id in (*PLOTS, "plot-kuhn-payoff"):
        svg = doc.by_id(plot_id)
        assert svg.tag == "svg"
        assert doc.select("rect", cls="bar", within=svg), plot_id
        assert doc.select("path", cls="axis", within=svg), plot_id
    episodes = _episodes(kuhn_run)
    rewards: dict[str, Counter[str]] = defaultdict(Counter)
    turns: dict[str, Counter[str]] = defaultdict(Counter)
    for e in episodes:
        for t in e["traces"]:
            rewards[t["agent"]["name"]][f"{t['reward']:g}"] += 1
            turns[t["agent"]["name"]][str(len(t["turns"]))] += 1
    assert _bar_counts(doc, "plot-reward") == rewards
    assert _bar_counts(doc, "plot-turns") == turns
    summary = json.loads((kuhn_run / "summary.json").read_text())
    stops = {a: Counter(s["stop_conditions"]) for a, s in summary["agents"].items()}
    assert _bar_counts(doc, "plot-stops") == stops


def test_kuhn_payoff_by_card_and_seat(kuhn_run: Path) -> None:
    _, doc = _report(kuhn_run)
    payoffs: dict[tuple[int, str], list[float]] = defaultdict(list)
    for e in _episodes(kuhn_run):
        for t in e["traces"]:
            payoffs[(t["info"]["seat"], t["info"]["card"])].append(t["rewards"]["payoff"])
    pattern = re.compile(r"seat (\d) · (\w): mean payoff (\S+) over (\d+) hands")
    seen = {}
    for title in doc.select("title", within=doc.by_id("plot-kuhn-payoff")):
        seat, card, mean, n = pattern.fullmatch(title.text).groups()  # type: ignore[union-attr]
        seen[(int(seat), card)] = (float(mean), int(n))
    # a seat/card with a zero mean payoff draws no bar
    assert set(seen) == {key for key, values in payoffs.items() if sum(values) != 0}
    for key, values in payoffs.items():
        if sum(values) == 0:
            continue
        mean, n = seen[key]
        assert n == len(values)
        assert mean == pytest.approx(sum(values) / len(values), rel=1e-3)


def test_kuhn_plot_only_for_kuhn(tmp_path: Path) -> None:
    run = _eval(tmp_path / "sort", "alphabet-sort", "-n", "2")
    _, doc = _report(run)
    assert not doc.has_id("plot-kuhn-payoff")
    for plot_id in PLOTS:
        assert doc.select("rect", cls="bar", within=doc.by_id(plot_id))
    assert doc.select("details", cls="transcript")


def test_the_reward_plot_leaves_out_agents_without_rewards(tmp_path: Path) -> None:
    """user-sim's modeled user is not scored: it has turns, but no reward to plot."""
    run = _eval(tmp_path / "sim", "user-sim", "--env.taskset=retail-lite", "-n", "2")
    _, doc = _report(run)
    assert set(_bar_counts(doc, "plot-reward")) == {"assistant"}
    assert set(_bar_counts(doc, "plot-turns")) == {"assistant", "user"}


def test_a_seat_without_rewards_has_no_mean_anywhere(tmp_path: Path) -> None:
    """user-sim's modeled user is never scored: its reward is absent (None) in
    summary.json, not a 0.0 with an interval [0, 0]; the report's table, each
    transcript and the viewer's live means show "-" for it (as the terminal does)."""
    run = _eval(tmp_path / "sim", "user-sim", "--env.taskset=retail-lite", "-n", "2")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    user, assistant = summary["agents"]["user"], summary["agents"]["assistant"]
    assert (user["reward_mean"], user["reward_stderr"], user["reward_ci95"]) == (None,) * 3
    assert user["traces"] == 2
    assert assistant["reward_mean"] is not None
    _, doc = _report(run)
    cells = doc.select("td", within=doc.by_id("summary-agents"))
    assert not [
        td
        for td in cells
        if td.attrs.get("data-agent") == "user"
        and td.attrs.get("data-stat") in ("reward_mean", "reward_ci95")
    ]
    facts = [
        el.text for el in doc.select("span", within=doc.select("details", cls="transcript")[0])
    ]
    assert "reward -" in facts  # the user's trace
    tally = Tally()
    for i, line in enumerate((run / "episodes.jsonl").read_text(encoding="utf-8").splitlines()):
        tally.add(i, json.loads(line))
    live = tally.agents()
    assert live["user"] == {
        "traces": 2,
        "reward_mean": None,
        "reward_stderr": None,
        "reward_ci95": None,
    }
    assert all("user" not in e["rewards"] for e in tally.newest)


def _table_stats(doc: Doc) -> dict[tuple[str, str], float]:
    return {
        (td.attrs["data-agent"], td.attrs["data-stat"]): float(td.attrs["data-value"])
        for td in doc.select("td", within=doc.by_id("summary-agents"))
        if "data-stat" in td.attrs and td.attrs["data-stat"] != "reward_ci95"  # two numbers
    }


def _summary_stats(summary: dict[str, Any]) -> dict[tuple[str, str], float]:
    out = {}
    for agent, stats in summary["agents"].items():
        for key, value in stats.items():
            if key in ("reward_stderr", "reward_ci95"):
                continue  # beside the mean, in the reward cell; the interval: its own row
            if isinstance(value, dict):
                out.update({(agent, f"{key}.{k}"): float(v) for k, v in value.items()})
            else:
                out[(agent, key)] = float(value)
    return out


def test_summary_tables_match_summary_json(kuhn_run: Path) -> None:
    _, doc = _report(kuhn_run)
    summary = json.loads((kuhn_run / "summary.json").read_text())
    assert _table_stats(doc) == _summary_stats(summary)
    for agent, stats in summary["agents"].items():
        [cell] = [
            td
            for td in doc.select("td", within=doc.by_id("summary-agents"))
            if td.attrs.get("data-agent") == agent and td.attrs.get("data-stat") == "reward_mean"
        ]
        assert float(cell.attrs["data-stderr"]) == stats["reward_stderr"]
        assert cell.text == f"{stats['reward_mean']:+.3f} ± {stats['reward_stderr']:.3f}"
        [ci] = [
            td
            for td in doc.select("td", within=doc.by_id("summary-agents"))
            if td.attrs.get("data-agent") == agent and td.attrs.get("data-stat") == "reward_ci95"
        ]
        low, high = stats["reward_ci95"]
        assert low <= stats["reward_mean"] <= high
        assert (float(ci.attrs["data-low"]), float(ci.attrs["data-high"])) == (low, high)
        assert ci.text == f"[{low:+.3f}, {high:+.3f}]"
    episodes = {
        td.attrs["data-stat"]: td.attrs["data-value"]
        for td in doc.select("td", within=doc.by_id("summary-episodes"))
    }
    assert episodes["episodes"] == "20"
    assert episodes["ok"] == str(summary["ok"])
    assert episodes["failed"] == str(summary["failed"])


def test_pass_at_k_rows_with_rollouts(tmp_path: Path) -> None:
    run = _eval(tmp_path / "r", "kuhn-poker", "-n", "3", "-r", "3")
    _, doc = _report(run)
    summary = json.loads((run / "summary.json").read_text())
    stats = _table_stats(doc)
    assert stats == _summary_stats(summary)
    assert {k for _, k in stats if k.startswith("pass_at_k.")} == {
        "pass_at_k.1",
        "pass_at_k.2",
        "pass_at_k.3",
    }
    assert {k for _, k in stats if k.startswith(("pass_hat_k.", "task_spread."))} == {
        *("pass_hat_k.1", "pass_hat_k.2", "pass_hat_k.3"),
        *("task_spread.sd_mean", "task_spread.sd_max", "task_spread.mixed", "task_spread.tasks"),
    }
    labels = [th.text for th in doc.select("th", within=doc.by_id("summary-agents"))]
    assert {"reward: bootstrap 95% CI", "pass^3", "tasks mixed pass/fail"} <= set(labels)


def test_summary_recomputed_when_missing(kuhn_copy: Path) -> None:
    (kuhn_copy / "summary.json").unlink()
    with (kuhn_copy / "episodes.jsonl").open("a") as f:
        f.write('{"id": "torn')  # a crash mid-write
    _, doc = _report(kuhn_copy)
    summary = summarize(read_episodes(kuhn_copy / "episodes.jsonl"))
    assert summary["episodes"] == 20
    assert _table_stats(doc) == _summary_stats(summary)
    assert "wall time" not in doc.by_id("header").text  # only a live run knows it


def test_transcript_shows_messages_usage_and_errors(kuhn_copy: Path) -> None:
    episodes = _episodes(kuhn_copy)
    first = min(episodes, key=lambda e: e["task"]["idx"])
    first["traces"][0]["errors"] = [{"kind": "model", "message": "boom 503", "type": "X"}]
    first["traces"][0]["turns"][0]["error"] = "the endpoint said 503"
    _rewrite(kuhn_copy, episodes)
    _, doc = _report(kuhn_copy)
    items = doc.select("details", cls="transcript")
    assert len(items) == 20
    top = items[0]
    assert top.attrs["data-episode-id"] == first["id"]
    assert "open" in top.attrs  # the first transcript is unfolded
    traces = doc.select("section", cls="trace", within=top)
    assert [t.attrs["data-agent"] for t in traces] == ["player0", "player1"]
    for section, trace in zip(traces, first["traces"], strict=True):
        shown = doc.select(cls="msg", within=section)
        assert len(shown) == len(trace["messages"])
        for el, message in zip(shown, trace["messages"], strict=True):
            assert f"role-{message['role']}" in el.classes
            assert message["content"] in el.text
        [turns] = doc.select("table", cls="turns", within=section)
        rows = doc.select("tr", within=turns)[1:]
        assert len(rows) == len(trace["turns"])
        usage = trace["turns"][0]["usage"]
        cells = [td.text for td in doc.select("td", within=rows[0])]
        assert cells[1:3] == [str(usage["prompt_tokens"]), str(usage["completion_tokens"])]
        assert cells[4] == trace["turns"][0]["finish_reason"]
    assert "boom 503" in doc.select(cls="errors", within=traces[0])[0].text
    assert "the endpoint said 503" in doc.select("td", cls="error", within=traces[0])[0].text
    assert top.attrs["data-bad"] == "1"


def test_transcripts_are_capped(kuhn_run: Path) -> None:
    _, doc = _report(kuhn_run)
    assert not doc.has_id("transcripts-capped")
    _, doc = _report(kuhn_run, max_transcripts=5)
    items = doc.select("details", cls="transcript")
    assert [e.attrs["data-episode-id"] for e in items] == [f"kuhn-poker/{i}/0" for i in range(5)]
    assert "first 5 of 20 episodes" in doc.by_id("transcripts-capped").text
    # the cap is on transcripts only: tables and plots still count every episode
    assert sum(sum(c.values()) for c in _bar_counts(doc, "plot-reward").values()) == 40


TINY_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4"
    "z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
EVIL = "<script>alert(1)</script>"


def test_untrusted_content_is_escaped(kuhn_copy: Path) -> None:
    episodes = _episodes(kuhn_copy)
    first = min(episodes, key=lambda e: e["task"]["idx"])
    trace = first["traces"][0]
    trace["agent"]["name"] = '<img src=x onerror="alert(2)">'
    trace["messages"].append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": EVIL},
                {"type": "image_url", "image_url": {"url": "https://evil.example/x.png"}},
                {"type": "image_url", "image_url": {"url": "javascript:alert(3)"}},
                {"type": "image_url", "image_url": {"url": TINY_PNG}},
                {"type": "image_url", "image_url": {"url": 'data:image/png," onerror="alert(4)'}},
            ],
        }
    )
    trace["errors"] = [{"kind": "model", "message": EVIL, "type": "</pre><b>"}]
    trace["info"]["card"] = EVIL
    first["id"] = f"x{EVIL}"
    _rewrite(kuhn_copy, episodes)
    (kuhn_copy / "summary.json").unlink()  # recomputed: the evil agent name reaches the tables
    with (kuhn_copy / "config.toml").open("a") as f:
        f.write(f"# {EVIL}</pre>\n")
    text, doc = _report(kuhn_copy)
    assert EVIL not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert len(doc.select("script")) == 1  # ours
    assert not [el for el in doc.elements if any(k.startswith("on") for k in el.attrs)]
    assert not [el for el in doc.elements if el.tag == "img" and el.attrs.get("src") == "x"]
    sources = [img.attrs["src"] for img in doc.select("img")]
    assert TINY_PNG in sources
    assert all(src.startswith("data:image/") for src in sources)
    remote = " ".join(el.text for el in doc.select(cls="remote-image"))
    assert "https://evil.example/x.png" in remote
    assert "javascript:alert(3)" in remote
    assert not [el for el in doc.elements if "evil.example" in json.dumps(el.attrs)]
    assert EVIL in doc.by_id("config").text  # shown as text, intact
    assert "&lt;/pre&gt;&lt;b&gt;" in text  # the error's type, as text


def test_missing_run_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no episodes\.jsonl"):
        write_report(tmp_path)


# --- the page in headless Chromium ------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


def _browse(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _png_rgb(data: bytes) -> tuple[int, int, list[list[tuple[int, ...]]]]:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes) into rows of
    pixels: enough to look at a screenshot without an imaging library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    assert (depth, interlace) == (8, 0)
    assert colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    prev, rows = bytearray(stride), []
    for y in range(height):
        kind_ = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind_ == 1:
                line[i] = (line[i] + a) & 255
            elif kind_ == 2:
                line[i] = (line[i] + b) & 255
            elif kind_ == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind_ == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x : x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


@pytest.mark.slow
def test_report_renders_in_headless_chromium(kuhn_run: Path, tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.fail(f"no chromium binary on PATH; install it with: {APT_INSTALL}")
    report = write_report(kuhn_run)
    url = report.resolve().as_uri()
    dumped = _browse(binary, tmp_path / "profile-dom", "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Doc(dumped.stdout)
    for plot_id in (*PLOTS, "plot-kuhn-payoff"):
        svg = dom.by_id(plot_id)
        bars = dom.select("rect", cls="bar", within=svg)
        assert bars, plot_id
        assert all(float(r.attrs["height"]) > 0 for r in bars), plot_id
        assert dom.select("path", within=svg), plot_id
    first = min(_episodes(kuhn_run), key=lambda e: e["task"]["idx"])
    [top] = [
        d
        for d in dom.select("details", cls="transcript")
        if d.attrs["data-episode-id"] == first["id"]
    ]
    assistant = first["traces"][0]["messages"][-1]["content"]
    user = first["traces"][0]["messages"][1]["content"]
    assert user in top.text
    assert assistant in top.text
    # the filter script ran: the page's CSP admits it (by hash) and it unhid its controls
    assert "hidden" not in dom.by_id("transcript-filter").attrs

    shot = tmp_path / "report.png"
    taken = _browse(
        binary, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2000", url
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.is_file()
    assert shot.stat().st_size > 30_000
    width, height, rows = _png_rgb(shot.read_bytes())
    assert (width, height) == (1280, 2000)
    pixels = Counter(px for row in rows[::2] for px in row[::2])
    _, most = pixels.most_common(1)[0]
    assert most < 0.9 * sum(pixels.values()), "the page is (almost) one flat colour"
    assert len(pixels) > 50
    # the plots' bars are drawn in the first two palette colours
    assert pixels[(0x00, 0x72, 0xB2)] > 500
    assert pixels[(0xE6, 0x9F, 0x00)] > 500


def test_an_all_failed_runs_stop_conditions_say_why_they_are_empty(tmp_path: Path) -> None:
    """Every episode failed (the env raised): the stop-condition figure says so, not
    a bare "no data"."""
    from taketurns._cli.main import main

    env = f"{Path(__file__).with_name('buggyenv.py')}:BuggyEnv"
    out = tmp_path / "run"
    assert main(["eval", env, "-n", "3", "-o", str(out), "--no-progress"]) == 1
    page = (out / "report.html").read_text()
    assert "no data: all 3 episodes failed (failed episodes are left out)" in page


def test_a_transcript_prints_rewards_as_the_tables_do(kuhn_run: Path) -> None:
    """Issue 40: one reward printed ``0.0625`` in a transcript and ``-0.062`` in a
    table; every reward now has the tables' format (``+0.062``)."""
    _, doc = _report(kuhn_run)
    shown = [el.text for el in doc.select("span", cls="ep-rewards")]
    assert shown
    for text in shown:
        for part in text.split(" · "):
            assert re.fullmatch(r"player[01] [+-]\d+\.\d{3}", part), part
