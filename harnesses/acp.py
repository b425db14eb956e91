"""The ``acp`` harness: an agent behind the Agent Client Protocol, one live process
per rollout.

Install an adapter: ``npm install -g @zed-industries/codex-acp@0.16.0`` (Codex) or
``npm install -g @zed-industries/claude-agent-acp@0.23.1`` (Claude Code).

The rollout's first segment starts the adapter (owned and sandboxed like every
agent process, in the rollout's own home and working directory:
``taketurns.harnesses.agent_cli``) and
speaks newline-delimited JSON-RPC on its stdin/stdout (``taketurns.harnesses.acp_rpc``):
``initialize``, ``session/new``, then one ``session/prompt`` per segment; the process
stays up between segments, so a turn costs no process start. When the process is
gone at the start of a segment (it crashed, or a cancelled segment killed it) a fresh
one is started and continues the same session with ``session/load``. Permission
requests are answered by the ``permissions`` option; file-system and terminal
requests are refused (none are advertised: the agents use their own tools). The
whole process tree is killed and reaped at close (also on error and cancellation) and when
a segment is cancelled or times out.

``agent`` picks the adapter's wiring to the rollout's interception URL and secret:

- ``codex``: ``codex-acp`` with the same ``-c`` overrides as the ``codex`` harness
  (Responses API, retries and web search off, ``sandbox``, sub-agents off); the
  task's system prompt as ``developer_instructions`` in ``CODEX_HOME/config.toml``.
- ``claude``: ``claude-agent-acp`` with Claude Code's environment (Messages API,
  ``CLAUDE_CODE_MAX_RETRIES=0``, ...); the system prompt appended through
  ``session/new``'s ``_meta.systemPrompt``, Claude Code's sub-agent tools refused
  through its ``_meta.claudeCode.options.disallowedTools``.

Nothing secret is on the adapter's command line (every process can read it).

The segment's messages come from the model boundary's turns, exactly as for the CLI
harnesses; a stop stamped by the boundary ends the segment as that stop condition.

Options: ``agent`` (``codex`` or ``claude``, required), ``command`` (the adapter's
argv, default ``["codex-acp"]`` / ``["claude-agent-acp"]``), ``permissions``
(``allow``, the default, or ``reject``), ``sandbox`` (with ``codex``; as for the
``codex`` harness), ``sub_agents`` (default false: as for the ``codex`` and
``claude-code`` harnesses), ``env``, ``tail_chars``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from taketurns import HarnessError, Message
from taketurns.harness import OwnedProcess, Prompt, Rollout, create_in_scratch
from taketurns.harnesses.acp_rpc import AcpConnection, AcpError, AcpGone, choose_permission
from taketurns.harnesses.agent_cli import (
    AgentCLIHarness,
    check_strings,
    prompt_text,
    refuse,
    split_system,
)
from taketurns.harnesses.claude_code import SUB_AGENT_TOOLS, claude_env
from taketurns.harnesses.codex import (
    KEY_VAR,
    SANDBOXES,
    codex_config,
    rollout_sandbox,
    write_codex_home,
)

ADAPTERS = {
    "codex": ("codex-acp", "npm install -g @zed-industries/codex-acp@0.16.0"),
    "claude": ("claude-agent-acp", "npm install -g @zed-industries/claude-agent-acp@0.23.1"),
}
PROTOCOL_VERSION = 1
START_S = 60.0  # how long starting an adapter (initialize + session/new or load) may take
_CAPABILITIES = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}


@attrs.define(eq=False)
class _Live:
    """One running adapter and the session it serves."""

    owned: OwnedProcess
    connection: AcpConnection
    session_id: str | None = None

    async def aclose(self) -> None:
        """Kill the whole tree, reap it, close the pipes; shielded."""
        await self.owned.aclose()


class AcpHarness(AgentCLIHarness):
    """One live ACP adapter process per rollout, one ``session/prompt`` per segment."""

    id = "acp"
    resumes = True  # its resume continues the session natively
    binary = "codex-acp"
    install = ADAPTERS["codex"][1]

    def __init__(
        self,
        *,
        agent: str | None = None,
        command: Sequence[str] | None = None,
        permissions: str = "allow",
        sandbox: str | None = None,
        sub_agents: bool = False,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
    ) -> None:
        if agent not in ADAPTERS:
            raise refuse("agent", agent, f"one of {', '.join(ADAPTERS)}")
        program, self.install = ADAPTERS[agent]
        argv = check_strings("command", command) if command is not None else [program]
        if not argv:
            raise refuse("command", command, "a non-empty list of strings")
        self.binary = argv[0]
        super().__init__(binary=argv[0], env=env, args=argv[1:], tail_chars=tail_chars)
        if permissions not in ("allow", "reject"):
            raise refuse("permissions", permissions, "allow or reject")
        if sandbox is not None and sandbox not in SANDBOXES:
            raise refuse("sandbox", sandbox, f"one of {', '.join(SANDBOXES)}")
        if not isinstance(sub_agents, bool):
            raise refuse("sub_agents", sub_agents, "true or false")
        self.agent = agent
        self.permissions = permissions
        self.sandbox = sandbox
        self.sub_agents = sub_agents

    # -- the process ------------------------------------------------------------------

    def _wiring(self, rollout: Rollout) -> tuple[list[str], dict[str, str]]:
        """The adapter's extra argv and environment for this rollout."""
        dirs = self.dirs(rollout)
        endpoint = self.endpoint(rollout)
        if self.agent == "codex":  # the system prompt in CODEX_HOME: argv is public
            write_codex_home(rollout.scratch_dir(), dirs.home, rollout.state.get("system"))
            sandbox = rollout_sandbox(self.sandbox, rollout)
            argv = [*codex_config(endpoint.base_url, sandbox, sub_agents=self.sub_agents)]
            argv += ["-c", f"model={rollout.boundary.model}"]
            extra = {"CODEX_HOME": str(dirs.home), KEY_VAR: endpoint.secret}
        else:
            argv = []
            extra = {**claude_env(endpoint, dirs), "ANTHROPIC_MODEL": rollout.boundary.model}
        return argv, self.environment(dirs, extra)

    async def _start(self, rollout: Rollout) -> _Live:
        dirs = self.dirs(rollout)
        argv, env = self._wiring(rollout)
        n = rollout.state["starts"] = rollout.state.get("starts", 0) + 1
        # made anew, never through a link the agent left (closed once spawned)
        stderr = create_in_scratch(dirs.tmp.parent, dirs.tmp.parent / f"stderr-{n}")
        try:
            owned = await self.start_owned(
                rollout,
                [self.path, *self.args, *argv],
                cwd=dirs.work,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        finally:
            os.close(stderr)
        process = owned.process
        assert process.stdin is not None
        assert process.stdout is not None
        live = _Live(
            owned,
            AcpConnection(
                process.stdin, process.stdout, permissions=choose_permission(self.permissions)
            ),
        )
        rollout.state["acp"] = live
        with trio.fail_after(START_S):
            await live.connection.call(
                "initialize",
                {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": _CAPABILITIES},
            )
            await self._open_session(rollout, live)
        return live

    async def _open_session(self, rollout: Rollout, live: _Live) -> None:
        params: dict[str, Any] = {"cwd": str(self.dirs(rollout).work), "mcpServers": []}
        system = rollout.state.get("system")
        if self.agent == "claude":
            meta: dict[str, Any] = {}
            if system:
                meta["systemPrompt"] = {"append": system}
            if not self.sub_agents:
                options = {"disallowedTools": list(SUB_AGENT_TOOLS)}
                meta["claudeCode"] = {"options": options}
            if meta:
                params["_meta"] = meta
        session_id = rollout.state.get("session")
        if session_id is None:
            result = await live.connection.call("session/new", params)
            session_id = result["sessionId"] if isinstance(result, dict) else None
            if not isinstance(session_id, str):
                raise HarnessError(f"{self.binary}: session/new answered no sessionId")
            rollout.state["session"] = session_id
        else:  # a fresh process continues the rollout's session
            await live.connection.call("session/load", {**params, "sessionId": session_id})
        live.session_id = session_id

    async def _drop(self, rollout: Rollout) -> None:
        live: _Live | None = rollout.state.pop("acp", None)
        if live is not None:
            await live.aclose()

    # -- segments ---------------------------------------------------------------------

    async def _prompt(self, rollout: Rollout, text: str) -> None:
        live: _Live | None = rollout.state.get("acp")
        turns_before = len(rollout.trace.turns)
        failure = None
        try:
            if live is not None and not live.owned.alive:
                await self._drop(rollout)  # died between segments: restart, load
                live = None
            if live is None:
                live = await self._start(rollout)
            params = {"sessionId": live.session_id, "prompt": [{"type": "text", "text": text}]}
            result = await live.connection.call("session/prompt", params)
            reason = result.get("stopReason") if isinstance(result, dict) else None
            if reason not in ("end_turn", "max_tokens", "max_turn_requests"):
                failure = f"{self.binary} ended the prompt with stopReason {reason!r}"
        except (AcpError, AcpGone) as exc:
            failure = f"{self.binary}: {exc}".replace(self.endpoint(rollout).secret, "***")
            await self._drop(rollout)
        except BaseException:  # cancelled or timed out: its protocol state is unknown
            await self._drop(rollout)
            raise
        finally:
            self.end_segment(rollout)
        self.settle(rollout, turns_before, failure)

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        self.check_tools(rollout)
        system, rest = split_system(prompt.wire_messages())
        if not rest:
            raise HarnessError("acp needs a user message to start from")
        rollout.state["system"] = "\n\n".join(system) or None
        await self._prompt(rollout, prompt_text(rest))

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        await self._prompt(rollout, prompt_text(messages))

    async def aclose(self, rollout: Rollout) -> None:
        await self._drop(rollout)
        await super().aclose(rollout)
