"""The report's per-turn reward chart and transcript column (``Trace.record_turn_reward``),
drawn from runs made by the real CLI."""

from __future__ import annotations

import html
import re
from collections import defaultdict
from pathlib import Path

import pytest

from taketurns import read_episodes
from taketurns._cli.main import main
from taketurns._report.feed import write_report

TIP = re.compile(r"<title>(\w+) · rewarded turn (\d+): mean (\S+) over (\d+)</title>")


def _eval(out: Path, *args: str) -> str:
    assert main(["eval", *args, "-o", str(out), "--no-progress"]) == 0
    return write_report(out).read_text(encoding="utf-8")


def _chart(page: str) -> str:
    found = re.search(r'<svg id="plot-turn-rewards".*?</svg>', page, re.DOTALL)
    assert found is not None
    return html.unescape(found.group())


def test_the_chart_shows_the_mean_reward_of_each_round_per_seat(tmp_path: Path) -> None:
    run = tmp_path / "pd"
    page = _eval(run, "prisoners-dilemma", "-n", "12", "--env.rounds=4")
    paid: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in read_episodes(run / "episodes.jsonl"):
        for t in e["traces"]:
            for k, r in enumerate(t["turn_rewards"], 1):
                paid[(t["agent"]["name"], k)].append(r["value"])
    seen = {
        (agent, int(k)): (float(mean), int(n)) for agent, k, mean, n in TIP.findall(_chart(page))
    }
    assert set(seen) == set(paid) == {(a, k) for a in ("player0", "player1") for k in range(1, 5)}
    for key, values in paid.items():
        mean, n = seen[key]
        assert n == len(values) == 12
        assert mean == pytest.approx(sum(values) / len(values), rel=1e-3)
    assert "rewarded turn of the trace (round)" in _chart(page)
    assert "<th>turn reward</th>" in page
    assert "<td>round 5</td>" in page or "<td>round 3</td>" in page


def test_no_chart_and_no_column_without_per_turn_rewards(tmp_path: Path) -> None:
    page = _eval(tmp_path / "kuhn", "kuhn-poker", "-n", "4")
    assert 'id="plot-turn-rewards"' not in page
    assert "turn reward" not in page
