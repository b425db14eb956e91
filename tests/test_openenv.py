"""openenv: a real OpenEnv server (the number-guess game the project ships, built with
openenv-core, served by ``taketurns.envs.openenv_serve``) played over its WebSocket;
replies are read as actions and never stepped when unreadable; the server's failures
fail the episode. Importing openenv-core takes ~20 s, so one server serves the module
(``env.url``); one test lets the eval start and stop its own.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import hypothesis
import hypothesis.strategies as st
import pytest
import trio
from httpservers import serve_app
from procs import children
from quart import websocket
from quart_trio import QuartTrio

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    Episode,
    ModelEndpointError,
    OptionError,
    Trace,
)
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient, env_registry
from taketurns.envs.openenv import OpenEnv, OpenEnvConfig
from taketurns.envs.openenv_actions import ActionSchema, InvalidReply, parse_action
from taketurns.envs.openenv_client import OpenEnvError, ServerProcess
from taketurns.harness import text_of
from taketurns.testing import BuiltinModel, ScriptedModel, run_episode

# a missing dependency fails, naming it (never a skip); openenv-core is only looked
# up here (importing it takes ~20 s: the server process does that)
for _package in ("openenv", "trio_websocket"):
    if importlib.util.find_spec(_package) is None:
        raise ImportError(f"needs {_package} (the openenv extra): pip install -e '.[test]'")

GUESS = {
    "properties": {
        "metadata": {"type": "object"},
        "guess": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["guess"],
    "type": "object",
}
MOVE = {
    "properties": {
        "direction": {"type": "string", "enum": ["north", "south"]},
        "steps": {"type": "integer"},
    },
    "required": ["direction"],
}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One real OpenEnv server for the module: its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "taketurns.envs.openenv_serve", "taketurns.envs.openenv_game:app"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[1]
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx2.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert process.poll() is None, "the OpenEnv server exited"
            assert time.monotonic() < deadline, "the OpenEnv server did not become healthy"
            time.sleep(0.25)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def secret(seed: int, high: int = 8) -> int:
    """The number the shipped game picks for ``seed`` (its documented rule)."""
    return random.Random(seed).randint(1, high)


async def play(
    env: OpenEnv,
    client: ModelClient | None = None,
    idx: int = 0,
    config: AgentConfig | None = None,
) -> Episode:
    task = env.tasks(idx + 1)[idx]

    def make(
        role: str, cfg: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        return Agent(
            role,
            config or cfg,
            client=client or BuiltinModel("bracket"),
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    episode = Episode(f"openenv/{idx}/0", "openenv", task)
    return await run_episode(env, episode, make)


def user_texts(model: ScriptedModel) -> list[str]:
    return [text_of(request.messages[-1].content) for request in model.requests]


# --- reading replies (pure) -------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        '{"guess": 5}',
        'I will guess.\n```json\n{"guess": 5}\n```',
        'My answer is {"guess": 5} because...',
        "5",
        "[5]",
        " `5` ",
    ],
)
def test_a_reply_is_read_as_an_action(reply: str) -> None:
    assert parse_action(reply, ActionSchema(GUESS)) == {"guess": 5}


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "the reply is empty"),
        ("   ", "the reply is empty"),
        ("hello", "'hello' is not a integer"),
        ('{"guess": "five"}', 'guess must be a integer, not "five"'),
        ('{"guess": true}', "guess must be a integer, not true"),
        ('{"gues": 5}', "unknown field(s) gues"),
        ("{}", "missing required field(s) guess"),
    ],
)
def test_an_unreadable_reply_says_what_is_wrong(reply: str, problem: str) -> None:
    with pytest.raises(InvalidReply) as info:
        parse_action(reply, ActionSchema(GUESS))
    assert problem in str(info.value)


def test_a_many_field_action_needs_an_object() -> None:
    schema = ActionSchema(MOVE)
    assert schema.single_field is None
    assert parse_action('{"direction": "north", "steps": 2}', schema)["steps"] == 2
    with pytest.raises(InvalidReply, match="must be one of"):
        parse_action('{"direction": "west"}', schema)
    with pytest.raises(InvalidReply, match="no JSON action object"):
        parse_action("north", schema)


@hypothesis.given(st.integers(min_value=-(10**12), max_value=10**12))
def test_any_integer_reads_the_same_every_way(n: int) -> None:
    schema = ActionSchema(GUESS)
    for reply in (str(n), f"[{n}]", json.dumps({"guess": n}), f"```\n{n}\n```"):
        assert parse_action(reply, schema) == {"guess": n}


# --- episodes against the real server ---------------------------------------------


def test_registered_and_its_options_are_checked() -> None:
    assert env_registry.get("openenv") is OpenEnv
    assert list(OpenEnv(OpenEnvConfig(url="http://127.0.0.1:1")).roles) == ["player"]
    for bad in ({"url": "ws://x"}, {"app": "nocolon"}, {"resets": [1]}, {"max_steps": 0}):
        with pytest.raises(OptionError):
            OpenEnvConfig(**bad)  # type: ignore[arg-type]


async def test_guesses_are_stepped_and_rewards_summed(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server, seed=3))
    answer = secret(3)
    wrong = 8 if answer != 8 else 1
    model = ScriptedModel(f"[{wrong}]", f'```json\n{{"guess": {answer}}}\n```')
    episode = await play(env, model)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.info["rewards"] == [0.0, 1.0]
    assert trace.rewards == {"total_reward": 1.0}
    assert trace.metrics == {"done": 1.0, "invalid_replies": 0.0, "steps": 2.0}
    first, second = user_texts(model)
    assert "I picked a number from 1 to 8" in first
    assert '"guess"' in first  # the action schema
    assert '"metadata"' not in first
    assert "Reward: 0" in second
    assert "too high" in second or "too low" in second
    assert trace.episode.id == "openenv/0/0"


async def test_unreadable_and_refused_replies_are_never_stepped(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server, seed=5, invalid_retries=3))
    answer = secret(5)
    wrong = 8 if answer != 8 else 1
    # "", prose, and 0 (refused by the server's own schema: minimum 1), then a guess
    model = ScriptedModel(f"{wrong}", "", "no idea", "0", str(answer))
    episode = await play(env, model)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.info["steps"] == 2
    assert trace.info["invalid_replies"] == 3
    assert trace.rewards == {"total_reward": 1.0}
    texts = user_texts(model)
    assert "the reply is empty (3 tries left)" in texts[2]
    assert "'no idea' is not a integer (2 tries left)" in texts[3]
    assert "guess: Input should be greater than or equal to 1 (1 try left)" in texts[4]
    for text in texts[2:]:  # each re-ask shows the current observation: one guess used
        assert '"guesses_left": 3' in text


async def test_the_retry_budget_runs_out(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server, invalid_retries=1))
    episode = await play(env, ScriptedModel("", "still nothing", "5"))
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.info["gave_up"]
    assert trace.info["steps"] == 0
    assert trace.rewards == {"total_reward": 0.0}
    assert trace.metrics["invalid_replies"] == 2.0


async def test_resets_come_from_the_list_and_max_steps_ends(server: str) -> None:
    resets = [{"seed": 1, "high": 3, "max_guesses": 3}, {"seed": 2, "high": 50}]
    env = OpenEnv(OpenEnvConfig(url=server, resets=resets, max_steps=1))
    assert [t.info["reset"] for t in env.tasks(3)] == [resets[0], resets[1], resets[0]]
    answer = secret(2, 50)
    model = ScriptedModel(str(answer % 50 + 1))
    episode = await play(env, model, idx=1)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert "from 1 to 50" in user_texts(model)[0]
    assert trace.info["steps"] == 1
    assert trace.metrics["done"] == 0.0


async def test_builtin_model_plays_the_game(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server))
    for idx in range(3):
        episode = await play(env, idx=idx)
        assert episode.ok, episode.errors
        (trace,) = episode.traces
        assert trace.info["done"]
        assert trace.info["invalid_replies"] == 0


# --- failures ---------------------------------------------------------------------


async def test_a_bad_reset_fails_the_episode(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server, resets=[{"high": 0}]))
    episode = await play(env, ScriptedModel("1"))
    assert not episode.ok
    assert "reset {'high': 0} failed: reset: need 1 <= high" in episode.errors[0].message


async def test_a_failing_model_fails_the_episode(server: str) -> None:
    env = OpenEnv(OpenEnvConfig(url=server))
    episode = await play(env, ScriptedModel(ModelEndpointError("down", status=503)))
    assert not episode.ok
    assert "the player's run failed (model_error)" in episode.errors[0].message
    assert episode.traces[0].stop_condition == "model_error"


async def test_no_server_fails_the_episode_clearly() -> None:
    env = OpenEnv(OpenEnvConfig(url="http://127.0.0.1:9"))
    await env.setup()
    episode = await play(env, ScriptedModel("1"))
    await env.finalize()
    assert not episode.ok
    assert "http://127.0.0.1:9: cannot read its /schema" in episode.errors[0].message


def fault_app(mode: str) -> QuartTrio:
    """/schema answers the guess schema; /ws then misbehaves as ``mode`` says."""
    app = QuartTrio(__name__)

    @app.get("/schema")
    async def schema() -> Any:
        return {"action": GUESS}

    @app.websocket("/ws")
    async def ws() -> None:
        await websocket.accept()
        await websocket.receive()
        if mode == "close":
            await websocket.close(1011, "going away")
            return
        if mode == "garbage":
            await websocket.send("<html>")
        await trio.sleep_forever()

    return app


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("hang", "no answer to reset within 0.5s"),
        ("close", "the connection closed during reset"),
        ("garbage", "not an OpenEnv message: '<html>'"),
    ],
)
async def test_server_faults_fail_the_episode(mode: str, needle: str) -> None:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_app, fault_app(mode))
        env = OpenEnv(OpenEnvConfig(url=url, step_timeout_s=0.5))
        with trio.fail_after(10):
            episode = await play(env, ScriptedModel("1"))
        nursery.cancel_scope.cancel()
    assert not episode.ok
    assert episode.stop == "env_error"
    assert needle in episode.errors[0].message


async def test_a_server_that_cannot_start_fails_each_episode(tmp_path: Path) -> None:
    env = OpenEnv(OpenEnvConfig(app="no_such_module_here:app", start_timeout_s=60))
    with trio.fail_after(60):
        await env.setup()
    try:
        episode = await play(env, ScriptedModel("1"))
    finally:
        await env.finalize()
    assert not episode.ok
    message = episode.errors[0].message
    assert "the OpenEnv server for no_such_module_here:app exited" in message
    assert "No module named 'no_such_module_here'" in message


async def test_server_process_stop_is_idempotent() -> None:
    server = ServerProcess("no_such_module_here:app")
    with pytest.raises(OpenEnvError):
        await server.start(timeout=60)
    assert not server.running
    await server.stop()


def test_without_a_url_the_default_app_needs_openenv_core() -> None:
    # installed here, so the default config builds; a missing one is a ConfigError
    assert OpenEnv().config.app == "taketurns.envs.openenv_game:app"
    assert issubclass(ConfigError, Exception)


# --- the command line: the eval starts its own server and stops it ----------------


def test_eval_openenv_serves_the_shipped_game_for_the_eval(tmp_path: Path) -> None:
    out = tmp_path / "run"
    before = children()
    assert main(["eval", "openenv", "-n", "3", "-o", str(out), "--no-progress"]) == 0
    assert children() == before  # the server was stopped and reaped
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 3
    for line in lines:
        episode = json.loads(line)
        assert episode["ok"], episode["errors"]
        (trace,) = episode["traces"]
        assert trace["info"]["done"]
        assert trace["info"]["steps"] >= 1
        assert trace["reward"] == sum(trace["info"]["rewards"])
