"""``taketurns view`` over real run directories, on a real server (hypercorn on an
ephemeral loopback port): the JSON API, live reading, the state of a run, safety
(path traversal, symlinks out, the Host guard, escaping). The pages in a real
browser: tests/test_view_browser.py."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from viewruns import IMAGE, SCRIPT, eval_run, hostile_run

from taketurns._cli.main import main
from taketurns._view import lines as lines_module
from taketurns._view import pages
from taketurns._view.filters import EpisodeFilter
from taketurns._view.library import Library
from taketurns._view.lines import LineIndex
from taketurns._view.run import FINISHED, INTERRUPTED, RUNNING
from taketurns._view.server import is_loopback, serve


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return eval_run(tmp_path_factory.mktemp("view") / "finished")


@pytest.fixture
def runs(finished: Path, tmp_path: Path) -> Path:
    """A folder of runs: ``a`` (finished), ``b`` (finished, markup in its first
    episode), ``c`` (a copy of ``a`` to be written to), and ``outside``: a symlink to
    a run directory outside the folder (never listed nor served)."""
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copytree(finished, root / "a")
    hostile_run(finished, root / "b")
    shutil.copytree(finished, root / "c")
    os.symlink(finished, root / "outside")
    return root


@pytest.fixture
async def viewer(runs: Path) -> AsyncIterator[tuple[str, httpx2.AsyncClient]]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve([runs], port=0, task_status=task_status)
        )
        async with httpx2.AsyncClient(base_url=url, timeout=20) as http:
            yield url, http
        nursery.cancel_scope.cancel()


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]


# --- the line index -----------------------------------------------------------------------


def test_line_index_reads_only_what_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":22}\n{"c":3')  # the last line is being written
    index = LineIndex(path)
    reads: list[tuple[int, int]] = []
    real = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        reads.append((n, offset))
        return real(fd, n, offset)

    monkeypatch.setattr(lines_module.os, "pread", spy)
    assert index.extend()
    assert list(index.read(0, 10)) == [(0, b'{"a":1}'), (1, b'{"b":22}')]
    with path.open("ab") as f:
        f.write(b'33}\n{"d":4}\n')
    reads.clear()
    assert index.extend()
    # only the new bytes: the half line's start was searched already (no newline)
    assert reads == [(len(b'33}\n{"d":4}\n'), len(b'{"a":1}\n{"b":22}\n{"c":3'))]
    assert [raw for _, raw in index.read(1, 4)] == [b'{"b":22}', b'{"c":333}', b'{"d":4}']
    assert index.generation == 0
    # a resume tidies the file: a new one is renamed into place; the index starts over
    tmp = tmp_path / "new"
    tmp.write_bytes(b'{"e":5}\n')
    tmp.replace(path)
    index.extend()
    assert index.generation == 1
    assert list(index.read(0, 10)) == [(0, b'{"e":5}')]


def test_a_line_longer_than_a_step_is_indexed_reading_each_byte_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "episodes.jsonl"
    long = b'{"a":"' + b"x" * 1000 + b'"}'
    path.write_bytes(b'{"b":1}\n' + long + b'\n{"c":2}\n' + long + b"\n" + long[:300])
    index = LineIndex(path)
    reads: list[tuple[int, int]] = []
    real = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        reads.append((n, offset))
        return real(fd, n, offset)

    monkeypatch.setattr(lines_module.os, "pread", spy)
    steps = 0
    while not index.extend(limit=64):
        steps += 1
        assert steps < 100, "the index never got past the long line"
    assert [raw for _, raw in index.read(0, 10)] == [b'{"b":1}', long, b'{"c":2}', long]
    assert all(n <= 64 for n, _ in reads)  # bounded memory: one step at a time
    assert sum(n for n, _ in reads) == path.stat().st_size  # no byte read twice
    with path.open("ab") as f:  # the half-written last line is finished
        f.write(long[300:] + b"\n")
    while not index.extend(limit=64):
        pass
    assert [raw for _, raw in index.read(3, 10)] == [long, long]


async def test_a_record_longer_than_the_index_step_is_served(runs: Path) -> None:
    path = runs / "c" / "episodes.jsonl"
    lines = path.read_bytes().splitlines()
    record = json.loads(lines[1])
    record["info"]["pad"] = "x" * (lines_module.CHUNK + (1 << 20))  # a long agent trace
    lines[1] = json.dumps(record).encode()
    path.write_bytes(b"\n".join(lines) + b"\n")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve([runs], port=0, task_status=task_status)
        )
        async with httpx2.AsyncClient(base_url=url, timeout=20) as http:
            with trio.fail_after(30):
                page = (await http.get("/api/runs/c/episodes", params={"limit": 3})).json()
                assert [e["line"] for e in page["episodes"]] == [0, 1, 2]
                assert page["episodes"][1]["record"]["info"]["pad"] == record["info"]["pad"]
                shown = await http.get("/run/c/episode/3")  # line 3 counted from 1 (issue 40)
                assert shown.status_code == 200
        nursery.cancel_scope.cancel()


# --- filters ------------------------------------------------------------------------------


def test_filters_by_agent_stop_cause_reward_and_text(finished: Path) -> None:
    records = _lines(finished)
    rewards = [r["traces"][0]["reward"] for r in records]
    top = max(rewards)

    def count(**args: str) -> int:
        flt = EpisodeFilter.from_args(args)
        return sum(flt.matches(r) for r in records)

    assert count() == len(records)
    assert count(agent="player0", min_reward=str(top)) == rewards.count(top)
    assert count(agent="nobody") == 0
    assert count(stop="user_closed") == len(records)
    assert count(stop="max_turns") == 0
    assert count(cause="ok") == len(records)
    assert count(cause="failed") == 0
    first = records[0]["traces"][0]["task"]["system_prompt"][:40]
    assert count(q=first.upper()) >= 1
    assert count(q="no such text anywhere") == 0
    with pytest.raises(ValueError, match="min_reward='x': not a number"):
        EpisodeFilter.from_args({"min_reward": "x"})


@given(st.text(min_size=1, max_size=30), st.data())
def test_the_raw_line_test_never_drops_a_match(text: str, data: st.DataObject) -> None:
    record = {"traces": [{"messages": [{"role": "assistant", "content": f"say {text}!"}]}]}
    start = data.draw(st.integers(0, len(text) - 1))
    needle = text[start : data.draw(st.integers(start + 1, len(text)))]
    flt = EpisodeFilter(text=needle)
    raw = json.dumps(record, ensure_ascii=False).encode()
    if flt.matches(record):
        assert flt.may_match(raw)


# --- reading a run ---------------------------------------------------------------------------


async def test_a_tidied_file_is_read_again_from_its_start(runs: Path) -> None:
    library = Library([runs])
    library.discover()
    library.refresh()
    run = library.get("c")
    assert run is not None
    run.wanted = True
    while await run.follow(1.0):
        pass
    assert (run.tally.episodes, run.scanned) == (12, 12)
    path = runs / "c" / "episodes.jsonl"
    kept = path.read_bytes().splitlines(keepends=True)[:5]
    tidied = path.with_suffix(".tmp")
    tidied.write_bytes(b"".join(kept))
    tidied.replace(path)  # as a resume's tidy replaces it (RunDir.tidy)
    while await run.follow(1.0):
        pass
    assert (run.tally.episodes, run.scanned, len(run.index)) == (5, 5, 5)
    assert run.scan.episodes == 5
    first = json.loads(kept[0])["id"]
    assert run.tally.newest[0]["id"] == first


# --- state --------------------------------------------------------------------------------


def test_state_running_finished_interrupted(runs: Path) -> None:
    library = Library([runs])
    library.discover()
    library.refresh()
    run = library.get("c")
    assert run is not None
    assert run.state == FINISHED
    fd = os.open(runs / "c" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a writing eval holds it
        library.refresh()
        assert run.state == RUNNING
    finally:
        os.close(fd)
    library.refresh()
    assert run.state == FINISHED
    summary = json.loads((runs / "c" / "summary.json").read_text())
    (runs / "c" / "summary.json").write_text(json.dumps({**summary, "interrupted": True}))
    library.refresh()
    assert run.state == INTERRUPTED
    (runs / "c" / "summary.json").unlink()  # killed before it wrote its summary
    library.refresh()
    assert run.state == INTERRUPTED


# --- the API ---------------------------------------------------------------------------------


async def test_api_runs_summary_and_episodes(
    viewer: tuple[str, httpx2.AsyncClient], runs: Path
) -> None:
    _, http = viewer
    found = (await http.get("/api/runs")).json()["runs"]
    by_id = {r["id"]: r for r in found}
    assert set(by_id) == {"a", "b", "c"}
    a = by_id["a"]
    summary = json.loads((runs / "a" / "summary.json").read_text())
    assert (a["env"], a["state"], a["planned"], a["episodes"]) == ("kuhn-poker", FINISHED, 12, 12)
    assert a["models"] == {"player0": ["builtin/bracket"], "player1": ["builtin/bracket"]}
    assert a["agents"]["player0"]["reward_ci95"] == summary["agents"]["player0"]["reward_ci95"]
    got = (await http.get("/api/runs/a/summary")).json()
    assert got["summary"] == summary
    page = (await http.get("/api/runs/a/episodes", params={"offset": 3, "limit": 4})).json()
    stored = _lines(runs / "a")
    assert [e["line"] for e in page["episodes"]] == [3, 4, 5, 6]
    assert [e["record"] for e in page["episodes"]] == stored[3:7]
    assert (page["next"], page["total"]) == (7, 12)
    last = (await http.get("/api/runs/a/episodes", params={"offset": 10})).json()
    assert ([e["line"] for e in last["episodes"]], last["next"]) == ([10, 11], None)
    failed = (await http.get("/api/runs/b/episodes", params={"cause": "failed"})).json()
    assert [e["line"] for e in failed["episodes"]] == [0]
    bogus = await http.get("/api/runs/a/episodes", params={"cause": "modle"})
    assert bogus.status_code == 400
    assert "cause='modle': not a cause; did you mean 'model'?" in bogus.json()["error"]
    bad = await http.get("/api/runs/a/episodes", params={"limit": 0})
    assert bad.status_code == 400
    assert "limit=0: must be between 1 and 500" in bad.json()["error"]
    missing = await http.get("/api/runs/zzz/summary")
    assert missing.status_code == 404
    assert "no run 'zzz'" in missing.json()["error"]
    compared = (await http.get("/api/compare", params=[("run", "a"), ("run", "c")])).json()
    assert compared["pairs"][0]["agents"]["player0"]["diff"] == 0.0
    assert (await http.post("/api/runs")).status_code == 405


async def test_live_count_rises_as_episodes_are_appended(
    viewer: tuple[str, httpx2.AsyncClient], runs: Path
) -> None:
    url, http = viewer
    path = runs / "c" / "episodes.jsonl"
    stored = path.read_bytes().splitlines(keepends=True)
    fd = os.open(runs / "c" / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a writer: the run is running
    try:
        path.write_bytes(b"".join(stored[:4]))
        seen: list[int] = []
        events = _events(url, "/api/runs/c/events")
        with trio.fail_after(20):
            async with contextlib.aclosing(events):
                async for data in events:
                    seen.append(data["episodes"])
                    if data["state"] == RUNNING and data["episodes"] == 4:
                        with path.open("ab") as f:  # two more, and half of a third
                            f.write(b"".join(stored[4:6]) + stored[6][:50])
                    if data["episodes"] == 6:
                        break
        assert seen[-1] == 6
        assert (await http.get("/api/runs/c")).json()["lines"] == 6
    finally:
        os.close(fd)


async def _events(url: str, path: str) -> AsyncIterator[dict[str, Any]]:
    """The data of each server-sent event of ``GET path``, read off a plain TCP stream
    (an endless stream: a client's generator would be left unexhausted)."""
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        await stream.send_all(request.encode())
        buffer = b""
        while True:
            chunk = await stream.receive_some()
            assert chunk, "the event stream ended"
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            for line in done:
                if line.startswith(b"data: "):
                    yield json.loads(line[6:])


# --- safety ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/run/..%2F..%2F..%2Fetc%2Fpasswd",
        "/run/%2e%2e%2f%2e%2e%2fetc/figures",
        "/run/a/..%2F..%2F..%2Fetc%2Fpasswd",
        "/api/runs/..%2F..%2Fetc%2Fpasswd/summary",
        "/api/runs/%2E%2E/episodes",
        "/static/..%2F..%2F..%2Fetc%2Fpasswd",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/run/outside",
        "/api/runs/outside/summary",
        "/api/runs/a~..~..~etc/summary",
    ],
)
async def test_nothing_outside_the_folders_is_served(
    viewer: tuple[str, httpx2.AsyncClient], path: str
) -> None:
    _, http = viewer
    got = await http.get(path)
    assert got.status_code == 404, got.text[:300]
    assert "root:" not in got.text
    assert "outside" not in {r["id"] for r in (await http.get("/api/runs")).json()["runs"]}


async def test_a_file_linked_out_of_a_run_is_not_read(
    viewer: tuple[str, httpx2.AsyncClient], runs: Path, tmp_path: Path
) -> None:
    _, http = viewer
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps(_lines(runs / "a")[0] | {"id": "SECRET"}) + "\n")
    (runs / "c" / "episodes.jsonl").unlink()
    os.symlink(secret, runs / "c" / "episodes.jsonl")
    page = (await http.get("/api/runs/c/episodes")).json()
    assert page["episodes"] == []
    assert "SECRET" not in (await http.get("/run/c")).text


async def test_another_host_name_is_refused(viewer: tuple[str, httpx2.AsyncClient]) -> None:
    _, http = viewer
    assert (await http.get("/api/runs", headers={"Host": "evil.example:80"})).status_code == 421
    assert (await http.get("/api/runs")).status_code == 200


async def test_model_written_markup_is_escaped(viewer: tuple[str, httpx2.AsyncClient]) -> None:
    _, http = viewer
    page = await http.get("/run/b", params={"cause": "failed"})
    assert page.status_code == 200
    assert "window.__xss" in page.text
    assert SCRIPT not in page.text
    assert IMAGE not in page.text
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    episode = await http.get("/run/b/episode/1")  # the first line (issue 40)
    assert SCRIPT not in episode.text
    assert "&lt;script&gt;" in episode.text


# --- the command ----------------------------------------------------------------------------


def test_view_refuses_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path / "nowhere")]) == 2
    assert f"view: {tmp_path / 'nowhere'} is not a folder" in capsys.readouterr().err


def test_view_names_a_port_it_cannot_listen_on(runs: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "taketurns", "view", str(runs), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    line = (
        f"view --host/--port: cannot listen on 127.0.0.1:{port} ([Errno 98] Address already in use)"
    )
    assert line in proc.stderr


def test_a_host_beyond_loopback_is_warned_about(runs: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "taketurns", "view", str(runs), "--host", "203.0.113.1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "warning: --host 203.0.113.1 is not a loopback address" in proc.stderr
    assert proc.returncode == 2  # (and nothing listens: the address is not this machine's)
    assert "cannot listen on 203.0.113.1:8765" in proc.stderr


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.2", "::", "example.com"))


async def test_a_running_runs_page_shows_one_count_and_one_interval(runs: Path) -> None:
    """Issue 40: the live header (``DONE 69 ... ≈[...]``) and the summary table
    (``episodes 50 ... [...]``) disagreed on a running run. The header keeps the live
    counts and means, the table the run's one (bootstrap) interval."""
    library = Library([runs])
    library.discover()
    fd = os.open(runs / "c" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a writer: the run is running
        library.refresh()
        run = library.get("c")
        assert run is not None
        assert run.state == RUNNING
        while await run.follow(10):  # True: more to read
            pass
        page = pages.live_facts(run) + pages.figures(run, await run.summary())
    finally:
        os.close(fd)
    assert page.count('data-fact="done"') == 1
    assert "summary-episodes" not in page  # no second count, lagging or not
    assert 'class="ci"' not in page  # no live ≈[...] beside the table's interval
    assert page.count('data-stat="reward_ci95"') == 2  # one interval per agent


async def test_an_episode_url_and_its_label_count_lines_alike(
    viewer: tuple[str, httpx2.AsyncClient],
) -> None:
    """Issue 40: ``/episode/0`` was labelled "line 1"; both now count from 1."""
    _, http = viewer
    first = await http.get("/run/a/episode/1")
    assert first.status_code == 200
    assert "<title>a line 1" in first.text
    assert (await http.get("/run/a/episode/0")).status_code == 404
