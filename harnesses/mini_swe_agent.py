"""The ``mini-swe-agent`` harness: SWE-agent's minimal agent, one task per run.

Install it in its own virtualenv (it brings pydantic and litellm) with ``mini`` on
PATH::

    python -m venv /opt/mini-swe-agent
    /opt/mini-swe-agent/bin/pip install mini-swe-agent==2.4.6
    ln -s /opt/mini-swe-agent/bin/mini /usr/local/bin/mini

mini-swe-agent has no multi-turn: it runs one task to its submission. So this
harness is one-shot by contract (``launch`` takes the prompt as text and there is
no ``resume``): ``agent.run(task)`` works, ``agent.chat(task)`` is refused at once.
A run is the driver ``taketurns/harnesses/programs/mini_swe.py`` under the
virtualenv's interpreter, in the rollout's own working directory and home, with the
scrubbed environment plus ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` (the rollout's
interception URL and secret): litellm speaks chat completions (one ``bash`` tool),
its retries and mini-swe-agent's are off (``max_retries=0``,
``MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1``), litellm's cost-map download is off, and
the task's system prompt goes before mini-swe-agent's own. The run's exit status and
submission land in ``trace.info["mini_swe_agent"]``.

Options: ``step_limit`` (model calls per run, default 20), ``python`` (the
interpreter with mini-swe-agent; default the one beside ``mini`` on PATH), ``binary``
(default ``mini``), ``env``, ``tail_chars``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from taketurns import HarnessError
from taketurns.harness import Rollout, read_in_scratch, write_in_scratch
from taketurns.harnesses.agent_cli import AgentCLIHarness, refuse

DRIVER = Path(__file__).parent / "programs" / "mini_swe.py"


class MiniSweAgentHarness(AgentCLIHarness):
    """One mini-swe-agent run per rollout (one-shot: no ``resume``)."""

    id = "mini-swe-agent"
    takes_text = True  # one-shot: launch gets the prompt text
    binary = "mini"
    install = (
        "python -m venv /opt/mini-swe-agent && /opt/mini-swe-agent/bin/pip install "
        "mini-swe-agent==2.4.6 && ln -s /opt/mini-swe-agent/bin/mini /usr/local/bin/mini"
    )

    def __init__(
        self,
        *,
        step_limit: int = 20,
        python: str | None = None,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(binary=binary, env=env, tail_chars=tail_chars)
        if not isinstance(step_limit, int) or isinstance(step_limit, bool) or step_limit < 1:
            raise refuse("step_limit", step_limit, "a positive integer")
        if python is None:
            python = str(Path(self.path).resolve().parent / "python")
        if shutil.which(python) is None:
            raise HarnessError(
                f"harness 'mini-swe-agent' needs the Python that has mini-swe-agent "
                f"({python!r} is not one); install it with `{self.install}`"
            )
        self.step_limit = step_limit
        self.python = python

    async def launch(self, rollout: Rollout, prompt: str) -> None:
        self.check_tools(rollout)
        dirs = self.dirs(rollout)
        task_file, output = dirs.home / "task.txt", dirs.home / "output.json"
        write_in_scratch(rollout.scratch_dir(), task_file, prompt)
        argv = [str(DRIVER), "--task-file", str(task_file), "--output-file", str(output)]
        argv += ["--step-limit", str(self.step_limit)]
        if rollout.task.system_prompt:
            system_file = dirs.home / "system.txt"
            write_in_scratch(rollout.scratch_dir(), system_file, rollout.task.system_prompt)
            argv += ["--system-file", str(system_file)]
        endpoint = self.endpoint(rollout)
        extra = {
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.secret,
            "TAKETURNS_MODEL": rollout.boundary.model,
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        turns_before = len(rollout.trace.turns)
        finished = await self.run_agent(
            rollout, argv, self.environment(dirs, extra), program=self.python
        )
        try:  # never through a link the agent left (read_in_scratch)
            data = read_in_scratch(rollout.scratch_dir(), output)
        except OSError as exc:
            raise HarnessError(f"mini-swe-agent's output file cannot be read: {exc}") from None
        if data is not None:
            rollout.trace.info["mini_swe_agent"] = json.loads(data.decode("utf-8"))
        self.settle(rollout, turns_before, self.exit_failure(finished))
