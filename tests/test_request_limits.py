"""Request limits: the interception server's body cap comes from the eval's config
(``interception_max_body_bytes``) and an oversized request is refused with 413 and an
OpenAI-style error, which fails the episode as an infrastructure failure (the program
could not reach its model), never as a result of the model's."""

from __future__ import annotations

from pathlib import Path

import trio
from rundirs import records

from taketurns import EvalConfig, RunDir, load_eval_config, run_eval
from taketurns._http.interception import InterceptionServer
from taketurns.envs.kuhn import KuhnConfig


def test_the_default_cap_is_generous() -> None:
    default = EvalConfig("kuhn-poker").interception_max_body_bytes
    assert default == InterceptionServer().max_body_bytes >= 32 * 1024 * 1024


async def test_the_eval_config_caps_program_requests(tmp_path: Path) -> None:
    config = load_eval_config(
        KuhnConfig,
        file_data={"env_id": "kuhn-poker", "num_tasks": 2, "interception_max_body_bytes": 64},
        overrides=[("env.player0.harness", "program")],
    )
    out = tmp_path / "run"
    with trio.fail_after(60):
        run = await run_eval(config, RunDir(out), progress=False, report=False)
    assert run.summary["failed_by_cause"] == {"harness": 2}
    for e in records(out).values():
        [p0] = [t for t in e["traces"] if t["agent"]["name"] == "player0"]
        assert p0["stop_condition"] == "harness_error"
        assert p0["turns"] == []  # refused before the model boundary: no turn
        assert "413" in p0["errors"][0]["message"]
