"""A real multi-node Ray cluster on this machine, one worker node killed mid-run.

Run as ``unshare --net --pid --fork --mount-proc python tests/raycluster.py OUT``
(tests/test_ray_cluster.py does): in a network namespace of its own, whose only
interface is loopback, Ray's nodes advertise 127.0.0.1 (outside one, Ray replaces a
loopback ``--node-ip-address`` with the machine's routed address), and in a PID
namespace of its own, so nothing the cluster starts outlives this script (the kernel
kills the namespace with its first process) and ``ray stop`` sees only this cluster.

It starts a head (no CPUs: episodes run on the workers only) and two worker nodes of
one CPU each (``ray start``, each its own raylet), runs ``taketurns eval kuhn-poker
--backend ray`` against the cluster, SIGKILLs the first worker node's raylet and
every process under it once ``KILL_AFTER`` episodes are on disk, and prints one JSON
object: the eval's exit status and output, and the node that was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORT = 6399
NODE_PORTS = (43211, 43212)  # each worker node's node manager: how its raylet is found
EPISODES = 120
KILL_AFTER = 12


def _ray(*args: str, env: dict[str, str]) -> None:
    """Run ``ray ARGS``; a failed ``ray start`` is stopped and tried once more (under
    load a node may miss Ray's own start-up deadline: once in a CI run, a head), its
    output printed to stderr; a second failure ends the script quoting Ray's output."""
    for attempt in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "ray.scripts.scripts", *args],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=180,
        )
        if not done.returncode:
            return
        tail = done.stderr.decode(errors="replace")[-2000:]
        message = f"ray {' '.join(args)} exited {done.returncode} (attempt {attempt}):\n{tail}"
        if args[0] != "start" or attempt == 2:
            raise SystemExit(message)
        print(message, file=sys.stderr)
        if "--head" in args:
            _stop(env)


def _stop(env: dict[str, str]) -> None:
    """``ray stop --force``: every Ray process of this namespace, whatever it says."""
    subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
        env=env,
        check=False,
        capture_output=True,
        timeout=180,
    )


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _kill_node(node_port: int) -> list[int]:
    """SIGKILL the raylet whose node manager listens on ``node_port``, and every
    process below it (its workers and agents): the node is gone, as a lost machine."""
    raylet = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"raylet")
            and f"--node_manager_port={node_port}".encode() in argv
        ):
            raylet = int(entry.name)
    if raylet is None:
        raise SystemExit(f"no raylet listens on node manager port {node_port}")
    tree, victims, todo = _children(), [], [raylet]
    while todo:
        pid = todo.pop()
        victims.append(pid)
        todo.extend(tree.get(pid, []))
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return victims


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def main(out: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    # TMPDIR is the machine's /tmp (test_ray_cluster.py): Ray's socket paths under it
    # must stay within AF_UNIX's 107 bytes, and a worker node finds the head's session
    # only under the default temp dir; the head's own temp dir is removed at the end
    temp = tempfile.mkdtemp(prefix="ray")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1")
    env["HOME"] = temp  # a user's ~/.ray/auth_token (another cluster's) is never read
    # token authentication on, with this cluster's own token in every process's
    # environment (head, workers, the eval's driver): Ray since 2.52 may require one
    # (a CI run's head exited 1: "Token authentication is enabled but no authentication
    # token was found"), and versions before it ignore both variables
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    # the worker nodes' sessions are under the default temp dir: those this run made
    # are removed at the end too, as is the head's temp dir, on every path
    sessions = Path(tempfile.gettempdir()) / "ray"
    before = set(sessions.iterdir()) if sessions.is_dir() else None
    try:
        result = _cluster(out, env, temp)
    finally:
        _stop(env)
        shutil.rmtree(temp, ignore_errors=True)
        _remove_new_sessions(sessions, before)
    print(json.dumps(result))


def _remove_new_sessions(sessions: Path, before: set[Path] | None) -> None:
    """Remove what this run added under Ray's default temp dir (``before``: what was
    there, None when it did not exist), and a ``session_latest`` left dangling."""
    if not sessions.is_dir():
        return
    if before is None:
        shutil.rmtree(sessions, ignore_errors=True)
        return
    for path in set(sessions.iterdir()) - before:
        if path.name.startswith("session_2"):
            shutil.rmtree(path, ignore_errors=True)
    latest = sessions / "session_latest"
    if latest.is_symlink() and not latest.exists():
        latest.unlink()


def _cluster(out: Path, env: dict[str, str], temp: str) -> dict[str, object]:
    """Start the cluster, run the eval, kill a node mid-run: what happened."""
    common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    _ray(
        "start",
        "--head",
        f"--port={PORT}",
        "--num-cpus=0",
        "--include-dashboard=false",
        f"--temp-dir={temp}",
        *common,
        env=env,
    )
    for port in NODE_PORTS:
        _ray(
            "start",
            f"--address=127.0.0.1:{PORT}",
            "--num-cpus=1",
            f"--node-manager-port={port}",
            *common,
            env=env,
        )
    run = out / "run"
    eval_cmd = [
        sys.executable,
        "-m",
        "taketurns",
        "eval",
        "kuhn-poker",
        "-n",
        str(EPISODES),
        "-c",
        "2",
        "--backend",
        "ray",
        "--ray-address",
        f"127.0.0.1:{PORT}",
        "--model",
        "builtin/bracket?latency_ms=40",
        "-o",
        str(run),
        "--no-progress",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(eval_cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killed: list[int] = []
    while proc.poll() is None and time.monotonic() - started < 300:
        if not killed and _lines(run / "episodes.jsonl") >= KILL_AFTER:
            killed = _kill_node(NODE_PORTS[0])
            written_at_kill = _lines(run / "episodes.jsonl")
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate(timeout=60)
    return {
        "rc": proc.returncode,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
        "killed": killed,
        "written_at_kill": written_at_kill if killed else None,
        "episodes": EPISODES,
        "run": str(run),
    }


if __name__ == "__main__":
    main(Path(sys.argv[1]))
