"""The ``codex`` harness: OpenAI's Codex CLI as a seat, resumed natively.

Install: ``npm install -g @openai/codex@0.171.0`` (a native binary; Codex's sandbox
needs Debian's ``bubblewrap``).

A first segment is ``codex exec --json -``; every later one is ``codex exec resume
<thread_id> --json -``, the segment's message on stdin (``-``), the thread id read
from the first segment's ``thread.started`` event (Codex re-sends the whole thread
to the model, so each request carries the earlier turns). A first segment opened by
the user's message launches fresh. Each rollout has its own ``CODEX_HOME`` (config,
sessions) and working directory (``taketurns.harnesses.agent_cli``), and Codex talks
only to the rollout's interception URL over the Responses API, with the rollout's
secret (from the environment, ``TAKETURNS_API_KEY``)::

    -c model_provider=taketurns
    -c model_providers.taketurns={name=..., base_url=<rollout URL>, env_key=...,
       wire_api="responses", request_max_retries=0, stream_max_retries=0}
    -c web_search="disabled" -c analytics.enabled=false
    -c features.multi_agent=false (and multi_agent_v2, apps, plugins)

Its retries are off (the interception server's upstream client retries the model),
so a re-sent request never becomes a second turn. Sub-agents (``multi_agent``,
``multi_agent_v2``), apps and plugins are off unless ``sub_agents`` is true. Nothing
secret is on the command line (every process can read it): the task's system prompt
(and any leading system messages) reaches the agent as ``developer_instructions``
and the rollout's MCP servers (``taketurns.harnesses.agent_mcp``; their environment
may hold keys) as ``mcp_servers.<name>``, both in ``CODEX_HOME/config.toml``.

Options (``--env.<role>.harness_options.<name>=...``): ``sandbox`` (Codex's own
sandbox: ``read-only``, ``workspace-write`` or ``danger-full-access``; default
``danger-full-access`` when the rollout runs in the engine's bwrap sandbox, which
confines Codex already (measured: Codex's nested bwrap fails there, on the
sandbox's read-only tmpfs), else ``workspace-write`` where ``bwrap`` is on PATH, else
``danger-full-access``: Codex's Linux sandbox needs bubblewrap), ``sub_agents``
(true: leave Codex's sub-agent, apps and plugins features as Codex sets them;
default false), ``binary`` (default ``codex``),
``args`` (extra arguments for every ``codex exec``), ``env`` (extra environment
variables), ``tail_chars`` (how much stderr/stdout a failure quotes). The default
``limits.max_segment_turns`` of an agent CLI is 100.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from taketurns import HarnessError, Message
from taketurns.harness import Prompt, Rollout, write_in_scratch
from taketurns.harnesses.agent_cli import (
    AgentCLIHarness,
    AgentDirs,
    Finished,
    check_bool,
    check_choice,
    prompt_text,
    split_system,
)
from taketurns.harnesses.agent_mcp import codex_mcp_args, rollout_servers

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
KEY_VAR = "TAKETURNS_API_KEY"


# Codex features that start more agents or reach outside the rollout, off unless the
# ``sub_agents`` option is true (``codex features list`` names them)
SUB_AGENT_FEATURES = ("multi_agent", "multi_agent_v2", "apps", "plugins")


def _toml(value: str) -> str:
    # a JSON string is a TOML basic string, once DEL (which TOML wants escaped) is
    # escaped; non-ASCII stays as is (TOML refuses JSON's surrogate-pair escapes)
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def events(stdout: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``codex exec --json`` output, one a line (others skipped)."""
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def thread_id(stdout: str) -> str | None:
    """The id in the first ``thread.started`` event of ``codex exec --json`` output."""
    for event in events(stdout):
        if event.get("type") == "thread.started":
            found = event.get("thread_id")
            return found if isinstance(found, str) else None
    return None


def default_sandbox() -> str:
    """Codex's workspace sandbox where bubblewrap exists, else full access."""
    return "workspace-write" if shutil.which("bwrap") else "danger-full-access"


def rollout_sandbox(option: str | None, rollout: Rollout) -> str:
    """Codex's own sandbox for ``rollout``: the ``sandbox`` option when given; else,
    inside the rollout's bwrap sandbox, ``danger-full-access`` (ours confines it
    already, and Codex's nested bwrap fails on its read-only tmpfs); else
    ``default_sandbox()``."""
    if option is not None:
        return option
    return "danger-full-access" if rollout.sandbox.kind == "bwrap" else default_sandbox()


def codex_config(base_url: str, sandbox: str, *, sub_agents: bool = False) -> list[str]:
    """The ``-c`` overrides pointing Codex (or codex-acp) at ``base_url`` over the
    Responses API with the key in ``KEY_VAR``: retries and web search off, and unless
    ``sub_agents``, ``SUB_AGENT_FEATURES`` off. Nothing secret: argv is public."""
    provider = (
        f'{{name="taketurns",base_url={_toml(base_url)},env_key="{KEY_VAR}",'
        'wire_api="responses",request_max_retries=0,stream_max_retries=0}'
    )
    argv = [
        "-c",
        "model_provider=taketurns",
        "-c",
        f"model_providers.taketurns={provider}",
        "-c",
        'web_search="disabled"',
        # no telemetry upload: offline it held every segment's exit ~5 s in a sandbox
        "-c",
        "analytics.enabled=false",
        "-c",
        f"sandbox_mode={_toml(sandbox)}",
    ]
    if not sub_agents:
        for feature in SUB_AGENT_FEATURES:
            argv += ["-c", f"features.{feature}=false"]
    return argv


def write_codex_home(
    root: Path, home: Path, instructions: str | None, mcp_args: Sequence[str] = ()
) -> None:
    """``home/config.toml`` (``CODEX_HOME``, in the scratch directory ``root``, never
    written through a link the agent left: ``write_in_scratch``): what must not be on
    the command line, where every process could read it: the system prompt as
    ``developer_instructions`` and the rollout's MCP servers (their environment may
    hold keys), the ``-c`` values of
    ``codex_mcp_args`` being TOML lines already."""
    assert all(flag == "-c" for flag in mcp_args[::2])
    lines = list(mcp_args[1::2])
    if instructions:
        lines.insert(0, f"developer_instructions = {_toml(instructions)}")
    write_in_scratch(root, home / "config.toml", "".join(f"{line}\n" for line in lines))


class CodexHarness(AgentCLIHarness):
    """``codex exec`` per segment, ``codex exec resume <thread_id>`` to continue."""

    id = "codex"
    resumes = True  # its resume continues the session natively
    binary = "codex"
    install = "npm install -g @openai/codex@0.171.0"

    def __init__(
        self,
        *,
        sandbox: str | None = None,
        sub_agents: bool = False,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(binary=binary, env=env, args=args, tail_chars=tail_chars)
        self.sandbox = check_choice("sandbox", sandbox, SANDBOXES)  # None: per rollout
        self.sub_agents = check_bool("sub_agents", sub_agents)

    def _config(self, rollout: Rollout) -> list[str]:
        endpoint = self.endpoint(rollout)
        sandbox = rollout_sandbox(self.sandbox, rollout)
        config = codex_config(endpoint.base_url, sandbox, sub_agents=self.sub_agents)
        return [
            "--json",
            "--skip-git-repo-check",
            "-m",
            rollout.boundary.model,
            *config,
            *self.args,
        ]

    def _env(self, rollout: Rollout, dirs: AgentDirs) -> dict[str, str]:
        secret = self.endpoint(rollout).secret
        return self.environment(dirs, {"CODEX_HOME": str(dirs.home), KEY_VAR: secret})

    def gave_up_on_cut_reply(self, finished: Finished) -> bool:
        """Codex fails its turn on a reply cut at ``max_tokens``: a ``turn.failed``
        event whose error names ``max_output_tokens`` ("Incomplete response returned,
        reason: max_output_tokens", 0.171.0)."""
        for event in events(finished.stdout):
            error = event.get("error") if event.get("type") == "turn.failed" else None
            message = error.get("message") if isinstance(error, dict) else None
            if isinstance(message, str) and "max_output_tokens" in message:
                return True
        return False

    async def _segment(self, rollout: Rollout, argv: list[str], message: str) -> Finished:
        dirs = self.dirs(rollout)
        turns_before = len(rollout.trace.turns)
        env = self._env(rollout, dirs)
        finished = await self.run_agent(rollout, argv, env, stdin=message)
        if "thread" not in rollout.state:
            found = thread_id(finished.stdout)
            if found is not None:
                rollout.state["thread"] = found
        self.settle(rollout, turns_before, self.segment_failure(rollout, turns_before, finished))
        return finished

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        mcp_args = codex_mcp_args(rollout_servers(rollout, self.id))
        system, rest = split_system(prompt.wire_messages())
        if not rest:
            raise HarnessError("codex needs a user message to start from")
        home = self.dirs(rollout).home
        write_codex_home(rollout.scratch_dir(), home, "\n\n".join(system) or None, mcp_args)
        # the prompt on stdin ("-"), the instructions in CODEX_HOME: argv is public
        argv = ["exec", *self._config(rollout), "-"]
        await self._segment(rollout, argv, prompt_text(rest))

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        thread = rollout.state.get("thread")
        if thread is None:
            raise HarnessError(
                "codex printed no thread.started event in its first segment: nothing to resume"
            )
        argv = ["exec", "resume", *self._config(rollout), thread, "-"]
        await self._segment(rollout, argv, prompt_text(messages))
