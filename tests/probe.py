"""An adversarial agent program: tries to get out of its rollout, and reports what it
managed. Standard library only (it runs in a sandbox that sees only the interpreter).

- as a ``program`` harness program (``--prompt-file P --output-file O``): probes,
  asks the model (``OPENAI_BASE_URL``) for its answer, and answers the model's text
  followed by ``PROBE <report as base64 JSON>`` (no brackets, so a Kuhn seat's
  answer still names one bracketed action);
- ``--report``: probes and prints the report (an agent CLI's shell tool runs this).

What it tries (``TT_*`` variables come from the test through the harness's ``env``):
read other rollouts' scratch (every file next to its own scratch and under the temp
directories, looking for ``Your card:``), the host's home directories, other
processes' ``/proc/<pid>/environ`` (looking for the host's ``tt-host-canary-``),
writing outside its scratch (``TT_ESCAPE``, ``/etc``, ``/usr``), connecting to a host
port (``TT_FORBIDDEN_PORT``), and leaving ``setsid`` and double-forked children
(marked ``TT_PROBE_MARK``) behind; and, launch-style leaks: reading the files listed
in ``TT_CANARIES`` (a canary in the user's folder and in ``TMPDIR``, a ``.env``) and
listing the folders in ``TT_FOLDERS`` (the user's cwd, ``TMPDIR``), connecting to the
host Unix sockets in ``TT_HOST_SOCKETS`` (``os.pathsep``-separated), reading
``/etc/shadow``; it reports its uid and the size of ``/dev/shm``.

``TT_PROBE_HOG`` (``fork``, ``memory``, ``disk``, ``shm``, or one by Kuhn card:
``J=fork,Q=memory,K=disk``): after probing, a bounded
runaway (``HOG_FORKS`` processes, ``HOG_MB`` of memory or of files), each ended by
the sandbox's resource limits well before its bound.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CANARY = "tt-host-canary-"
HOG_FORKS = 400
HOG_MB = 768
HOMES = ("/root", "/home")


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(65536).decode("utf-8", "replace")
    except OSError:
        return None


def foreign_scratch(own: Path) -> list[str]:
    """Files of other rollouts (anything beside its own scratch) holding a card."""
    found = []
    for dirpath, _dirs, files in os.walk(own.parent):  # where every scratch lives
        if Path(dirpath) == own or own in Path(dirpath).parents:
            continue
        for name in files:
            text = _read(Path(dirpath) / name)
            if text and "Your card:" in text:
                at = text.index("Your card:")
                found.append(f"{dirpath}/{name}: {text[at : at + 13]}")
    return found


def host_homes() -> list[str]:
    """What the host's home directories show, the Python installation aside."""
    seen = []
    for home in HOMES:
        try:
            names = os.listdir(home)
        except OSError:
            continue
        seen += [f"{home}/{n}" for n in names if n != ".pyenv"]
    return seen


def environ_canaries() -> list[int]:
    """The pids of other processes whose environment holds the host's canary."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        text = _read(Path(f"/proc/{name}/environ"))
        if text and CANARY in text:
            found.append(int(name))
    return found


def writes_outside() -> list[str]:
    wrote = []
    for path in (os.environ.get("TT_ESCAPE"), "/etc/tt-escape", "/usr/tt-escape"):
        if not path:
            continue
        try:
            with open(path, "w") as f:
                f.write("escaped")
            wrote.append(path)
        except OSError:
            pass
    return wrote


def connects() -> list[int]:
    """Host ports it could connect to (the forbidden one)."""
    port = os.environ.get("TT_FORBIDDEN_PORT")
    if not port:
        return []
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=2):
            return [int(port)]
    except OSError:
        return []


def leave_children() -> int:
    """A setsid child and a double-forked daemon, both sleeping; their count."""
    subprocess.Popen(["sleep", "300"], start_new_session=True)
    if os.fork() == 0:  # double fork: the grandchild is orphaned at once
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "301"])
        os._exit(0)
    os.wait()
    return 2


def _listed(name: str) -> list[str]:
    return [p for p in os.environ.get(name, "").split(os.pathsep) if p]


def canaries() -> list[str]:
    """The files of ``TT_CANARIES`` it could read."""
    return [p for p in _listed("TT_CANARIES") if _read(Path(p)) is not None]


def folders() -> dict[str, list[str] | None]:
    """What each of ``TT_FOLDERS`` lists (None: it does not exist)."""
    seen: dict[str, list[str] | None] = {}
    for folder in _listed("TT_FOLDERS"):
        try:
            seen[folder] = sorted(os.listdir(folder))
        except OSError:
            seen[folder] = None
    return seen


def host_sockets() -> list[str]:
    found = []
    for path in _listed("TT_HOST_SOCKETS"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            try:
                sock.connect(path)
            except OSError:
                continue
            found.append(path)
    return found


def shm_bytes() -> int:
    try:
        fs = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return fs.f_blocks * fs.f_frsize


def hog(kind: str, own: Path) -> None:
    """A bounded runaway: the sandbox's limits should end it first."""
    if kind == "fork":
        for _ in range(HOG_FORKS):
            subprocess.Popen(["sleep", "60"])
    elif kind == "memory":
        hoard = []
        for _ in range(HOG_MB):
            hoard.append(bytearray(1024 * 1024))  # zero-filled: resident
            time.sleep(0.002)
    elif kind in ("disk", "shm"):
        where = own if kind == "disk" else Path("/dev/shm")
        block = os.urandom(1024 * 1024)
        for n in range(HOG_MB):
            (where / f"filler-{n}").write_bytes(block)
            time.sleep(0.002)
    time.sleep(30)  # the watchdog ends it


def hog_kind(option: str, prompt: str) -> str:
    """``TT_PROBE_HOG``: a kind, or ``J=fork,Q=memory,K=disk`` (by the Kuhn card the
    prompt deals)."""
    if "=" not in option:
        return option
    for pair in option.split(","):
        card, kind = pair.split("=", 1)
        if f"Your card: {card}" in prompt:
            return kind
    return ""


def probe(own: Path) -> dict[str, object]:
    return {
        "canaries": canaries(),
        "folders": folders(),
        "sockets": host_sockets(),
        "shadow": _read(Path("/etc/shadow")) is not None,
        "uid": os.getuid(),
        "shm_bytes": shm_bytes(),
        "pids_seen": len([n for n in os.listdir("/proc") if n.isdigit()]),
        "foreign": foreign_scratch(own),
        "homes": host_homes(),
        "environ": environ_canaries(),
        "wrote": writes_outside(),
        "connected": connects(),
        "children": leave_children(),
    }


def ask_model(messages: list[dict[str, object]]) -> str:
    body = json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": messages}).encode()
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=body,
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"] or ""


def own_scratch() -> Path:
    """The rollout's scratch: the working directory, or its parent for an agent CLI
    (whose working directory is ``<scratch>/work``)."""
    cwd = Path.cwd()
    return cwd.parent if cwd.name == "work" else cwd


def main(argv: list[str]) -> None:
    if "--report" in argv:
        print("PROBE " + json.dumps(probe(own_scratch())))
        if os.environ.get("TT_PROBE_HOG"):
            hog(os.environ["TT_PROBE_HOG"], own_scratch())
        return
    prompt = json.loads(Path(argv[argv.index("--prompt-file") + 1]).read_text())
    report = probe(own_scratch())
    kind = hog_kind(os.environ.get("TT_PROBE_HOG", ""), json.dumps(prompt["messages"]))
    if kind:
        hog(kind, own_scratch())
    text = ask_model(prompt["messages"])
    encoded = base64.b64encode(json.dumps(report).encode()).decode()  # no brackets
    answer = {"role": "assistant", "content": f"{text}\nPROBE {encoded}"}
    out = Path(argv[argv.index("--output-file") + 1])
    out.write_text(json.dumps({"messages": [answer]}))
    time.sleep(0.05)  # its children are running when it exits


if __name__ == "__main__":
    main(sys.argv[1:])
