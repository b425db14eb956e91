"""What a newcomer reads: ``taketurns envs``, ``taketurns eval --help`` and the
messages around a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from required import needed
from rich.console import Console

from taketurns._cli.catalog import print_catalog
from taketurns._cli.main import main


@pytest.fixture(scope="module")
def listing() -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_catalog(console)
    console.file.close()
    return console.export_text()


def _row(listing: str, needle: str) -> str:
    line = next(ln for ln in listing.splitlines() if needle in ln)  # the first env's
    return " ".join(line.replace("│", " ").split())


def test_descriptions_are_whole_first_paragraphs_without_markup(listing: str) -> None:
    assert "``" not in listing
    assert "Single-player TextArena word games, refereed by the real TextArena engine" in (
        " ".join(listing.replace("│", " ").split())
    )
    assert "Two seats play one hand of Kuhn poker; the env is the referee." in listing
    assert "An in-process tool loop (the tau-bench assistant shape)." in listing


def test_roles_show_the_model_and_harness_they_run_with(listing: str) -> None:
    assert "model=None" not in listing
    assert "harness=env's choice" not in listing
    assert "env.player0 role model: the eval's (--model), harness: null" in _row(
        listing, "env.player0 "
    )
    user_sim = listing[listing.index("│ user-sim ") :]  # telecom-lite has a user role too
    user = " ".join(
        user_sim[user_sim.index("env.user ") :].split("env.persona")[0].replace("│", " ").split()
    )
    assert user.startswith("env.user role model: the eval's (--model), harness: null")
    assert "limits.max_turns=8" in user
    assert "trainable=False" in user
    assert "harness: the taskset's" in _row(user_sim, "env.assistant ")
    assert "no limit" in _row(listing, "env.<role>.limits.max_turns")


def test_eval_help_states_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in (
        "tasks to run (default: 10)",
        "rollouts of each task (default: 1)",
        "episodes at once (default: 32)",
        "(default: the env's default for each role, else builtin/bracket)",
        "(default: OPENAI_API_KEY)",
        "--request-timeout S",
        "(default: 600)",
        "--request-retries N",
        "(default: 3)",
        "--preflight-timeout S",
        "(default: 30)",
        "./file.py:Class",
        "(default: outputs/<env>--<model>--<time>)",
    ):
        assert needle in text, needle


def test_an_unknown_harness_lists_the_known_harnesses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "kuhn-poker", "-n", "1", "-o", str(tmp_path / "r")]
    assert main([*args, "--env.player0.harness=nope"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    known = err.split("known harnesses: ")[1].split(";")[0].split(", ")
    assert {"null", "program", "stateful", "tools", "codex", "claude-code"} <= set(known)
    assert known == sorted(known)
    assert "harnesss" not in err


def test_a_resume_with_nothing_to_do_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "run")
    assert main(["eval", "kuhn-poker", "-n", "3", "-o", out, "--no-progress"]) == 0
    assert "3 new episodes" in " ".join(capsys.readouterr().err.split())
    assert main(["eval", "--resume", "-o", out, "--no-progress"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing to do: every (task, rollout) pair was already written" in err
    assert "episodes/s" not in err


def test_venv_is_ignored_by_git() -> None:
    ignored = (Path(__file__).resolve().parents[1] / ".gitignore").read_text().split()
    assert ".venv/" in ignored


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"taketurns {version('taketurns')}"


@pytest.mark.parametrize(
    ("id", "needles", "absent"),
    [
        ("kuhn-poker", ["kuhn-poker (env)", "Kuhn poker", "env.invalid_retries int 1",
                        "env.<role>.limits.max_turns"], ["env.taskset", "alphabet"]),
        ("jsonl", ["jsonl (taskset)", "env.taskset.path"], ["env.<role>", "env.invalid_retries"]),
        ("program", ["program (harness)", "harness_options.command"], ["env.seed"]),
    ],
)  # fmt: skip
def test_envs_id_shows_one_entry(
    id: str, needles: list[str], absent: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["envs", id]) == 0
    out = capsys.readouterr().out
    text = " ".join(out.replace("│", " ").split())
    for needle in needles:
        assert needle in text, out
    for needle in absent:
        assert needle not in text, out
    assert "``" not in out


def test_envs_id_lists_a_long_set_of_values(capsys: pytest.CaptureFixture[str]) -> None:
    needed("reasoning_gym", "pip install -e '.[test]' (bash .ci/run)")
    assert main(["envs", "reasoning-gym"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "leg_counting" in text
    assert "spell_backward" in text


def test_envs_of_an_unknown_id_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "kuhn-pokr"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "did you mean 'kuhn-poker'? taketurns envs lists them all" in err
