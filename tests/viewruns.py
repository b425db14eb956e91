"""Run directories for the viewer's tests (a helper module): real evals of the
built-in model, and a run whose episodes hold markup a model might write."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from taketurns._cli.main import main

SCRIPT = "<script>window.__xss = 1</script>"
IMAGE = '"><img src=x onerror="window.__xss = 2">'


def eval_run(out: Path, n: int = 12, model: str = "builtin/bracket") -> Path:
    """A finished kuhn-poker run of ``n`` episodes in ``out``."""
    status = main(
        ["eval", "kuhn-poker", "-n", str(n), "--model", model, "-o", str(out), "--no-progress"]
    )
    assert status == 0
    return out


def hostile_run(source: Path, out: Path) -> Path:
    """A copy of ``source`` whose first episode failed (the harness crashed) and whose
    messages, task name and error (message and traceback) are markup (``SCRIPT``,
    ``IMAGE``)."""
    shutil.copytree(source, out)
    lines = (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines()
    first: dict[str, Any] = json.loads(lines[0])
    first["task"]["name"] = IMAGE
    first["ok"], first["cause"] = False, "harness"  # a failed episode: its traceback shows
    for trace in first["traces"]:
        for message in trace["messages"]:
            if message["role"] == "assistant":
                message["content"] = SCRIPT
        trace["errors"] = [{"kind": "harness", "type": "X", "message": IMAGE, "traceback": SCRIPT}]
    lines[0] = json.dumps(first)
    (out / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def renamed_run(source: Path, out: Path, env: str, model: str) -> Path:
    """A copy of ``source`` whose env is called ``env`` (a plugin's, say) and whose
    agents' models are ``model`` followed by the agent's name."""
    shutil.copytree(source, out)
    config = out / "config.toml"
    text = config.read_text(encoding="utf-8")
    config.write_text(re.sub(r'(?m)^env_id = ".*"$', f'env_id = "{env}"', text), encoding="utf-8")
    lines = []
    for line in (out / "episodes.jsonl").read_text(encoding="utf-8").splitlines():
        record: dict[str, Any] = json.loads(line)
        for trace in record["traces"]:
            trace["agent"]["model"] = f"{model}{trace['agent']['name']}"
        lines.append(json.dumps(record))
    (out / "episodes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
