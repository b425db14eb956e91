""" "Did you mean": a mistyped env, taskset or harness id, flag, dotted option or
enumerated value is refused (exit 2, nothing run) with its near misses named, and a
long list of accepted values is never dumped."""

from __future__ import annotations

from pathlib import Path

import pytest
from required import needed

from taketurns._cli.main import main
from taketurns._config.suggest import choices_text, close_matches


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return " ".join(err.split())


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["eval", "kuhn-pokr"], "unknown env 'kuhn-pokr'; did you mean 'kuhn-poker'?"),
        (["eval", "jsnl"], "did you mean 'jsonl'?"),  # a taskset, named where an env goes
        (["eval", "single-agent", "--env.taskset=retail-lit"], "did you mean 'retail-lite'?"),
        (["eval", "kuhn-poker", "--env.player0.harness=tool"], "did you mean 'tools'?"),
        (["eval", "kuhn-poker", "--concurency", "4"], "did you mean --concurrency?"),
        (["eval", "kuhn-poker", "--env.player0.harness=program",
          "--env.player0.harness_options.comand=x"], "did you mean 'command'? its options: "),
        (["eval", "kuhn-poker", "--bakend=ray"], "did you mean --backend?"),
        (["eval", "kuhn-poker", "--env.plyer0.model=M"], "did you mean 'player0'?"),
        (["eval", "kuhn-poker", "--sampling.temprature=1"], "did you mean 'temperature'?"),
        (["eval", "kuhn-poker", "--env.player0.max_turns=3"], "did you mean 'limits.max_turns'?"),
        (["eval", "kuhn-poker", "--backend=rayy"], "or processes; did you mean 'ray'?"),
        (["eval", "textarena-selfplay", "--env.game=TicTacToe"], "did you mean 'TicTacToe-v0'?"),
        (["report", "x", "--formt=a"], "'--formt=a': unknown argument; taketurns report --help"),
    ],
)  # fmt: skip
def test_near_misses_are_named(
    argv: list[str], needle: str, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert needle in refused(argv, capsys)
    assert not (here / "outputs").exists()


def test_a_flag_is_not_answered_with_the_dotted_option_hint(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = refused(["eval", "kuhn-poker", "--concurency", "4"], capsys)
    assert "dotted" not in text
    # nothing close: where the flags and the dotted options are listed
    text = refused(["eval", "kuhn-poker", "--zzzzzz", "4"], capsys)
    assert "did you mean" not in text
    assert "taketurns eval --help lists the flags" in text
    assert "dotted" in text


def test_the_unknown_env_list_names_tasksets(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = refused(["eval", "no-such-thing"], capsys)
    assert "known envs: " in text
    assert "kuhn-poker" in text
    assert "tasksets: jsonl, " in text
    assert "retail-lite" in text


def test_a_long_list_of_values_is_not_dumped(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needed("reasoning_gym", "pip install -e '.[test]' (bash .ci/run)")
    text = refused(["eval", "reasoning-gym", "--env.taskset.dataset=leg_countin"], capsys)
    assert "did you mean 'leg_counting'?" in text
    assert "taketurns envs reasoning-gym lists all 106" in text
    assert "spell_backward" not in text  # the other 105 names are not in the message
    text = refused(["eval", "reasoning-gym", "--env.taskset.dataset=zzzzzzzz"], capsys)
    assert "none is close to it" in text
    assert "spell_backward" not in text


def test_close_matches_rule() -> None:
    assert close_matches("kuhn_pokr", ["kuhn-poker", "user-sim"]) == ["kuhn-poker"]
    assert close_matches("KUHN-POKER", ["kuhn-poker"]) == ["kuhn-poker"]
    assert close_matches("xyz", ["kuhn-poker"]) == []
    # a clear winner is named alone, near ties together
    assert close_matches("--concurency", ["--concurrency", "--max-concurrent-calls"]) == [
        "--concurrency"
    ]
    assert sorted(close_matches("cat", ["bat", "hat", "car"])) == ["bat", "car", "hat"]
    short = choices_text("rayy", ["local", "ray"], what="a backend")
    assert short == "a backend: one of local, ray; did you mean 'ray'?"
    many = [f"{word}_{i}" for word in ("alpha", "beta", "gamma") for i in range(10)]
    assert choices_text("gama_4", many, what="a name", listing="L") == (
        "a name; did you mean 'gamma_4'? (L lists all 30)"
    )
