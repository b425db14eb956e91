"""Damage a run directory can take (issue 24, item 9): records that are valid JSON in
the wrong shape are set aside like torn lines (resume and report, never a
traceback); a non-UTF-8 config.toml is one line in ``report``; a resume's clean-up
killed at any point is finished or undone by the next run: side files never get an
entry twice, and no ``episodes.jsonl.tmp`` is left behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
from rundirs import eval_cli, pairs

from taketurns import RunDir, read_episodes
from taketurns._cli.main import main
from taketurns._output import rundir as rundir_module

CRASHENV = Path(__file__).with_name("crashenv.py")
ENV = f"{CRASHENV}:CrashOnce"


def _run(out: Path, n: int = 4) -> list[bytes]:
    assert eval_cli(ENV, "-n", str(n), "-o", str(out), "--env.crash_task=-1") == 0
    return (out / "episodes.jsonl").read_bytes().splitlines()


def _bent(line: bytes, edit: str) -> bytes:
    record = orjson.loads(line)
    trace = record["traces"][0]
    if edit == "reward":
        trace["reward"] = "x"
    elif edit == "turns":
        trace["turns"] = 5
    elif edit == "traces":
        record["traces"] = {"player": 1}
    elif edit == "metrics":
        trace["metrics"] = {"m": "high"}
    elif edit == "usage":
        trace["usage"] = {"total_tokens": "many"}
    elif edit == "null traces":
        record["traces"] = None
    elif edit == "null rewards":
        trace["rewards"] = None
    elif edit == "negative rollout":
        record["rollout"] = -5
    else:
        record["errors"] = ["boom"]
    return orjson.dumps(record)


EDITS = ["reward", "turns", "traces", "metrics", "usage", "errors"]
EDITS += ["null traces", "null rewards", "negative rollout"]


@pytest.mark.parametrize("edit", EDITS)
def test_a_record_of_the_wrong_shape_is_set_aside_by_resume_and_report(
    tmp_path: Path, edit: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    lines = _run(out)
    lines[1] = _bent(lines[1], edit)
    (out / "episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 damaged line (line 2)" in err
    assert "Traceback" not in err
    assert eval_cli("--resume", "-o", str(out)) == 0
    err = capsys.readouterr().err
    assert "set aside 1 damaged line (line 2) to damaged.jsonl" in err
    assert "Traceback" not in err
    assert pairs(out) == [(i, 0) for i in range(4)]
    (aside,) = [json.loads(x) for x in (out / "damaged.jsonl").read_text().splitlines()]
    assert aside["line"] == 2
    assert orjson.loads(aside["text"]) == orjson.loads(lines[1])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 4  # the bent record is not counted
    export = tmp_path / "export.jsonl"
    assert main(["export", str(out), "-o", str(export)]) == 0  # no traceback further on


def test_report_on_a_config_that_is_not_utf8_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    _run(out, 2)
    (out / "config.toml").write_bytes(b'env_id = "caf\xe9"\n')
    (out / "summary.json").write_bytes(b"\xff{not json")
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "config.toml: not UTF-8 text (byte 13); shown with replacement characters" in err
    assert "Traceback" not in "\n".join(err)
    assert (out / "report.html").is_file()


class Crash(BaseException):
    """A process killed at this point: nothing after it runs, no clean-up either."""


def _crash_at(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    """Make ``RunDir.tidy`` stop dead at ``point`` of its rewrite."""
    if point == "before the rename":  # side files appended and synced, main not replaced
        real_replace = os.replace

        def replace(src: object, dst: object) -> None:
            if str(dst).endswith("episodes.jsonl"):
                raise Crash
            real_replace(src, dst)  # type: ignore[arg-type]

        monkeypatch.setattr(rundir_module.os, "replace", replace)
    elif point == "after the rename":  # main replaced, the journal still there
        real_unlink = Path.unlink

        def unlink(self: Path, missing_ok: bool = False) -> None:
            if self.name == rundir_module.JOURNAL:
                raise Crash
            real_unlink(self, missing_ok=missing_ok)

        monkeypatch.setattr(Path, "unlink", unlink)
    else:  # in the middle of writing the new main file
        real = RunDir._scan

        def scan(self: RunDir):  # type: ignore[no-untyped-def]
            for n, item in enumerate(real(self)):
                if n == 2 and self._tmp.exists():
                    raise Crash
                yield item

        monkeypatch.setattr(RunDir, "_scan", scan)


@pytest.mark.parametrize("point", ["writing the new file", "before the rename", "after the rename"])
def test_a_clean_up_killed_at_any_point_is_finished_by_the_next_run(
    tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    lines = _run(out, 5)
    failed = orjson.loads(lines[1])
    failed.update(ok=False, cause="model")
    lines[1] = orjson.dumps(failed)
    lines[3] = lines[3][:40]  # torn
    (out / "episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with monkeypatch.context() as patched:
        _crash_at(patched, point)
        run_dir = RunDir(out)
        run_dir.lock()
        with pytest.raises(Crash):
            run_dir.tidy()
        run_dir.unlock()
    assert eval_cli("--resume", "-o", str(out)) == 0
    assert pairs(out) == [(i, 0) for i in range(5)]
    assert [r["id"] for r in read_episodes(out / "failed.jsonl")] == [failed["id"]]
    damaged = (out / "damaged.jsonl").read_text().splitlines()
    assert [json.loads(x)["line"] for x in damaged] == [4]
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == []
    assert not (out / rundir_module.JOURNAL).exists()


def test_a_temp_file_left_by_a_killed_resume_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "run"
    lines = _run(out, 2)
    (out / "episodes.jsonl.tmp").write_bytes(b"\n".join(lines[:1]))  # half a rewrite
    (out / "summary.json.tmp").write_bytes(b"{")
    assert eval_cli("--resume", "-o", str(out)) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == []
    assert (out / "episodes.jsonl").read_bytes().splitlines() == lines
