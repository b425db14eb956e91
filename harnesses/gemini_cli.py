"""The ``gemini-cli`` harness: Google's Gemini CLI as a seat, resumed natively.

Install: ``npm install -g @google/gemini-cli@0.61.0`` (node).

A first segment is ``gemini --session-id <uuid>`` (a fresh uuid per rollout); every
later one is ``gemini --resume <uuid>``, so the CLI continues its own saved session
(in its home, ``.gemini/tmp/<project>/chats``; each request carries the earlier
turns). The segment's message is its stdin (piped stdin runs the CLI headless),
never on the command line, which every process can read; a first segment opened by
the user's message launches fresh. Each rollout has its own home and working
directory (``taketurns.harnesses.agent_cli``). The CLI talks only to the rollout's
interception URL over the Gemini API (``GOOGLE_GEMINI_BASE_URL``, the secret as
``GEMINI_API_KEY``, sent as ``x-goog-api-key``), configured by ``.gemini/settings.json``
in its home: API-key auth, one attempt per request (``general.maxAttempts: 1``: the
interception server's upstream client retries the model, so a re-sent request never
becomes a second turn), usage statistics, telemetry, auto-update and its notice, the
IDE bridge and LLM loop detection (a hidden model call) off, and its tools that reach
the network through Google (``google_web_search``, ``web_fetch``) excluded. Its
sub-agent tool (``invoke_agent``) is excluded and agents are off unless
``sub_agents`` is true. The workspace is trusted through
``GEMINI_CLI_TRUST_WORKSPACE``, and the CLI does not relaunch itself
(``GEMINI_CLI_NO_RELAUNCH``). The task's system prompt (and any leading system
messages) is the CLI's global context file (``.gemini/GEMINI.md`` in its home), which
it appends to its own system instruction.

A refused (stopped) turn answers 400, which the CLI neither retries nor falls back
from; it exits non-zero and the segment ends as the stop the boundary stamped. The
rollout's MCP servers are the CLI's own (its settings' ``mcpServers``, trusted, so
their tools need no confirmation: see ``taketurns.harnesses.agent_mcp``; the model
sees them as ``mcp_<server>_<tool>``); the rollout's Python tools are refused.

Options (``--env.<role>.harness_options.<name>=...``): ``approval_mode``
(``--approval-mode``: ``default``, ``auto_edit``, ``yolo`` or ``plan``; default:
the CLI's, under which headless runs refuse tools that need approval),
``sub_agents`` (default false), ``binary`` (default ``gemini``), ``args`` (extra
arguments for every segment), ``env`` (extra environment variables),
``tail_chars`` (how much stderr/stdout a failure quotes). The default
``limits.max_segment_turns`` of an agent CLI is 100.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from taketurns import HarnessError, Message
from taketurns.harness import Prompt, Rollout, write_in_scratch
from taketurns.harnesses.agent_cli import (
    AgentCLIHarness,
    AgentDirs,
    check_bool,
    check_choice,
    prompt_text,
    split_system,
)
from taketurns.harnesses.agent_mcp import gemini_mcp_config, rollout_servers

APPROVAL_MODES = ("default", "auto_edit", "yolo", "plan")
# tools that reach the network through Google's services, never through the rollout
NETWORK_TOOLS = ("google_web_search", "web_fetch")
SUB_AGENT_TOOLS = ("invoke_agent",)


def gemini_settings(*, sub_agents: bool = False) -> dict[str, Any]:
    """The CLI's ``settings.json``: see the module docstring."""
    exclude = [*NETWORK_TOOLS, *(() if sub_agents else SUB_AGENT_TOOLS)]
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {
            "maxAttempts": 1,
            "retryFetchErrors": False,
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
        "model": {"disableLoopDetection": True, "skipNextSpeakerCheck": True},
        "experimental": {"enableAgents": sub_agents},
        "tools": {"exclude": exclude},
    }


def gemini_env(base_url: str, secret: str) -> dict[str, str]:
    """The variables pointing the CLI at a rollout's interception URL (``base_url``,
    with or without ``/v1``) with its ``secret``."""
    return {
        "GOOGLE_GEMINI_BASE_URL": base_url.removesuffix("/v1"),
        "GEMINI_API_KEY": secret,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "NO_BROWSER": "true",
    }


class GeminiCliHarness(AgentCLIHarness):
    """``gemini --session-id`` per first segment, ``gemini --resume`` after."""

    id = "gemini-cli"
    resumes = True  # its resume continues the session natively
    binary = "gemini"
    install = "npm install -g @google/gemini-cli@0.61.0"

    def __init__(
        self,
        *,
        approval_mode: str | None = None,
        sub_agents: bool = False,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(binary=binary, env=env, args=args, tail_chars=tail_chars)
        self.approval_mode = check_choice("approval_mode", approval_mode, APPROVAL_MODES)
        self.sub_agents = check_bool("sub_agents", sub_agents)

    def _flags(self, rollout: Rollout) -> list[str]:
        argv = ["--output-format", "json", "--model", rollout.boundary.model]
        if self.approval_mode is not None:
            argv += ["--approval-mode", self.approval_mode]
        return [*argv, *self.args]

    def _env(self, rollout: Rollout, dirs: AgentDirs) -> dict[str, str]:
        endpoint = self.endpoint(rollout)
        return self.environment(dirs, gemini_env(endpoint.base_url, endpoint.secret))

    async def _segment(self, rollout: Rollout, argv: list[str], message: str) -> None:
        dirs = self.dirs(rollout)
        turns_before = len(rollout.trace.turns)
        finished = await self.run_agent(rollout, argv, self._env(rollout, dirs), stdin=message)
        self.settle(rollout, turns_before, self.exit_failure(finished))

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        servers = rollout_servers(rollout, self.id)
        system, rest = split_system(prompt.wire_messages())
        if not rest:
            raise HarnessError("gemini-cli needs a user message to start from")
        config = self.dirs(rollout).home / ".gemini"
        config.mkdir(exist_ok=True)
        settings = gemini_settings(sub_agents=self.sub_agents)
        if servers:  # a file in its home: a server's environment may hold keys
            settings["mcpServers"] = gemini_mcp_config(servers)
        root = rollout.scratch_dir()
        write_in_scratch(root, config / "settings.json", json.dumps(settings, indent=2))
        if system:  # a file, appended to the CLI's system instruction: argv is public
            write_in_scratch(root, config / "GEMINI.md", "\n\n".join(system))
        session = rollout.state["session"] = str(uuid.uuid4())
        argv = [*self._flags(rollout), "--session-id", session]
        await self._segment(rollout, argv, prompt_text(rest))

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        session = rollout.state.get("session")
        if session is None:
            raise HarnessError("gemini-cli has no session to resume")
        argv = [*self._flags(rollout), "--resume", session]
        await self._segment(rollout, argv, prompt_text(messages))
