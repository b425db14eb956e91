"""The other commands (``envs``, ``serve``), third-party plugins through entry points,
and interruption by SIGINT followed by ``--resume`` on a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from taketurns import read_episodes
from taketurns._cli.main import main

PLUGIN = '''
import attrs
from taketurns import AgentConfig, Env, EnvConfig, Task, reward


@attrs.define
class EchoConfig(EnvConfig):
    speaker: AgentConfig = attrs.field(factory=lambda: AgentConfig(model="builtin/echo"))
    word: str = "plugged"


class EchoEnv(Env):
    """A third-party env: the speaker repeats a word."""

    config_class = EchoConfig

    def tasks(self, num_tasks):
        return [Task(idx=i, prompt=f"{self.config.word} {i}") for i in range(num_tasks)]

    async def run(self, task, agents):
        await agents.speaker.run(task)

    @reward
    def repeated(self, task, trace):
        return float(trace.last_text == task.prompt)
'''


def _install_plugin(site: Path) -> dict[str, str]:
    """A tiny installed distribution: a module plus its .dist-info with entry points."""
    (site / "echo_plugin.py").write_text(PLUGIN)
    info = site / "echo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[taketurns.envs]\necho-plugin = echo_plugin:EchoEnv\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return env


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "taketurns", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_a_plugin_env_registers_through_its_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    env = _install_plugin(site)
    listing = _run(["envs"], env)
    assert listing.returncode == 0, listing.stderr
    assert "echo-plugin" in listing.stdout
    assert "env.word" in listing.stdout
    out = tmp_path / "run"
    proc = _run(["eval", "echo-plugin", "-n", "3", "-o", str(out), "--env.word=hi"], env)
    assert proc.returncode == 0, proc.stderr
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert [e["traces"][0]["rewards"]["repeated"] for e in episodes] == [1.0, 1.0, 1.0]
    assert sorted(e["task"]["prompt"] for e in episodes) == ["hi 0", "hi 1", "hi 2"]


def test_envs_lists_envs_tasksets_harnesses_and_role_options(capsys) -> None:
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for needle in ("kuhn-poker", "env.invalid_retries", "null", "program", "stateful", "tools"):
        assert needle in out
    assert "env.<role>.limits.max_turns" in out


def test_serve_answers_over_http() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "taketurns", "serve", "--policy", "echo", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            assert url.endswith("/v1")
            body = {"model": "echo", "messages": [{"role": "user", "content": "say this"}]}
            answer = httpx2.post(f"{url}/chat/completions", json=body, timeout=30).json()
            assert answer["choices"][0]["message"]["content"] == "say this"
            # a name it does not serve is refused, as a real endpoint refuses it
            other = httpx2.post(f"{url}/chat/completions", json={**body, "model": "x"}, timeout=30)
            assert other.status_code == 404
            assert other.json()["error"]["code"] == "model_not_found"
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0


def test_an_unusable_address_is_a_clear_error() -> None:
    proc = _run(["serve", "--host", "203.0.113.1", "--port", "1"])
    assert proc.returncode == 2
    assert "cannot listen on 203.0.113.1:1" in proc.stderr


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_sigint_then_resume_has_every_episode_exactly_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "eval", "kuhn-poker", "-n", "60", "-c", "4", "-o", str(out), "--no-progress",
        "--model", "builtin/bracket?latency_ms=40",
    ]  # fmt: skip
    with subprocess.Popen(
        [sys.executable, "-m", "taketurns", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        deadline = time.monotonic() + 60
        while _lines(out / "episodes.jsonl") < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    first = list(read_episodes(out / "episodes.jsonl"))
    assert 8 <= len(first) < 60
    cancelled = [e for e in first if e["stop"] == "cancelled"]
    assert cancelled, "the episodes running at the signal are written as cancelled"
    for e in cancelled:
        assert not e["ok"]
        # a seat whose session had closed before the signal (a hand that was over, the
        # episode not yet written) keeps the reason it closed with
        assert {t["stop_condition"] for t in e["traces"]} <= {"cancelled", "user_closed"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True

    resumed = _run(["eval", "-o", str(out), "--resume", "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr
    episodes = list(read_episodes(out / "episodes.jsonl"))
    pairs = [(e["task"]["idx"], e["rollout"]) for e in episodes]
    assert sorted(pairs) == [(i, 0) for i in range(60)]  # every planned episode exactly once
    assert all(e["ok"] for e in episodes)
    finished_first = [json.dumps(e) for e in first if e["stop"] != "cancelled"]
    assert all(line in {json.dumps(e) for e in episodes} for line in finished_first)
    set_aside = list(read_episodes(out / "cancelled.jsonl"))
    assert len(set_aside) == len(cancelled)  # nothing written is lost


def test_a_busy_port_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run(["serve", "--port", str(port)])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "Exceptions from Trio nursery" not in proc.stderr
    line = f"cannot listen on 127.0.0.1:{port} ([Errno 98] Address already in use)"
    assert line in proc.stderr
    assert "pick another port with --port" in proc.stderr


def test_messages_are_not_hard_wrapped_off_a_terminal(tmp_path: Path) -> None:
    # stderr is a pipe: rich would wrap at 80 columns; every message stays one line
    out = tmp_path / ("a-long-directory-name-" * 5) / "run"
    proc = _run(["eval", "kuhn-poker", "-n", "2", "-o", str(out), "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    report = _run(["report", str(out)])
    assert report.returncode == 0, report.stderr
    lines = [*proc.stderr.splitlines(), *report.stderr.splitlines()]
    assert f"wrote {out}/report.html" in lines
    assert any(line.startswith("running kuhn-poker:") and str(out) in line for line in lines)
