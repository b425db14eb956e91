"""Driver for the ``mini-swe-agent`` harness: runs one mini-swe-agent task through its
Python API. Run by the interpreter that has ``mini-swe-agent`` installed (its own
virtualenv: it brings pydantic and litellm), as a script, so it imports nothing from
taketurns.

``python mini_swe.py --task-file T --output-file O --step-limit N [--system-file S]``

The model is ``openai/$TAKETURNS_MODEL`` at ``$OPENAI_BASE_URL`` with ``$OPENAI_API_KEY``
(the rollout's interception URL and secret), litellm's and mini-swe-agent's retries
off; commands run in the working directory. Writes ``{"exit_status", "submission"}``
to O; exits 1 if the agent raised (a refused or failed model call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.resources import files
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task-file", type=Path, required=True)
    parser.add_argument("--output-file", type=Path, required=True)
    parser.add_argument("--step-limit", type=int, default=20)
    parser.add_argument("--system-file", type=Path)
    args = parser.parse_args()

    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    config = yaml.safe_load((files("minisweagent.config") / "default.yaml").read_text())
    agent_config = {**config["agent"], "step_limit": args.step_limit, "cost_limit": 0.0}
    if args.system_file is not None:  # the task's system prompt, before mini's own
        system = args.system_file.read_text(encoding="utf-8")
        raw = "{% raw %}" + system.replace("{% endraw %}", "") + "{% endraw %}\n\n"
        agent_config["system_template"] = raw + agent_config["system_template"]
    model = LitellmModel(
        model_name=f"openai/{os.environ['TAKETURNS_MODEL']}",
        model_kwargs={
            "api_base": os.environ["OPENAI_BASE_URL"],
            "api_key": os.environ["OPENAI_API_KEY"],
            "max_retries": 0,
        },
        cost_tracking="ignore_errors",
    )
    agent = DefaultAgent(model, LocalEnvironment(cwd=os.getcwd()), **agent_config)
    task = args.task_file.read_text(encoding="utf-8")
    try:
        result = agent.run(task)
    except Exception as exc:
        print(f"mini-swe-agent raised {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    output = {k: result.get(k, "") for k in ("exit_status", "submission")}
    args.output_file.write_text(json.dumps(output), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
