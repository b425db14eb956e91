"""The run directory survives whatever happens to it (``taketurns._output.rundir``): a
second writer is refused naming the holder, damaged lines are set aside and their pairs
rerun, a full disk is one clear line with nothing lost, a moved or copied directory
resumes where it is, a config refusal names each field, SIGHUP is SIGTERM. Real
processes, a real tmpfs, the real CLI."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from rundirs import pairs, records

from taketurns import read_episodes
from taketurns._cli.main import main

LIMIT = 60
KUHN = ["kuhn-poker", "--no-progress"]


def kuhn(out: Path, n: int, *extra: str) -> list[str]:
    return ["eval", *KUHN, "-n", str(n), "-o", str(out), *extra]


def all_pairs(n: int) -> list[tuple[int, int]]:
    return [(i, 0) for i in range(n)]


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


# -- one writer at a time --------------------------------------------------------------


@contextlib.contextmanager
def held_by_another_process(out: Path) -> Iterator[subprocess.Popen[str]]:
    code = (
        "import sys, time\nfrom taketurns import RunDir\n"
        "RunDir(sys.argv[1]).lock(); print('locked', flush=True); time.sleep(120)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "locked"
            yield proc
        finally:
            proc.kill()


def test_a_second_writer_is_refused_at_once_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(kuhn(out, 4)) == 0
    before = (out / "episodes.jsonl").read_bytes()
    capsys.readouterr()
    with held_by_another_process(out) as holder:
        for argv in (kuhn(out, 8, "--resume"), kuhn(out, 4), kuhn(out, 4, "--overwrite")):
            start = time.monotonic()
            assert main(argv) == 2
            assert time.monotonic() - start < 10  # at once, not after waiting
            err = capsys.readouterr().err
            assert "in use by another taketurns process" in err
            assert f"pid {holder.pid}" in err
    assert (out / "episodes.jsonl").read_bytes() == before  # untouched
    assert main(kuhn(out, 4, "--resume")) == 0  # the holder is gone: the lock is free
    assert pairs(out) == all_pairs(4)


def test_a_resume_while_the_run_is_going_is_refused(tmp_path: Path) -> None:
    """The issue's case: a ``--resume`` started while the eval still writes. It is
    refused at once; the running eval finishes with every pair exactly once."""
    out = tmp_path / "run"
    cli = [sys.executable, "-m", "taketurns"]
    first = [*cli, *kuhn(out, 200, "-c", "4", "--model", "builtin/bracket?latency_ms=50")]
    with subprocess.Popen(first, stderr=subprocess.PIPE, text=True) as running:
        path = out / "episodes.jsonl"
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and not (path.exists() and path.read_bytes()):
            time.sleep(0.02)
        second = subprocess.run(
            [*cli, "eval", "-o", str(out), "--resume", "--no-progress"],
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=False,
        )
        assert running.poll() is None, "the first eval ended before the test could race it"
        _, err = running.communicate(timeout=120)
    assert second.returncode == 2, second.stderr
    assert f"in use by another taketurns process (pid {running.pid}" in second.stderr
    assert running.returncode == 0, err
    assert pairs(out) == all_pairs(200)  # every pair exactly once, nothing unparsable
    damaged: list[int] = []
    list(read_episodes(path, damaged=damaged))
    assert damaged == []


# -- damaged lines ------------------------------------------------------------------------


def test_a_damaged_middle_line_is_set_aside_and_its_pair_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(kuhn(out, 6)) == 0
    path = out / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lost = json.loads(lines[2])
    lines[2] = lines[2][:40] + b"\x00\xff torn and overwritten\n"
    lines[4] = b"[1, 2, 3]\n"  # valid JSON, but no record
    path.write_bytes(b"".join(lines))
    capsys.readouterr()

    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 damaged lines (line 3, 5)" in err
    assert "Traceback" not in err
    assert "skipped 2 damaged lines" in (out / "report.html").read_text()

    assert main(kuhn(out, 6, "--resume")) == 0
    err = capsys.readouterr().err
    assert "set aside 2 damaged lines (lines 3, 5) to damaged.jsonl" in err
    assert pairs(out) == all_pairs(6)
    damaged = [json.loads(x) for x in (out / "damaged.jsonl").read_text().splitlines()]
    assert [d["line"] for d in damaged] == [3, 5]
    assert damaged[0]["text"].startswith(lines[2][:40].decode())
    assert damaged[0]["text"].endswith("\x00\\xff torn and overwritten")  # bytes kept
    assert records(out)[lost["id"]]["task"] == lost["task"]  # its pair ran again


def test_duplicate_records_of_a_pair_are_set_aside(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(kuhn(out, 3)) == 0
    path = out / "episodes.jsonl"
    first = path.read_bytes().splitlines(keepends=True)[0]
    with path.open("ab") as f:
        f.write(first)  # what two writers on one file used to leave behind
    assert main(kuhn(out, 3, "--resume")) == 0
    assert pairs(out) == all_pairs(3)
    assert (out / "duplicates.jsonl").read_bytes() == first


# -- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 96 KiB tmpfs: a few dozen Kuhn episodes fill it. Needs root (mount)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"this test mounts a tmpfs (needs root): {done.stderr}"
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_loses_nothing(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = small_disk / "run"
    assert main(kuhn(out, 400, "-c", "4")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [x for x in err.splitlines() if "error" in x]
    assert "No space left on device" in line
    assert f"cannot write {out / 'episodes.jsonl'}" in line
    assert f"--resume -o {out}" in line
    assert "free some space" in line
    assert no_temp_files(small_disk)
    damaged: list[int] = []
    written = list(read_episodes(out / "episodes.jsonl", damaged=damaged))
    assert damaged == []  # every record on disk is whole
    assert 0 < len(written) < 400
    assert (out / "episodes.jsonl").read_bytes().endswith(b"\n")

    # the report cannot be written either: one line, exit 1, no temp file left
    assert main(["report", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cannot write" in err
    assert "Traceback" not in err
    assert no_temp_files(small_disk)

    # free space = move the run directory to a disk with room, and resume it there
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    assert str(out) not in (moved / "config.toml").read_text()
    assert main(kuhn(moved, 400, "-c", "4", "--resume")) == 0
    assert pairs(moved) == all_pairs(400)
    kept = records(moved)
    for e in written:
        assert kept[e["id"]] == e  # nothing already written was lost or rewritten


_PARTIAL_WRITE = """
import os, resource, signal, sys
from taketurns import RunDir
from taketurns._errors import OutputError
run = RunDir(sys.argv[1])
run.open()
run.append_lines([b'{"id": "whole"}'])
size = os.path.getsize(run.episodes_path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))
try:
    run.append_lines([b"x" * 5000, b"y" * 10])  # the kernel takes the first 100 bytes
except OutputError as exc:
    print("refused", exc.__cause__ is None)
print("size", os.path.getsize(run.episodes_path) - size)
"""


def test_a_partial_write_is_cut_back_to_the_last_whole_record(tmp_path: Path) -> None:
    # a file-size limit makes the kernel accept part of a write, then refuse the rest
    # (as a filling disk does): in its own process, the limit being process-wide
    done = subprocess.run(
        [sys.executable, "-c", _PARTIAL_WRITE, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["refused", "True", "size", "0"]
    assert (tmp_path / "run" / "episodes.jsonl").read_bytes() == b'{"id": "whole"}\n'


# -- moved directories and config refusals ---------------------------------------------------


def test_a_moved_run_directory_resumes_where_it_is(tmp_path: Path) -> None:
    out = tmp_path / "first"
    assert main(kuhn(out, 3)) == 0
    config = (out / "config.toml").read_text()
    assert "output_dir" not in config
    moved = tmp_path / "elsewhere" / "second"
    moved.parent.mkdir()
    out.rename(moved)
    assert main(["eval", "-o", str(moved), "--resume", "--no-progress", "-n", "2"]) == 2
    assert main(kuhn(moved, 2, "--resume")) == 2  # -n below the stored config's
    assert main(["eval", "-o", str(moved), "--resume", "--no-progress"]) == 0
    assert pairs(moved) == all_pairs(3)


def test_a_config_refusal_names_each_differing_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(kuhn(out, 3)) == 0
    capsys.readouterr()
    argv = kuhn(out, 2, "--resume", "--env.invalid_retries=3", "--backend", "processes")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "num_tasks: 3 in the stored config, 2 now" in err
    assert "env.invalid_retries: 1 in the stored config, 3 now" in err
    assert "backend" not in err  # how a run executes may change on resume


def test_an_old_config_naming_its_directory_still_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(kuhn(out, 2)) == 0
    config = out / "config.toml"
    # as an older version wrote it: the directory named, no options added since
    data = tomllib.loads(config.read_text())
    for newer in ("episode_retries", "retry_causes", "interception_max_body_bytes"):
        del data[newer]
    config.write_text(tomli_w.dumps({"output_dir": "/somewhere/else", **data}))
    path = out / "episodes.jsonl"
    path.write_bytes(path.read_bytes().splitlines(keepends=True)[0])  # one pair owed
    assert main(["eval", "-o", str(out), "--resume", "--no-progress"]) == 0
    assert pairs(out) == all_pairs(2)


# -- SIGHUP ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["local", "processes"])
def test_sighup_is_handled_like_sigterm(tmp_path: Path, backend: str) -> None:
    """A closed terminal (SIGHUP) cancels the running episodes, which are closed,
    scored and written as cancelled; the summary is written; exit 130; --resume
    finishes the run with each pair exactly once."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "taketurns", *kuhn(out, 60, "-c", "8")]
    argv += ["--model", "builtin/bracket?latency_ms=100", "--backend", backend, "--workers", "2"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + LIMIT
        path = out / "episodes.jsonl"
        while time.monotonic() < deadline and (
            not path.exists() or len(path.read_bytes().splitlines()) < 4
        ):
            time.sleep(0.02)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=LIMIT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    first = list(read_episodes(out / "episodes.jsonl"))
    assert 4 <= len(first) < 60
    assert any(e["stop"] == "cancelled" for e in first)  # closed, scored, written
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True
    done = subprocess.run(
        [*argv[:3], "eval", "-o", str(out), "--resume", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert pairs(out) == all_pairs(60)
