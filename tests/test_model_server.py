"""A model server the eval owns (``taketurns._models.server``, ``--model-server``),
driven by a real server command: ``taketurns serve`` (the built-in model over HTTP,
with ``GET /v1/models``), so that these tests need no llama.cpp. The llama.cpp
command itself is tested in tests/test_real_model.py.

Every path ends with the server's process group gone and reaped: a finished eval,
a server that cannot start, one that is not ready in time, one that dies during the
eval, a SIGINT to the CLI, and a SIGKILLed CLI (the server is an owned process: its
supervisor's lifeline). Processes are counted by a marker in their environment: the
eval, the server's supervisor, the server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx2
import pytest
import trio
from procs import children, marked, scratch_dirs

from taketurns._cli.main import main
from taketurns._errors import ConfigError
from taketurns._models.server import ModelServer, parse_command
from taketurns.errors import ModelServerError

SERVE = (
    f"{shlex.quote(sys.executable)} -m taketurns serve --host 127.0.0.1 --port {{port}} "
    "--name served-model"  # the name the evals below run (any other is refused)
)


def _server(command: str, tmp_path: Path, *, timeout: float = 60.0, **kw: object) -> ModelServer:
    return ModelServer(
        parse_command(command, field="model_server"),
        "test server",
        timeout,
        log=tmp_path / "model-server.log",
        **kw,  # type: ignore[arg-type]
    )


def _gone(pid: int) -> bool:
    """Reaped (no such process) — not a zombie of ours either."""
    return not Path(f"/proc/{pid}").exists()


def _program(server: ModelServer) -> int:
    """The server's own process: its supervisor's only child."""
    ((pid, _),) = children(server._process.pid)  # type: ignore[union-attr]
    return pid


def _taketurns(marker: str, *args: str) -> subprocess.Popen[str]:
    """``taketurns ARGS`` in a subprocess whose environment carries ``marker``
    (``NAME=VALUE``), its output captured."""
    name, value = marker.split("=")
    return subprocess.Popen(
        [sys.executable, "-m", "taketurns", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, name: value},
    )


def _none_left(marker: str, within: float = 30.0) -> list[int]:
    """``marked(marker)`` once it is empty (a stopping server takes a moment), or
    what is left after ``within`` seconds."""
    deadline = time.monotonic() + within
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return marked(marker)


async def test_a_server_is_ready_when_it_answers_and_is_stopped_and_reaped(
    tmp_path: Path,
) -> None:
    server = _server(SERVE, tmp_path, expect_model="builtin/bracket")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.run)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url)
        async with httpx2.AsyncClient() as client:
            answer = await client.get(f"{url}/models")
        assert answer.status_code == 200
        pid = server._process.pid  # type: ignore[union-attr]
        assert not _gone(pid)
        server.stop()
    assert _gone(pid)
    assert server.base_url is None
    log = (tmp_path / "model-server.log").read_text()
    assert log.startswith("$ ")
    assert "--port" in log


async def test_cancelling_a_starting_server_stops_it(tmp_path: Path) -> None:
    # a "server" that never listens: cancelled while it starts, it is killed at once
    server = _server("sleep 3600 {port}", tmp_path)
    with trio.move_on_after(1.0):
        await server.run()
    pid = server._process.pid  # type: ignore[union-attr]
    assert _gone(pid)


async def test_a_server_not_ready_in_time_is_a_clear_error(tmp_path: Path) -> None:
    server = _server("sleep 3600 {port}", tmp_path, timeout=0.5)
    with pytest.raises(ModelServerError, match=r"did not answer on .*/v1/models within 0.5 s"):
        await server.run()
    assert _gone(server._process.pid)  # type: ignore[union-attr]


async def test_a_server_that_exits_before_it_is_ready_quotes_its_log(tmp_path: Path) -> None:
    script = "print('no GPU here'); raise SystemExit(3)"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} {{port}}"
    server = _server(command, tmp_path)
    with pytest.raises(ModelServerError) as caught:
        await server.run()
    message = str(caught.value)
    assert "exited with code 3 before it was ready" in message
    assert "no GPU here" in message
    assert str(tmp_path / "model-server.log") in message


async def test_a_command_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    server = _server("/no/such/server --port {port}", tmp_path)
    with pytest.raises(ModelServerError, match=r"could not start the model server.*/no/such/"):
        await server.run()
    assert server._process is None


async def test_a_stopped_server_gets_sigterm_and_its_grace(tmp_path: Path) -> None:
    # a server that shuts down cleanly on SIGTERM (as uvicorn, llama.cpp's, does)
    script = (
        "import http.server, signal, sys\n"
        "def stop(*_): print('shut down cleanly', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "class Models(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), Models).serve_forever()\n"
    )
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} {{port}}"
    server = _server(command, tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        program = _program(server)
        server.stop()
    assert _gone(program)
    assert await server._process.wait() == 0  # type: ignore[union-attr]
    assert "shut down cleanly" in (tmp_path / "model-server.log").read_text()


async def test_a_server_that_dies_during_the_eval_fails_it(tmp_path: Path) -> None:
    server = _server(SERVE, tmp_path)
    died = pytest.RaisesExc(ModelServerError, match="exited with code 137 during")  # SIGKILL
    with pytest.RaisesGroup(died):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            program = _program(server)
            os.kill(program, signal.SIGKILL)
    assert _gone(program)
    assert _gone(server._process.pid)  # type: ignore[union-attr]


async def test_a_ready_server_outlives_the_cancellation_of_its_nursery_until_stopped(
    tmp_path: Path,
) -> None:
    # an interrupted eval still closes and scores its episodes on the server
    server = _server(SERVE, tmp_path)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(server.run)
        nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True):
            async with httpx2.AsyncClient() as client:
                assert (await client.get(f"{url}/models")).status_code == 200
            server.stop()
    assert _gone(server._process.pid)  # type: ignore[union-attr]


def test_a_command_needs_its_port_placeholder() -> None:
    with pytest.raises(ConfigError, match=r"put \{port\} where the server takes its port"):
        parse_command("vllm serve Qwen/Qwen3-8B --port 8000", field="model_server")
    with pytest.raises(ConfigError, match="model_server: empty"):
        parse_command("", field="model_server")


def test_eval_runs_on_a_model_server_and_stops_it(tmp_path: Path, monkeypatch) -> None:
    marker = f"TAKETURNS_TEST_SERVER={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "4", "-c", "2", "-o", str(out), "--no-progress"]
    argv += ["--model", "served-model", "--model-server", SERVE]
    assert main(argv) == 0
    assert marked(marker) == [], "the server (and its group) is gone"
    assert children() == [] or all(state != "Z" for _, state in children())
    log = (out / "model-server.log").read_text()
    assert "taketurns serve" in log
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 4
    assert all(e["ok"] for e in episodes)
    assert {t["agent"]["model"] for e in episodes for t in e["traces"]} == {"served-model"}
    config = (out / "config.toml").read_text()
    assert "model_server = " in config
    assert "{port}" in config


def test_roles_with_their_own_endpoint_or_the_builtin_model_start_no_server(
    tmp_path: Path, monkeypatch
) -> None:
    marker = f"TAKETURNS_TEST_SERVER={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    out = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "-o", str(out), "--no-progress"]
    argv += ["--model-server", "/no/such/server --port {port}"]  # builtin/bracket: not used
    assert main(argv) == 0
    assert not (out / "model-server.log").exists()


def test_worker_backends_refuse_a_model_server(capsys) -> None:
    argv = ["eval", "kuhn-poker", "-n", "2", "--model", "m", "--backend", "processes"]
    assert main([*argv, "--model-server", SERVE]) == 2
    assert "runs with --backend local" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGKILL"])
def test_a_stopped_eval_stops_its_server(tmp_path: Path, stop: str) -> None:
    """SIGINT: the eval stops its server before it exits 130. SIGKILL: no cleanup runs
    in it; the server's supervisor sees its lifeline cut and stops the server."""
    marker = f"TAKETURNS_TEST_SERVER={uuid.uuid4().hex}"
    out = tmp_path / "run"
    serve = SERVE + " --latency-ms 50"
    args = ["eval", "kuhn-poker", "-n", "200", "-c", "2", "-o", str(out), "--no-progress"]
    args += ["--model", "served-model", "--model-server", serve]
    try:
        with _taketurns(marker, *args) as proc:
            deadline = time.monotonic() + 60
            path = out / "episodes.jsonl"
            while (not path.exists() or not path.read_text()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(marked(marker)) == 3  # the eval, the server's supervisor, the server
            proc.send_signal(getattr(signal, stop))
            _, err = proc.communicate(timeout=60)
        if stop == "SIGINT":
            assert proc.returncode == 130, err
            assert marked(marker) == []  # stopped and reaped before the eval exited
        else:
            assert _none_left(marker) == []
    finally:
        for pid in marked(marker):  # a failed test's server, killed all the same
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


async def test_open_rollouts_starts_and_stops_the_model_server(tmp_path: Path, monkeypatch) -> None:
    from taketurns import EvalConfig, open_rollouts
    from taketurns.envs.kuhn import KuhnPoker

    marker = f"TAKETURNS_TEST_SERVER={uuid.uuid4().hex}"
    monkeypatch.setenv(*marker.split("="))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no run directory: logs there
    env = KuhnPoker()
    config = EvalConfig(env_id="kuhn-poker", model="served-model", model_server=SERVE)
    async with open_rollouts(env, config) as source:
        assert len(marked(marker)) == 2  # the server and its supervisor, up before any episode
        async for group in source.groups(env.tasks(2), per_task=2):
            assert all(e.ok for e in group.episodes)
            assert group.samples()  # taketurns serve returns vLLM's token fields
        (logs,) = scratch_dirs(tmp_path)
        assert logs.startswith("taketurns-model-server-")
    assert marked(marker) == []
    assert scratch_dirs(tmp_path) == []  # the log's directory is removed


@pytest.mark.slow
def test_sigint_while_the_server_starts_stops_it(tmp_path: Path) -> None:
    marker = f"TAKETURNS_TEST_SERVER={uuid.uuid4().hex}"
    out = tmp_path / "run"
    args = ["eval", "kuhn-poker", "-n", "2", "-o", str(out), "--no-progress"]
    args += ["--model", "served-model", "--model-server", "sleep 3600 {port}"]
    with _taketurns(marker, *args) as proc:
        deadline = time.monotonic() + 60
        while len(marked(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the eval has started its (never ready) server
        assert len(marked(marker)) == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert marked(marker) == []
