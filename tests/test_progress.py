"""The progress line (``_output.progress``) and the results table (``summary.render``)
at the widths a newcomer's terminal has: laid out by hand at many widths, and drawn by
the real CLI under a pseudo-terminal of 80 and 120 columns."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from rich.console import Console

from taketurns._output.progress import EvalProgress, _Line
from taketurns._output.summary import render, summarize

ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|[=>78])")


def _digest(ok: bool, *agents: tuple[str, float, bool]) -> dict:
    return {
        "ok": ok,
        "traces": [
            {"agent": {"name": n, "trainable": tr}, "reward": r, "usage": {"total_tokens": 150}}
            for n, r, tr in agents
        ],
    }


def _progress(total: int = 200) -> EvalProgress:
    return EvalProgress(total, enabled=False)


def test_rewards_are_per_trainable_agent_and_failures_are_counted() -> None:
    bar = _progress()
    bar.add(_digest(True, ("player0", 1.0, True), ("player1", -1.0, True)))
    bar.add(_digest(False, ("player0", -2.0, True), ("player1", 2.0, True)))
    bar.add(_digest(True, ("player0", 1.0, True), ("player1", -1.0, True)))
    # zero-sum self-play: each seat's own mean, not the mean over both (always 0);
    # the failed episode's rewards are not the model's: left out
    assert bar.rewards() == ["player0 +1.000", "player1 -1.000"]
    bar.add(_digest(True, ("player0", 2.5, True), ("player1", -2.5, True)))
    assert bar.rewards() == ["player0 +1.500", "player1 -1.500"]
    assert bar.failed == 1
    line = _Line(bar).render(120).plain
    assert "4/200" in line
    assert "1 failed" in line
    assert "reward player0 +1.500 player1 -1.500" in line


def test_an_agent_with_no_ok_trace_shows_no_mean_not_zero() -> None:
    bar = _progress()
    bar.add(_digest(False, ("player0", 0.0, True), ("player1", 0.0, True)))
    assert bar.rewards() == ["player0 -", "player1 -"]
    assert "reward player0 - player1 -" in _Line(bar).render(120).plain
    texts, _ = _Line(bar).variants()["rewards"]
    assert texts == ["reward player0 - player1 -", "player0 - player1 -", "player0 - player1 -"]
    bar.add(_digest(True, ("player0", 0.0, True), ("player1", 0.0, True)))
    assert bar.rewards() == ["player0 +0.000", "player1 +0.000"]  # a real mean of 0


def test_an_untrained_user_is_not_shown_and_with_no_trainable_agent_the_first_is() -> None:
    bar = _progress()
    bar.add(_digest(True, ("assistant", 1.0, True), ("user", 0.0, False)))
    assert bar.rewards() == ["assistant +1.000"]
    bar = _progress()
    bar.add(_digest(True, ("judge", 0.25, False), ("other", 1.0, False)))
    assert bar.rewards() == ["judge +0.250"]


@pytest.mark.parametrize("width", [45, 60, 70, 80, 100, 120, 160])
def test_the_count_rate_and_times_show_at_every_width(width: int) -> None:
    bar = _progress(total=10_000)
    for _ in range(1234):
        bar.add(_digest(True, ("player0", 1.0, True), ("player1", -1.0, True)))
    bar._started -= 75  # 75 s in
    line = _Line(bar).render(width).plain
    assert len(line) <= width
    assert "1234/10000" in line
    assert re.search(r"\d+\.\d ep/s", line)
    assert re.search(r"1:15 eta \d+:\d\d", line), line
    if width >= 80:  # at 80 columns the rewards and the failures still fit
        assert "player0 +1.00" in line
        assert "player1 -1.00" in line
        assert re.search(r"(0 failed|✗0)", line)
    if width >= 120:  # and from 120 everything, bar included
        assert "━" in line
        assert "tok" in line


def test_the_results_table_fits_80_columns_without_cutting_a_name() -> None:
    long_metrics = {"user_turns": 8.0, "state_match_after_all_turns": 0.5, "info_match": 1.0}
    episodes = [
        {
            "ok": True,
            "stop": "done",
            "traces": [
                {
                    "agent": {"name": "assistant"},
                    "reward": 1.0,
                    "rewards": {"success": 1.0},
                    "metrics": long_metrics,
                    "stop_condition": "user_closed",
                    "turns": 8,
                    "usage": {"total_tokens": 123456},
                },
                {
                    "agent": {"name": "user"},
                    "reward": 0.0,
                    "rewards": {},
                    "metrics": {},
                    "stop_condition": "max_turns",
                    "turns": 8,
                    "usage": {"total_tokens": 1000},
                },
            ],
        }
    ] * 3
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(summarize(episodes, rollouts=2)))
    text = console.export_text()
    console.file.close()
    assert max(len(line) for line in text.splitlines()) <= 80
    for name in (*long_metrics, "success", "user_closed", "max_turns", "pass@2"):
        assert name in text, name
    assert "…" not in text
    (user_reward,) = [ln for ln in text.splitlines() if ln.startswith("│ reward ")]
    assert user_reward.rstrip(" │").endswith("-")  # the user is not scored


# --- the real CLI under a pseudo-terminal ------------------------------------------------


def _run_in_pty(columns: int, args: list[str], cwd: Path) -> str:
    """Run ``taketurns ARGS`` with a pseudo-terminal of ``columns`` as its terminal;
    return everything it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "CI")
    }
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "taketurns", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=30) == 0, b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return b"".join(chunks).decode("utf-8", errors="replace")


def _frames(drawn: str) -> list[str]:
    plain = ANSI.sub("", drawn)
    return [p for p in re.split(r"[\r\n]", plain) if " ep/s" in p]


@pytest.mark.parametrize("columns", [80, 120])
def test_the_cli_draws_count_and_time_at_80_and_120_columns(tmp_path: Path, columns: int) -> None:
    model = "--model=builtin/bracket?latency_ms=30"
    drawn = _run_in_pty(columns, ["eval", "kuhn-poker", "-n", "40", "-c", "2", model], tmp_path)
    frames = _frames(drawn)
    assert len(frames) >= 3, drawn  # redrawn while the episodes run
    for frame in frames:
        assert len(frame.rstrip()) <= columns, frame
        assert re.search(r"\b\d+/40\b", frame), frame
        assert re.search(r"\d+\.\d ep/s", frame), frame
        assert re.search(r"\d:\d\d(:\d\d)? eta (\d:\d\d(:\d\d)?|-:--(:--)?)", frame), frame
        if not re.search(r"\b0/40\b", frame):  # once an episode is in: each seat's reward
            assert "player0" in frame, frame
            assert "player1" in frame, frame
    assert any(" 40/40 " in f for f in frames)
    assert any(f.startswith("writing") for f in frames)
    if columns >= 120:
        assert any("━" in f and "tok" in f for f in frames)
    table = ANSI.sub("", drawn).split(frames[-1])[-1]
    for name in ("payoff", "forfeit", "stop: user_closed"):
        assert name in table
    rows = [line for line in table.splitlines() if line[:1] in "┏┃┡│├└"]
    assert len(rows) > 8
    assert max(len(line) for line in rows) <= columns


def test_without_a_terminal_the_line_is_printed_at_each_phase_and_at_the_end() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=False)
    with EvalProgress(2, console=console) as bar:
        bar.add(_digest(True, ("assistant", 1.0, True)))
        bar.add(_digest(False, ("assistant", 0.0, True)))
        bar.phase("writing summary and report")
        bar.phase("done")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("writing summary and report")
    assert lines[-1].startswith("done")
    assert all("2/2" in line and "1 failed" in line for line in lines)
    assert len(lines) == 2
