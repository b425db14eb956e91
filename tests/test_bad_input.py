"""Bad input everywhere else: malformed task files, env options, TOML configs and
run directories. Each is answered by ``taketurns eval`` with exit code 2 and one clear
line per problem naming it (never a traceback), and nothing is half-written: no run
directory appears, and an existing one is left exactly as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taketurns._cli.main import main


def snapshot(root: Path) -> dict[str, bytes] | None:
    """Every file under ``root`` with its bytes (None: ``root`` does not exist)."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run ``taketurns`` with ``argv``: exit code 2, every needle in the error text."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    text = " ".join(err.split())  # the console wraps long lines
    assert text.startswith("error:"), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in text, err
    return text


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean working directory: no ``outputs/`` may appear in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def nothing_written(here: Path) -> None:
    assert not (here / "run").exists()
    assert not (here / "outputs").exists()


# -- malformed task files -------------------------------------------------------------------

GOOD = '{"prompt": "What is 2+2?", "answer": "4"}'
TASK_FILES = {
    "invalid JSON": ([GOOD, '{"prompt": "q",'], ["line 2", "not valid JSON"]),
    "a torn last line": ([GOOD, GOOD, '{"prompt": "q'], ["line 3", "not valid JSON"]),
    "not an object": ([GOOD, "[1, 2]"], ["line 2", "expected a JSON object", "got a list"]),
    "no prompt": (['{"answer": "4"}'], ["line 1", '"prompt" is missing']),
    "empty prompt": (['{"prompt": "  "}'], ["line 1", "prompt is empty"]),
    "prompt of a number": (['{"prompt": 3}'], ["line 1", "prompt must be a string or a list"]),
    "a bad message": (
        ['{"prompt": [{"role": "wizard", "content": "x"}]}'],
        ["line 1", "prompt[0].role", "wizard"],
    ),
    "a list answer": (['{"prompt": "q", "answer": [1]}'], ["line 1", "answer must be"]),
    "an unknown field": (['{"prompt": "q", "extra": 1}'], ["line 1", "unknown field(s) 'extra'"]),
    "info not an object": (['{"prompt": "q", "info": [1]}'], ["line 1", "info must be an object"]),
    "nested too deeply": (["[" * 100_000], ["line 1", "nested too deeply"]),
    "a byte-order mark": (["\ufeff" + GOOD], ["line 1", "BOM"]),
    "only blank lines": (["", "   ", ""], ["holds no tasks"]),
    "many bad lines": (["nope"] * 25, ["line 20:", "and 5 more malformed lines"]),
}


@pytest.mark.parametrize("case", list(TASK_FILES))
def test_malformed_task_files(case: str, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, needles = TASK_FILES[case]
    tasks = here / "tasks.jsonl"
    tasks.write_text("\n".join(lines), encoding="utf-8")
    text = refused(
        ["eval", "jsonl", f"--env.taskset.path={tasks}", "-o", "run", "--no-progress"],
        capsys,
        "tasks.jsonl",
        *needles,
    )
    if case == "many bad lines":
        assert "line 21:" not in text  # a page of problems, not a million lines
    nothing_written(here)


def test_unreadable_task_files(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    (here / "a-dir.jsonl").mkdir()
    cases = [
        ("binary.jsonl", ["binary.jsonl", "cannot read the tasks file", "utf-8"]),
        ("a-dir.jsonl", ["env.taskset.path = 'a-dir.jsonl'", "it is a directory"]),
        ("missing.jsonl", ["env.taskset.path = 'missing.jsonl'", "no such file"]),
    ]
    for path, needles in cases:
        refused(["eval", "jsonl", f"--env.taskset.path={path}", "-o", "run"], capsys, *needles)
    refused(["eval", "jsonl", "-o", "run"], capsys, "path is missing", "--env.taskset.path")
    nothing_written(here)


def test_a_task_file_named_in_toml(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "tasks.jsonl").write_text(GOOD + "\n{oops}\n")
    (here / "run.toml").write_text(
        'env_id = "single-agent"\n[env.taskset]\nid = "jsonl"\npath = "tasks.jsonl"\n'
    )
    refused(["eval", "-C", "run.toml", "-o", "run"], capsys, "tasks.jsonl, line 2")
    nothing_written(here)


# -- malformed env options --------------------------------------------------------------------

ENV_OPTIONS = [
    (["--env.invalid_retries=abc"], ["env.invalid_retries = 'abc': expected an integer"]),
    (["--env.seed=1.5"], ["env.seed = '1.5': expected an integer"]),
    (["--env.nope=1"], ["env.nope: unknown option", "invalid_retries"]),
    (["--env.player0.nope=1"], ["env.player0.nope: unknown option", "harness_options"]),
    (["--env.player0=3"], ["env.player0 = '3': expected a table of options"]),
    (["--env.player0.sampling=hot"], ["env.player0.sampling = 'hot': expected a table"]),
    (["--env.player0.limits.max_turns=-1"], ["env.player0.limits.max_turns = -1"]),
    (["--env.player0.timeouts.scoring_s=0"], ["env.player0.timeouts.scoring_s = 0"]),
    (["--env.player0.retries=many"], ["env.player0.retries = 'many': expected an integer"]),
    (["--env.player1.trainable=maybe"], ["env.player1.trainable = 'maybe': expected true"]),
    (["--env.player0.sampling.temperature=-1"], ["env.player0.sampling.temperature = -1"]),
    (["--env.player0.sampling.stop=[1, 2]"], ["env.player0.sampling.stop"]),
    (["--env.player0.harness=nope"], ["unknown harness 'nope'", "program"]),
    (
        ["--env.player0.harness=program", "--env.player0.harness_options.command=python"],
        ["env.player0.harness_options", "non-empty list of strings"],
    ),
    (["--env.player0.harness_options.bogus=1"], ["env.player0.harness_options", "refused"]),
    (
        ["--env.player0.harness_options=7"],
        ["env.player0.harness_options = '7': expected a table of options, not a single value"],
    ),
    (
        ["--env.player0.harness=program", '--env.player0.harness_options.command=["no-such-x"]'],
        ["env.player0.harness = 'program'", "'no-such-x' is not on PATH"],
    ),
    (
        ["--env.player0.harness=program", "--env.player0.harness_options.persistent=yes"],
        ["env.player0.harness_options", "persistent must be true or false, not 'yes'"],
    ),
    (
        ["--env.player1.harness=program", "--env.player1.harness_options.tail_chars=many"],
        ["env.player1.harness_options", "tail_chars must be a non-negative integer"],
    ),
    (
        ["--env.player0.harness=program", "--env.player0.harness_options.env={ A = 1 }"],
        ["env.player0.harness_options", "env must be a table of strings"],
    ),
    (
        ["--env.player0.harness=stateful", "--env.player0.harness_options.persistent=true"],
        ["env.player0.harness_options", "refused by harness 'stateful'", "persistent"],
    ),
    (
        [
            "--env.player0.harness=program",
            "--env.player0.harness_options.persistent=true",
            "--env.player0.harness_options.max_programs=0",
        ],
        ["env.player0.harness_options", "max_programs must be a positive integer, not 0"],
    ),
    (
        ["--env.player0.harness=program", "--env.player0.harness_options.max_programs=2"],
        ["env.player0.harness_options", "max_programs needs persistent = true"],
    ),
    (
        ["--env.player0.harness=stateful", "--env.player0.harness_options.max_programs=2"],
        ["env.player0.harness_options", "refused by harness 'stateful'", "max_programs"],
    ),
    (
        ["--env.player0.model=gpt-4o", "--env.player0.base_url=not a url"],
        ["base_url: 'not a url' is not an http(s) URL"],
    ),
    (["--env.player0.model=gpt-4o"], ["env.player0.model = 'gpt-4o'", "base URL"]),
    (["--env..seed=1"], ["--env..seed: an option path cannot have empty parts"]),
    (["--env.seed"], ["--env.seed: needs a value"]),
    (["--env=3"], ["'--env=3': unknown argument"]),
    (["-n", "0"], ["num_tasks = 0"]),
    (["--rollouts", "-2"], ["rollouts = -2"]),
    (["--concurrency", "0"], ["concurrency = 0"]),
    (["--episode-timeout", "-1"], ["episode_timeout_s = -1"]),
    (
        ["--env.seed=x", "--env.player0.retries=y", "--num-tasks=0"],  # every problem at once
        ["env.seed = 'x'", "env.player0.retries = 'y'", "num_tasks = 0"],
    ),
]


@pytest.mark.parametrize(("args", "needles"), ENV_OPTIONS)
def test_malformed_env_options(
    args: list[str], needles: list[str], here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused(["eval", "kuhn-poker", "-n", "2", "-o", "run", *args], capsys, *needles)
    nothing_written(here)


def test_malformed_taskset_options(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["eval", "jsonl", "--env.taskset=nope", "-o", "run"], capsys, "unknown taskset 'nope'")
    refused(
        ["eval", "single-agent", "--env.taskset.path=x.jsonl", "-o", "run"],
        capsys,
        "env.taskset",
        "name a taskset",
    )
    refused(
        ["eval", "jsonl", "--env.taskset.nope=1", "-o", "run"],
        capsys,
        "env.taskset.nope: unknown option",
    )
    nothing_written(here)


def test_usage_errors_exit_2(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused(["eval", "-n", "1"], capsys, "name the env to run")
    refused(["eval", "no-such-env"], capsys, "unknown env 'no-such-env'", "kuhn-poker")
    nothing_written(here)


USAGE = [
    (["eval", "kuhn-poker", "-n", "abc"], ["-n/--num-tasks: invalid int value: 'abc'"]),
    (["eval", "kuhn-poker", "--seed", "banana"], ["--seed: invalid int value: 'banana'"]),
    (["eval", "--resume", "--overwrite"], ["--overwrite: not allowed with argument --resume"]),
    (["--resume", "eval", "kuhn-poker"], ["'--resume': a flag goes after the command"]),
    (["-n", "5", "eval", "kuhn-poker"], ["'-n': a flag goes after the command: taketurns eval"]),
    (["evl", "kuhn-poker"], ["'evl': unknown command; did you mean eval?"]),
    (["view", "--port", "99999"], ["--port 99999: a port is 0-65535"]),
    (["envs", "kuhn"], ["did you mean 'kuhn-poker'?"]),
]


@pytest.mark.parametrize(("argv", "needles"), USAGE)
def test_each_usage_error_is_one_right_line(
    argv: list[str], needles: list[str], here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No usage block first, no wrong guess: ``error:`` and one line naming it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "error:", err
    assert len(err.splitlines()) == 2, err
    for needle in needles:
        assert needle in err, err
    nothing_written(here)


def test_a_harness_options_value_in_toml_is_refused_by_name(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "run.toml").write_text("[env.player0]\nharness_options = 7\n")
    refused(
        ["eval", "kuhn-poker", "-C", "run.toml", "-o", "run"],
        capsys,
        "env.player0.harness_options = 7: expected a table of options",
    )
    nothing_written(here)


# -- malformed TOML ---------------------------------------------------------------------------

TOML = {
    "a syntax error": ("num_tasks = \n", ["-C run.toml: not valid TOML", "line 2"]),
    "an unterminated string": ('model = "builtin\n', ["not valid TOML"]),
    "a duplicate key": ("num_tasks = 1\nnum_tasks = 2\n", ["not valid TOML"]),
    "not UTF-8": (b"\xff\xfe = 1\n", ["not valid TOML", "utf-8"]),
    "wrong types": (
        'num_tasks = "ten"\nconcurrency = 1.5\nrollouts = true\nmodel = 3\n',
        [
            "num_tasks = 'ten': expected an integer",
            "concurrency = 1.5: expected an integer",
            "rollouts = True: expected an integer",
            "model = 3: expected a string",
        ],
    ),
    "a section given a value": ('sampling = "hot"\n', ["sampling = 'hot': expected a table"]),
    "env given a value": ("env = 3\n", ["env: expected a section of env options"]),
    "unknown sections": (
        "[nonsense]\nx = 1\n[sampling.nope]\ny = 2\n[env.nope]\nz = 3\n",
        ["nonsense: unknown option", "sampling.nope: unknown option", "env.nope: unknown"],
    ),
    "wrong types in the env": (
        '[env]\ninvalid_retries = "x"\n[env.player0]\nretries = 1.5\n[env.player0.limits]\n'
        "max_turns = 0\n",
        [
            "env.invalid_retries = 'x'",
            "env.player0.retries = 1.5",
            "env.player0.limits.max_turns = 0",
        ],
    ),
    "an unknown env": ('env_id = "nope"\n', ["unknown env 'nope'"]),
    "harness options of the wrong shape": (
        '[env.player0]\nharness = "program"\nharness_options = { command = "python" }\n',
        ["env.player0.harness_options", "non-empty list"],
    ),
}


@pytest.mark.parametrize("case", list(TOML))
def test_malformed_toml(case: str, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, needles = TOML[case]
    config = here / "run.toml"
    if isinstance(text, bytes):
        config.write_bytes(text)
    else:
        config.write_text('env_id = "kuhn-poker"\n' + text if "env_id" not in text else text)
    refused(["eval", "-C", "run.toml", "-o", "run"], capsys, *needles)
    nothing_written(here)


def test_unreadable_toml(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "a-dir.toml").mkdir()
    refused(["eval", "kuhn-poker", "-C", "missing.toml", "-o", "run"], capsys, "no such file")
    refused(["eval", "kuhn-poker", "-C", "a-dir.toml", "-o", "run"], capsys, "cannot read")
    nothing_written(here)


# -- nothing half-written in an existing run directory -------------------------------------------


def test_an_existing_run_is_left_exactly_as_it_was(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = here / "run"
    assert main(["eval", "kuhn-poker", "-n", "3", "-o", "run", "--no-progress"]) == 0
    capsys.readouterr()
    # tear the last line, as a crash would: --resume would repair it, a refusal must not
    episodes = run / "episodes.jsonl"
    episodes.write_bytes(episodes.read_bytes()[:-40])
    before = snapshot(run)
    assert before is not None
    names = {"config.toml", "episodes.jsonl", "summary.json", "report.html", ".lock"}
    assert set(before) == names  # .lock: the writers' lock file (stays, holds a pid)
    os.utime(run, (0, 0))

    refused(["eval", "kuhn-poker", "-n", "3", "-o", "run"], capsys, "not empty", "--resume")
    for mode in ("--resume", "--overwrite"):
        refused(["eval", "kuhn-poker", "-o", "run", mode, "--env.seed=x"], capsys, "env.seed")
        refused(
            ["eval", "kuhn-poker", "-o", "run", mode, "--env.player0.harness=nope"],
            capsys,
            "unknown harness",
        )
    refused(
        ["eval", "kuhn-poker", "-o", "run", "--resume", "--env.seed=7"],
        capsys,
        "--resume: the config differs",
    )
    (here / "bad.toml").write_text("num_tasks = [\n")
    refused(["eval", "-C", "bad.toml", "-o", "run", "--overwrite"], capsys, "not valid TOML")
    (here / "tasks.jsonl").write_text("{oops}\n")
    refused(
        ["eval", "jsonl", "--env.taskset.path=tasks.jsonl", "-o", "run", "--overwrite"],
        capsys,
        "tasks.jsonl, line 1",
    )
    assert snapshot(run) == before
    assert run.stat().st_mtime == 0  # no file was even created and removed in it


def test_a_corrupt_stored_config_refuses_resume(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "kuhn-poker", "-n", "2", "-o", "run", "--no-progress"]) == 0
    capsys.readouterr()
    config = here / "run" / "config.toml"
    config.write_text(config.read_text().replace("num_tasks = 2", "num_tasks = two"))
    before = snapshot(here / "run")
    refused(["eval", "-o", "run", "--resume"], capsys, "run/config.toml: not valid TOML")
    config.write_text('env_id = "kuhn-poker"\nnum_tasks = "two"\n')
    before = snapshot(here / "run")
    refused(["eval", "-o", "run", "--resume"], capsys, "num_tasks = 'two'")
    assert snapshot(here / "run") == before
    (here / "run" / "config.toml").unlink()
    refused(["eval", "kuhn-poker", "-o", "run", "--resume"], capsys, "holds no config.toml")


def test_an_output_directory_that_cannot_be(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "a-file").write_text("not a directory")
    refused(["eval", "kuhn-poker", "-n", "1", "-o", "a-file"], capsys, "not a directory")
    refused(
        ["eval", "kuhn-poker", "-n", "1", "-o", "a-file/run"],
        capsys,
        "-o a-file/run: cannot create the directory",
    )
    assert (here / "a-file").read_text() == "not a directory"
    nothing_written(here)


def test_the_error_lines_are_one_per_problem(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "run.toml").write_text('env_id = "kuhn-poker"\nnum_tasks = 0\n[env]\nseed = "s"\n')
    assert main(["eval", "-C", "run.toml", "-o", "run", "--env.player0.retries=-1"]) == 2
    err = capsys.readouterr().err
    bullets = [line for line in err.splitlines() if line.startswith("  - ")]
    assert len(bullets) == 3, err
    nothing_written(here)


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_each_problem_is_one_line_at_any_width(
    columns: str, here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    long_name = "not-a-number-" + "x" * 90
    argv = ["eval", "kuhn-poker", "-o", "run", f"--env.player0.retries={long_name}"]
    assert main([*argv, "--env.player1.retries=-1"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0] == "error:"
    assert all(line.startswith("  - ") for line in lines[1:]), err  # no wrapped tails
    assert len(lines) == 3, err
    assert any(long_name in line and "expected an integer" in line for line in lines), err
    nothing_written(here)
