"""Real-endpoint defaults: ``--base-url URL`` without ``--model`` runs the one model the
server lists at ``/v1/models`` (``taketurns serve`` on a real loopback port), refuses
with the list when there are several, and a bare endpoint model (``--model gpt-4o``
without a URL) is refused naming ``--base-url``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from httpservers import serve_app
from quart_trio import QuartTrio

from taketurns import read_episodes
from taketurns._cli.main import main


@pytest.fixture
def served() -> Iterator[str]:
    """``taketurns serve --policy echo`` on an ephemeral port: its base URL."""
    with subprocess.Popen(
        [sys.executable, "-m", "taketurns", "serve", "--policy", "echo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            yield proc.stdout.readline().strip()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_the_one_served_model_is_used(
    served: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "--base-url", served, "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"model builtin/echo (the one {served} serves; --model picks another)" in err
    models = {
        t["agent"]["model"] for e in read_episodes(out / "episodes.jsonl") for t in e["traces"]
    }
    assert models == {"builtin/echo"}
    assert 'model = "builtin/echo"' in (out / "config.toml").read_text()


def test_a_model_given_anywhere_is_not_asked_for(
    served: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "1", "--base-url", served, "-o", str(out), "--no-progress"]
    assert main([*argv, "--model", "builtin/echo"]) == 0
    assert "serves; --model picks another" not in capsys.readouterr().err
    # every role names its own model (one the server answers to): the list is not needed
    roles = ["--env.player0.model=builtin/echo", "--env.player1.model=echo"]
    assert main([*argv, "--overwrite", *roles]) == 0
    assert "serves; --model picks another" not in capsys.readouterr().err


def _models_app(ids: list[str]) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}

    return app


async def _eval_against(ids: list[str], tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    async with trio.open_nursery() as nursery:
        root = await nursery.start(serve_app, _models_app(ids))
        argv = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker", "--base-url", f"{root}/v1"]
        argv += ["-o", str(tmp_path / "run")]
        with trio.fail_after(120):
            proc = await trio.run_process(
                argv, capture_stdout=True, capture_stderr=True, check=False
            )
        nursery.cancel_scope.cancel()
    return proc


async def test_several_served_models_are_listed_not_guessed(tmp_path: Path) -> None:
    proc = await _eval_against(["llama-8b", "qwen-7b"], tmp_path)
    err = " ".join(proc.stderr.decode().split())
    assert proc.returncode == 2, err
    assert "serves 2 models (llama-8b, qwen-7b); name one with --model NAME" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


async def test_a_server_listing_no_model_is_refused(tmp_path: Path) -> None:
    proc = await _eval_against([], tmp_path)
    err = " ".join(proc.stderr.decode().split())
    assert proc.returncode == 2, err
    assert "serves 0 models (none); name one with --model NAME" in err


def test_an_unreachable_server_names_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "kuhn-poker", "--base-url", "http://127.0.0.1:1/v1", "-o", str(tmp_path / "r")]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the models of http://127.0.0.1:1/v1 could not be listed" in err
    assert "check --base-url, or name the model with --model NAME" in err


def test_a_bare_endpoint_model_names_base_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "kuhn-poker", "--model", "gpt-4o", "-o", str(tmp_path / "r")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "model = 'gpt-4o' (--model): an endpoint model needs its server's URL: --base-url" in err
    assert "env.player0" not in err
    # a role's own endpoint model still names the role's option
    argv = ["eval", "kuhn-poker", "--env.player1.model=gpt-4o", "-o", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "env.player1.model = 'gpt-4o'" in capsys.readouterr().err


def test_a_model_the_server_does_not_serve_fails_the_preflight(
    served: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``taketurns serve`` answers only its own names (404 ``model_not_found`` for
    another, as a real endpoint does): a wrong ``--model`` is refused before any
    episode, not played."""
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "--base-url", served, "--model", "gpt-x"]
    assert main([*argv, "-o", str(out), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "preflight: model 'gpt-x'" in err
    assert "the model 'gpt-x' does not exist here; this server serves builtin/echo, echo" in err
    assert not (out / "episodes.jsonl").exists()


def test_an_unset_api_key_variable_is_warned_about(
    served: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    argv = ["eval", "kuhn-poker", "-n", "1", "--base-url", served, "--model", "builtin/echo"]
    argv += ["--api-key-var", "NO_SUCH_KEY_VAR", "-o", str(tmp_path / "run"), "--no-progress"]
    assert main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: $NO_SUCH_KEY_VAR (the API key variable named) is not set" in err
