"""What a user sees when their code fails (issue 24, item 1): the exception's type,
file:line and message in the terminal (as it happens and at the end), its traceback
on the record and in the report. Run as a user runs it: the real ``taketurns eval``
on buggy user code (tests/buggyenv.py), then the records on disk."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import orjson

from taketurns import read_episodes
from taketurns._exchange.tracebacks import MAX_TRACEBACK_CHARS, format_traceback, where
from taketurns._output.records import loads_episode
from taketurns.harness import ErrorInfo

BUGGY = Path(__file__).with_name("buggyenv.py")


def _line_of(marker: str) -> int:
    lines = BUGGY.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def _eval(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taketurns", "eval", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def test_an_env_raising_keyerror_shows_type_file_line_and_message(tmp_path: Path) -> None:
    proc = _eval(f"{BUGGY}:BuggyEnv", "-n", "3", "-o", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = _line_of("the bug: a key that is not there")
    shown = f"KeyError at {BUGGY}:{line} in run: 'missing-"
    # once as it happens, once at the end (counted), then where the rest is
    assert proc.stderr.count(shown) == 2, proc.stderr
    assert "the env raised (3 episodes): KeyError" in proc.stderr
    assert "out/episodes.jsonl (errors[].traceback)" in proc.stderr
    records = list(read_episodes(tmp_path / "out" / "episodes.jsonl"))
    assert len(records) == 3
    for record in records:
        (error,) = record["errors"]
        assert error["type"] == "KeyError"
        assert error["where"] == f"{BUGGY}:{line} in run"
        assert error["traceback"].startswith("Traceback (most recent call last):")
        assert f'File "{BUGGY}", line {line}, in run' in error["traceback"]
        assert error["traceback"].rstrip().endswith(f"KeyError: 'missing-{record['task']['idx']}'")
    report = (tmp_path / "out" / "report.html").read_text()
    assert '<details class="traceback">' in report
    assert html.escape(f'File "{BUGGY}", line {line}, in run', quote=True) in report
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    (kind,) = summary["failures"]
    assert (kind["cause"], kind["type"], kind["count"]) == ("env", "KeyError", 3)


def test_a_reward_dividing_by_zero_points_at_the_reward(tmp_path: Path) -> None:
    proc = _eval(f"{BUGGY}:BuggyEnv", "-n", "2", "-o", "out", "--env.bug=reward", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = _line_of("the bug: a division by zero")
    assert f"at {BUGGY}:{line} in share: share failed: ZeroDivisionError" in proc.stderr
    for record in read_episodes(tmp_path / "out" / "episodes.jsonl"):
        errors = [e for t in record["traces"] for e in t["errors"]]
        (error,) = errors
        assert error["kind"] == "scoring"
        assert "ZeroDivisionError: division by zero" in error["traceback"]
        assert f'File "{BUGGY}", line {line}, in share' in error["traceback"]
    report = (tmp_path / "out" / "report.html").read_text()
    assert "ZeroDivisionError: division by zero" in report


def test_a_record_without_tracebacks_still_loads() -> None:
    """Records written before ``where`` and ``traceback`` existed."""
    line = {
        "id": "e/0/0",
        "env": "e",
        "task": {"idx": 0},
        "rollout": 0,
        "ok": False,
        "cause": "env",
        "stop": "env_error",
        "errors": [{"kind": "env", "message": "'k'", "type": "KeyError"}],
        "traces": [],
    }
    episode = loads_episode(orjson.dumps(line))
    (error,) = episode.errors
    assert (error.kind, error.message, error.type) == ("env", "'k'", "KeyError")
    assert (error.where, error.traceback) == ("", "")


def _deep(n: int) -> None:
    if n:
        _deep(n - 1)
    raise ValueError("x" * 50_000)


def test_a_traceback_is_capped_and_keeps_its_end() -> None:
    try:
        _deep(200)
    except ValueError as exc:
        text = format_traceback(exc)
        found = where(exc)
    assert len(text) <= MAX_TRACEBACK_CHARS + 50
    assert text.startswith("[... ")
    assert text.endswith("x" * 100 + "\n")
    assert found.startswith(f"{__file__}:")
    assert found.endswith(" in _deep")


def test_an_error_never_raised_has_no_traceback() -> None:
    info = ErrorInfo.of("model", RuntimeError("boom"))
    assert (info.where, info.traceback) == ("", "")


def test_live_failure_lines_are_one_per_new_kind_and_rate_limited() -> None:
    from taketurns._output.failures import MAX_LIVE, MIN_GAP_S, LiveFailures

    said: list[str] = []
    now = [0.0]
    live = LiveFailures(said.append, clock=lambda: now[0])

    def failure(kind: int) -> dict[str, object]:
        return {"cause": "env", "type": "KeyError", "where": f"env.py:{kind} in run"}

    live.add(failure(1))
    live.add(failure(1))  # the same kind: never said twice
    live.add(failure(2))  # a new kind, too soon after the last line: held
    assert said == ["failed: the env raised: KeyError at env.py:1 in run"]
    for kind in range(3, 3 + 2 * MAX_LIVE):
        now[0] += MIN_GAP_S
        live.add(failure(kind))
    assert len(said) == MAX_LIVE
    assert live.held == 1 + MAX_LIVE + 1
    assert len(live.kinds.kinds) == 2 + 2 * MAX_LIVE
    (first,) = [k for k in live.kinds.result() if k["where"] == "env.py:1 in run"]
    assert first["count"] == 2


def test_where_looks_inside_an_exception_group() -> None:
    def inner() -> None:
        raise ValueError("first")

    try:
        try:
            inner()
        except ValueError as exc:
            raise ExceptionGroup("two", [exc, KeyError("second")]) from None
    except ExceptionGroup as group:
        found = where(group)
    assert found.startswith(f"{__file__}:")
    assert found.endswith(" in inner")
