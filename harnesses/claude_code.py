"""The ``claude-code`` harness: Anthropic's Claude Code CLI as a seat, resumed natively.

Install: ``npm install -g @anthropic-ai/claude-code@2.1.332`` (a native binary).

A first segment is ``claude -p --session-id <uuid>`` (a fresh uuid per rollout);
every later one is ``claude -p --resume <uuid>``, so Claude Code continues its own
saved session (each request carries the earlier turns); the segment's message is on
its stdin. A first segment opened by the user's message launches fresh. Each rollout
has its own ``CLAUDE_CONFIG_DIR`` (inside its home) and working directory
(``taketurns.harnesses.agent_cli``). Claude Code talks only to the rollout's
interception URL over the Messages API (``ANTHROPIC_BASE_URL``, the secret as
``ANTHROPIC_API_KEY``) with ``CLAUDE_CODE_MAX_RETRIES=0`` (the interception server's
upstream client retries the model, so a re-sent request never becomes a second
turn), ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` and, as root, ``IS_SANDBOX=1``
(without it Claude Code refuses its tools to root). The task's system prompt (and
any leading system messages) is appended to Claude Code's own from a file in its
home (``--append-system-prompt-file``): nothing secret is on the command line, which
every process can read. Its tools that start or manage other agents (``Agent``,
``Task``, ``ListAgents``, ``Workflow``) are refused (``--disallowedTools``) unless
``sub_agents`` is true. The rollout's MCP servers are Claude Code's own
(``--mcp-config``, pre-approved with ``--allowedTools mcp__<name>``: see
``taketurns.harnesses.agent_mcp``).

A reply cut at ``max_tokens`` makes Claude Code ask again; after four cut in a row it
exits 1 (``api_error: max_output_tokens``). That exit is the model's behaviour, not a
harness failure: the segment ends on the cut reply, as any harness's would, and
``trace.info["gave_up_on_cut_replies"]`` counts such segments
(``AgentCLIHarness.segment_failure``).

Options (``--env.<role>.harness_options.<name>=...``): ``allowed_tools`` (a list for
``--allowedTools``, e.g. ``["Bash", "Read"]``; default: none pre-approved, so in
``-p`` mode a tool that needs permission is refused to the model), ``permission_mode``
(``--permission-mode``: ``default``, ``acceptEdits``, ``bypassPermissions``, ...),
``sub_agents`` (true: Claude Code's sub-agent tools stay; default false),
``binary`` (default ``claude``), ``args`` (extra arguments for every segment), ``env``
(extra environment variables), ``tail_chars`` (how much stderr/stdout a failure
quotes).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence

from taketurns import HarnessError, Message
from taketurns.harness import Endpoint, Prompt, Rollout, write_in_scratch
from taketurns.harnesses.agent_cli import (
    AgentCLIHarness,
    AgentDirs,
    Finished,
    check_bool,
    check_strings,
    prompt_text,
    refuse,
    split_system,
)
from taketurns.harnesses.agent_mcp import claude_mcp_config, claude_mcp_env, rollout_servers

# Claude Code's tools that start or manage other agents: refused unless ``sub_agents``
# (``Task`` is the sub-agent tool's name before Claude Code 2.1, ``Agent`` after)
SUB_AGENT_TOOLS = ("Agent", "Task", "ListAgents", "Workflow")


def claude_env(endpoint: Endpoint, dirs: AgentDirs) -> dict[str, str]:
    """The variables pointing Claude Code (or claude-agent-acp) at ``endpoint`` over
    the Messages API: its own config dir, retries and non-essential traffic off."""
    env = {
        "ANTHROPIC_BASE_URL": endpoint.base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": endpoint.secret,
        "CLAUDE_CONFIG_DIR": str(dirs.home / ".claude"),
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # else Claude Code refuses its tools to root
    return env


class ClaudeCodeHarness(AgentCLIHarness):
    """``claude -p --session-id`` per first segment, ``claude -p --resume`` after."""

    id = "claude-code"
    resumes = True  # its resume continues the session natively
    binary = "claude"
    install = "npm install -g @anthropic-ai/claude-code@2.1.332"

    def __init__(
        self,
        *,
        allowed_tools: Sequence[str] | None = None,
        permission_mode: str | None = None,
        sub_agents: bool = False,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(binary=binary, env=env, args=args, tail_chars=tail_chars)
        self.allowed_tools = (
            None if allowed_tools is None else check_strings("allowed_tools", allowed_tools)
        )
        if permission_mode is not None and not isinstance(permission_mode, str):
            raise refuse("permission_mode", permission_mode, "a string")
        self.permission_mode = permission_mode
        self.sub_agents = check_bool("sub_agents", sub_agents)

    def _flags(self, rollout: Rollout) -> list[str]:
        home = self.dirs(rollout).home
        argv = ["--output-format", "json", "--model", rollout.boundary.model]
        if rollout.state.get("system"):  # a file: argv is public
            argv += ["--append-system-prompt-file", str(home / "system-prompt.md")]
        servers = rollout.state.get("mcp_servers", [])
        if servers:
            argv += ["--mcp-config", str(home / "mcp.json")]
            argv += ["--strict-mcp-config"]
        allowed = [*(self.allowed_tools or ()), *(f"mcp__{s.name}" for s in servers)]
        if allowed:
            argv += ["--allowedTools", *allowed]
        if not self.sub_agents:
            argv += ["--disallowedTools", *SUB_AGENT_TOOLS]
        if self.permission_mode is not None:
            argv += ["--permission-mode", self.permission_mode]
        return [*argv, *self.args]

    def _env(self, rollout: Rollout) -> dict[str, str]:
        dirs = self.dirs(rollout)
        extra = claude_env(self.endpoint(rollout), dirs)
        extra.update(claude_mcp_env(rollout.state.get("mcp_servers", [])))
        return self.environment(dirs, extra)

    def gave_up_on_cut_reply(self, finished: Finished) -> bool:
        """Claude Code's result names it: ``api_error: max_output_tokens`` (2.1.332)."""
        lines = finished.stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1]) if lines else None
        except ValueError:
            return False
        return isinstance(result, dict) and result.get("api_error") == "max_output_tokens"

    async def _segment(self, rollout: Rollout, argv: list[str], message: str) -> None:
        turns_before = len(rollout.trace.turns)
        finished = await self.run_agent(rollout, argv, self._env(rollout), stdin=message)
        self.settle(rollout, turns_before, self.segment_failure(rollout, turns_before, finished))

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        home = self.dirs(rollout).home
        servers = rollout.state["mcp_servers"] = rollout_servers(rollout, self.id)
        if servers:
            config = json.dumps(claude_mcp_config(servers), indent=2)
            write_in_scratch(rollout.scratch_dir(), home / "mcp.json", config)
        system, rest = split_system(prompt.wire_messages())
        if not rest:
            raise HarnessError("claude-code needs a user message to start from")
        text = rollout.state["system"] = "\n\n".join(system) or None
        if text:
            write_in_scratch(rollout.scratch_dir(), home / "system-prompt.md", text)
        session = rollout.state["session"] = str(uuid.uuid4())
        # the message on stdin (``-p`` with no prompt argument reads it there)
        argv = ["-p", *self._flags(rollout), "--session-id", session]
        await self._segment(rollout, argv, prompt_text(rest))

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        session = rollout.state.get("session")
        if session is None:
            raise HarnessError("claude-code has no session to resume")
        argv = ["-p", *self._flags(rollout), "--resume", session]
        await self._segment(rollout, argv, prompt_text(messages))
