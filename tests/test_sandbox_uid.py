"""The sandbox is unprivileged on the host, also when the eval runs as root (as CI
does): host root's files that only their owner or group may read stay unreadable,
and the agent still writes what the engine put in its scratch
(``taketurns._procs.sandbox``: ``host_ids``, ``hand_over``; the supervisor's
``--user``). Real bwrap, real processes; the files are named on the program's
command line, so the sandbox binds them (as it binds an agent's own files)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from taketurns._procs import owner
from taketurns._procs.sandbox import Sandbox, bwrap_path

if bwrap_path() is None:  # missing, not a condition of the host: fail naming the fix
    pytest.fail("bubblewrap is not on PATH: apt-get install bubblewrap (.ci/run)", pytrace=False)
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hole is root's: the eval is root")

PROGRAM = """
import json, os, sys
secrets, note = sys.argv[1:-1], sys.argv[-1]
def readable(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
with open(note, "a") as f:  # the engine wrote it: the agent may still append
    f.write(" and the agent's")
print(json.dumps({
    "read": {path: readable(path) for path in secrets},
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "caps": {k: status[k].strip() for k in ("CapPrm", "CapEff", "CapAmb")},
    "note": readable(note),
}))
"""


def secret(folder: Path, name: str, mode: int) -> Path:
    path = folder / name
    path.write_text(f"secret {name}")
    os.chmod(path, mode)
    assert (path.stat().st_uid, path.stat().st_gid) == (0, 0)
    return path


async def test_host_roots_owner_and_group_only_files_stay_unreadable(tmp_path: Path) -> None:
    visible = tmp_path / "visible"
    visible.mkdir(mode=0o755)
    secrets = [
        secret(visible, "owner-only", 0o600),
        secret(visible, "owner-and-group", 0o640),
        secret(visible, "everyone", 0o644),  # the control: bound, readable
    ]
    scratch = tmp_path / "scratches" / "scratch"  # beside the files, as the temp dir is
    (scratch / "home" / ".config").mkdir(parents=True)
    note = scratch / "home" / ".config" / "note"
    note.write_text("the engine's")
    os.chmod(scratch, 0o700)
    argv = [sys.executable, "-I", "-S", "-c", PROGRAM, *map(str, secrets), str(note)]
    env = {"PATH": os.environ["PATH"]}
    with trio.fail_after(30):
        done = await owner.run(
            argv, cwd=scratch, env=env, sandbox=Sandbox(), scratch=scratch, model_socket=None
        )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["read"] == {
        str(secrets[0]): None,
        str(secrets[1]): None,
        str(secrets[2]): "secret everyone",
    }
    assert (report["uid"], report["gid"], report["groups"]) == (65534, 65534, [])
    assert set(report["caps"].values()) == {"0000000000000000"}
    assert report["note"] == "the engine's and the agent's"
    assert note.stat().st_uid != 0  # handed over to the sandbox's host uid
