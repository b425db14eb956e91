"""The sandbox is built from an allowlist: no launch style widens it
(``taketurns._procs.sandbox``).

Kuhn self-play with both seats on the adversarial ``probe.py`` (the program harness),
run the three ways a user runs taketurns that put the user's folder on ``sys.path``:
``taketurns eval ./env.py:Class`` from a project folder, ``python -m taketurns`` from
the checkout, and either with ``TMPDIR`` under the working directory (every rollout's
scratch inside the user's folder). The folder holds a canary and a fake ``.env``;
``TMPDIR`` a canary; host Unix sockets listen in a visible and in a hidden folder. In
every style no probe reads a canary, the ``.env``, the opponent's card or
``/etc/shadow``, connects to a host socket or lists the user's folder; it runs as an
unprivileged uid with a small ``/dev/shm``; nothing is left in ``TMPDIR``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from agentprocs import leftovers
from agentseats import scratch_root, server  # noqa: F401 - fixtures
from test_containment import (  # noqa: F401 - host_sockets: a fixture
    PROBE,
    PROBE_SHELL,
    host_sockets,
    none_left,
    none_left_async,
    reports,
    shell_call,
)

from taketurns import read_episodes
from taketurns._procs.limits import delegated_cgroup
from taketurns.http import InterceptionServer

CHECKOUT = Path(__file__).resolve().parent.parent
# what the trace says enforced the limits: cgroup v2 too where it is delegated
ENFORCED_BY = ("cgroup2+" if delegated_cgroup() else "") + "rlimits+supervisor"
ENV_FILE = """\
from taketurns.envs.kuhn import KuhnPoker


class ProbeKuhn(KuhnPoker):
    '''Kuhn poker, named by file.'''
"""


def config(folder: Path, env: dict[str, str], *, env_id: str | None) -> Path:
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    options = f"{{ command = {json.dumps([sys.executable, str(PROBE)])}, env = {{ {table} }} }}"
    seats = "".join(
        f'[env.{seat}]\nharness = "program"\nharness_options = {options}\n'
        for seat in ("player0", "player1")
    )
    path = folder / "eval.toml"
    path.write_text((f'env_id = "{env_id}"\n' if env_id else "") + seats)
    return path


def launch(style: str, proj: Path, temp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """The eval started the way ``style`` says, from the folder it names."""
    out = ["-n", "6", "-c", "2", "-o", str(proj / "run"), "--no-progress"]
    host = {**os.environ, "TMPDIR": str(temp)}
    if style == "module_from_checkout":
        argv = [sys.executable, "-m", "taketurns", "eval", "kuhn-poker"]
        argv += ["-C", str(config(proj, env, env_id="kuhn-poker")), *out]
        cwd = CHECKOUT
    else:
        (proj / "env.py").write_text(ENV_FILE)
        console = shutil.which("taketurns", path=os.path.dirname(sys.executable))
        assert console is not None
        argv = [console, "eval", "./env.py:ProbeKuhn", "-C", str(config(proj, env, env_id=None))]
        argv += out
        cwd = proj
    return subprocess.Popen(
        argv, cwd=cwd, env=host, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.mark.parametrize("style", ["env_file", "module_from_checkout", "env_file_tmpdir_in_cwd"])
def test_no_launch_style_widens_the_sandbox(
    tmp_path: Path, host_sockets: list[str], style: str
) -> None:
    mark = uuid.uuid4().hex
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "canary.txt").write_text(f"tt-canary-{mark}")
    (proj / ".env").write_text("OPENAI_API_KEY=sk-fake-project-key\n")
    temp = (proj if style.endswith("tmpdir_in_cwd") else tmp_path) / "tmp"
    temp.mkdir(exist_ok=True)
    (temp / "canary.txt").write_text(f"tt-canary-{mark}")
    cwd = CHECKOUT if style == "module_from_checkout" else proj
    env = {
        "TT_PROBE_MARK": mark,
        "TT_CANARIES": os.pathsep.join(
            [str(proj / "canary.txt"), str(proj / ".env"), str(temp / "canary.txt")]
        ),
        "TT_FOLDERS": os.pathsep.join(dict.fromkeys([str(cwd), str(proj), str(temp)])),
        "TT_HOST_SOCKETS": os.pathsep.join(host_sockets),
    }
    process = launch(style, proj, temp, env)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    episodes: list[dict[str, Any]] = list(read_episodes(proj / "run" / "episodes.jsonl"))
    assert len(episodes) == 6
    probes = 0
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        cards = {t["info"]["seat"]: t["info"]["card"] for t in episode["traces"]}
        for trace in episode["traces"]:
            assert trace["info"]["sandbox"] == "bwrap"
            assert trace["info"]["sandbox_limits"]["enforced_by"] == ENFORCED_BY
            opponent = cards[1 - trace["info"]["seat"]]
            for report in reports(trace):
                probes += 1
                assert report["canaries"] == []  # no canary, no .env
                seen = report["folders"]
                assert seen[str(proj)] is None or set(seen[str(proj)]) <= {"tmp"}
                temp_seen = seen[str(temp)] or []  # its own scratch, at most
                assert all(n.startswith("taketurns-") for n in temp_seen), temp_seen
                assert len(temp_seen) <= 1, temp_seen
                # the checkout: only the package's folders and the probe's
                assert set(seen[str(cwd)] or []) <= {"engine", "harnesses", "envs", "tests", "tmp"}
                assert report["sockets"] == []  # no host Unix socket
                assert report["foreign"] == []  # no other rollout's scratch
                assert report["homes"] == []
                assert report["shadow"] is False
                assert report["uid"] == 65534  # unprivileged inside
                assert 0 < report["shm_bytes"] <= 256 * 1024 * 1024
                assert f"Your card: {opponent}" not in json.dumps(report)
    assert probes >= 12
    assert none_left(mark) == []
    assert leftovers(temp) == []


# installed by .ci/run: one pinned CLI under a home prefix, as `npm install --prefix`
# (or nvm, or an npm user prefix) puts it, outside every tree the sandbox binds whole
HOME_PREFIX = Path.home() / ".taketurns-ci" / "npm-home"
HOME_GEMINI = HOME_PREFIX / "node_modules" / ".bin" / "gemini"


async def test_an_agent_cli_installed_under_a_home_prefix_runs_sandboxed(
    server: InterceptionServer, scratch_root: Path
) -> None:
    """Its install tree is resolved from the agent's own argv (not the supervisor's,
    the interpreter): the CLI starts, runs its shell, and sees nothing of the home
    but its own install tree."""
    from scripted import ScriptedModel, tool_results

    from taketurns import Agent, AgentConfig, Task
    from taketurns._exchange.agent import make_harness

    assert HOME_GEMINI.exists(), f"run .ci/run: it installs gemini-cli under {HOME_PREFIX}"
    mark = uuid.uuid4().hex
    command = f"{PROBE_SHELL} > probe.out 2>&1; cat probe.out"  # no pty: a file
    options = {"binary": str(HOME_GEMINI), "approval_mode": "yolo", "env": {"TT_PROBE_MARK": mark}}
    agent = Agent(
        "agent",
        AgentConfig(model="builtin/echo"),
        client=ScriptedModel(shell_call("gemini-cli", command), "probed"),
        harness=make_harness("gemini-cli", options, field="env.agent"),
        services={"interception": server},
    )
    with trio.fail_after(120):
        async with agent.chat(Task(0, prompt="probe")) as session:
            reply = await session.turn()
    assert reply.text == "probed", session.trace.errors
    assert session.trace.info["sandbox"] == "bwrap"
    results = tool_results(session.trace)
    [line] = [ln for r in results for ln in r.splitlines() if "PROBE {" in ln]
    report = json.loads(line[line.index("PROBE {") :].removeprefix("PROBE "))
    assert report["uid"] == 65534
    assert report["homes"] == [f"{Path.home()}/.taketurns-ci"]  # its own install tree only
    assert await none_left_async(mark) == []
    assert leftovers(scratch_root) == []
