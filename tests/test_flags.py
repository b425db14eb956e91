"""Client flags (``--request-timeout``, ``--request-retries``, ``--request-backoff``,
``--preflight-timeout``), the endpoint check saying what it waits for, and reruns of a
stored config (``-C DIR/config.toml``, ``--resume`` of an older config)."""

from __future__ import annotations

import socket
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from taketurns import ModelEndpointError, read_episodes
from taketurns._cli.main import main
from taketurns._models.messages import UserMessage
from taketurns._models.model import ModelRequest
from taketurns.http import OpenAIClient


@pytest.fixture
def silent_url() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (the kernel completes
    the handshake of a listening socket nobody accepts on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_client_flags_reach_the_stored_config(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "kuhn-poker", "-n", "2", "-o", str(out), "--no-progress"]
    flags = ["--request-timeout", "7", "--request-retries=1", "--request-backoff", "0.25"]
    assert main([*args, *flags, "--preflight-timeout", "3"]) == 0
    stored = tomllib.loads((out / "config.toml").read_text())
    assert stored["request_timeout_s"] == 7.0
    assert stored["request_retries"] == 1
    assert stored["request_backoff_s"] == 0.25
    assert stored["preflight_timeout_s"] == 3.0
    assert "output_dir" not in stored  # a directory's config does not hold its location


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("--request-timeout=soon", "request_timeout_s = 'soon': expected a number"),
        ("--request-retries=-1", "request_retries = -1: expected an integer >= 0"),
        ("--preflight-timeout=0", "preflight_timeout_s = 0"),
    ],
)
def test_a_bad_client_flag_names_its_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, needle: str
) -> None:
    assert main(["eval", "kuhn-poker", "-n", "1", "-o", str(tmp_path / "r"), flag]) == 2
    assert needle in capsys.readouterr().err


async def test_the_timeout_error_names_the_flag(silent_url: str) -> None:
    client = OpenAIClient(silent_url, timeout=0.3, retries=0)
    request = ModelRequest("m", (UserMessage("hi"),), (), {})
    with pytest.raises(ModelEndpointError) as info:
        await client.complete(request)
    await client.aclose()
    assert "within the 0.3s timeout" in str(info.value)
    assert "--request-timeout S" in str(info.value)


def test_a_silent_endpoint_is_named_and_given_up_on_after_the_preflight_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], silent_url: str
) -> None:
    out = tmp_path / "run"
    args = ["eval", "kuhn-poker", "-n", "1", "--model", "m", "--base-url", silent_url]
    start = time.monotonic()
    assert main([*args, "-o", str(out), "--preflight-timeout", "1"]) == 2
    took = time.monotonic() - start
    err = " ".join(capsys.readouterr().err.split())
    assert f"checking {silent_url} (model m; up to 1 s)" in err
    assert "did not answer within 1 s" in err
    assert "--preflight-timeout S" in err
    assert took < 10  # not 600 s x 4 attempts
    assert not out.exists()


def test_a_stored_config_reruns_into_a_new_directory_unless_o_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "kuhn-poker", "-n", "2", "--no-progress", "--env.seed=5"]) == 0
    (first,) = (tmp_path / "outputs").iterdir()
    assert main(["eval", "-C", str(first / "config.toml"), "--no-progress"]) == 0
    runs = sorted((tmp_path / "outputs").iterdir())
    assert len(runs) == 2
    assert main(["eval", "-C", str(first / "config.toml"), "-o", "mine", "--no-progress"]) == 0
    stored = tomllib.loads((tmp_path / "mine" / "config.toml").read_text())
    assert stored["env"]["seed"] == 5
    deals = [
        sorted(
            (e["task"]["idx"], e["traces"][0]["info"]["card"])
            for e in read_episodes(r / "episodes.jsonl")
        )
        for r in [*runs, tmp_path / "mine"]
    ]
    assert deals[0] == deals[1] == deals[2]


def test_an_older_run_directory_with_its_location_stored_still_reruns_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs written before: config.toml held output_dir and lacked the newer options."""
    out = tmp_path / "old"
    assert main(["eval", "kuhn-poker", "-n", "2", "-o", str(out), "--no-progress"]) == 0
    lines = (out / "config.toml").read_text().splitlines()
    kept = [line for line in lines if not line.startswith(("request_retries", "preflight"))]
    (out / "config.toml").write_text("\n".join([f'output_dir = "{out}"', *kept]) + "\n")
    assert main(["eval", "--resume", "-o", str(out), "-n", "1", "--no-progress"]) == 2
    assert main(["eval", "--resume", "-o", str(out), "--no-progress"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "-C", str(out / "config.toml"), "--no-progress"]) == 0
    (rerun,) = (tmp_path / "outputs").iterdir()
    assert len(list(read_episodes(rerun / "episodes.jsonl"))) == 2


def test_a_list_in_harness_options_is_written_as_toml_and_a_comma_list_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "kuhn-poker", "-n", "1", "--no-progress", "--env.player0.harness=program"]
    chat = "python,-m,taketurns.harnesses.programs.chat"
    assert (
        main([*args, "-o", str(tmp_path / "a"), f"--env.player0.harness_options.command={chat}"])
        == 2
    )
    err = " ".join(capsys.readouterr().err.split())
    assert """harness_options.command='["python", "prog.py"]'""" in err
    command = f'["{sys.executable}", "-m", "taketurns.harnesses.programs.chat"]'
    out = tmp_path / "b"
    assert main([*args, "-o", str(out), f"--env.player0.harness_options.command={command}"]) == 0
    (episode,) = read_episodes(out / "episodes.jsonl")
    assert episode["ok"]
    assert episode["traces"][0]["agent"]["harness"] == "program"


def test_a_typed_list_option_takes_a_comma_list(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "kuhn-poker", "-n", "1", "-o", str(out), "--no-progress"]
    assert main([*args, "--sampling.stop=###,END", "--env.player1.sampling.stop=x,y"]) == 0
    stored = tomllib.loads((out / "config.toml").read_text())
    assert stored["sampling"]["stop"] == ["###", "END"]
    assert stored["env"]["player1"]["sampling"]["stop"] == ["x", "y"]
