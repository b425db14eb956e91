"""The preflight call: a wrong URL, key or model becomes one clear message before any
episode starts, and nothing is written."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
from httpservers import Answer, start_scripted

from taketurns import ConfigError, load_eval_config
from taketurns._cli.main import main
from taketurns._config.registry import envs
from taketurns._eval.plan import make_env, preflight


def _config(base_url: str, model: str = "my-model"):
    config = load_eval_config(
        envs.get("kuhn-poker").config_class,
        file_data={"env_id": "kuhn-poker", "base_url": base_url, "model": model},
    )
    return config, make_env(config)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        (Answer(401, {"error": {"message": "bad key"}}), "set $OPENAI_API_KEY"),
        (Answer(404, {"error": {"message": "no such model"}}), "check --base-url and --model"),
        (Answer(200, b"not json"), "my-model"),
    ],
)
async def test_a_failing_endpoint_is_one_clear_config_error(answer, needle) -> None:
    async with trio.open_nursery() as nursery:
        endpoint = await start_scripted(nursery, answer)
        config, env = _config(endpoint.base_url)
        with pytest.raises(ConfigError, match="preflight") as info:
            await preflight(config, env)
        assert needle in str(info.value)
        assert len(endpoint.seen) == 1  # one call for both seats: one endpoint
        assert endpoint.seen[0].body["max_tokens"] == 1
        nursery.cancel_scope.cancel()


async def test_a_working_endpoint_passes() -> None:
    async with trio.open_nursery() as nursery:
        endpoint = await start_scripted(nursery, Answer())
        config, env = _config(endpoint.base_url)
        await preflight(config, env)
        nursery.cancel_scope.cancel()


def test_the_cli_refuses_an_unreachable_endpoint_before_writing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    code = main(
        ["eval", "kuhn-poker", "-n", "2", "--model", "m", "--base-url", url, "-o", str(out)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "preflight" in err
    assert url in err
    assert not out.exists()
