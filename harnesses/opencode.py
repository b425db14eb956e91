"""The ``opencode`` harness: the opencode CLI as a seat, resumed natively.

Install: ``npm install -g opencode-ai@1.18.33`` (a native binary).

A first segment is ``opencode run --format json``; every later one is ``opencode run
--session <id>``, the session id read from the first segment's JSON events
(``sessionID``), so opencode continues its own saved session. The segment's message
is opencode's stdin, so it arrives whole whatever it holds (bare numbers, quotes,
newlines, a leading dash), and never on the command line, which every process can
read.
opencode speaks chat completions through an ``@ai-sdk/openai-compatible`` provider
(``taketurns``) that the harness configures through ``OPENCODE_CONFIG_CONTENT``: base
URL the rollout's interception URL, the key from ``TAKETURNS_API_KEY`` (the rollout's
secret), the rollout's model. Its ``HOME`` and ``XDG_*`` directories are the
rollout's own (its first run writes caches and a session database there), ``--pure``
keeps external plugins out, ``--title`` skips the extra title-generation model
call, and model fetches, sharing, autoupdate and LSP downloads are off. The task's
system prompt reaches the agent as an instructions file. Its sub-agent tool
(``task``) is denied, so never offered, unless ``sub_agents`` is true. The rollout's MCP servers
are opencode's own (its config's ``mcp`` section: see ``taketurns.harnesses.agent_mcp``).

Retries: opencode re-sends a failed model call itself (up to 5 times, on 429/5xx
or such a status in the error text) and no setting turns that off, so its rollouts
are registered with ``final_failures``: an upstream failure (which the interception
server's model client already retried) is answered 424 with no status in its text,
which opencode does not retry. A re-sent request never becomes a second turn.

An ``error`` event on stdout with no stop stamped is a harness error (opencode can
exit 0 after one); a stop stamped by the boundary ends the segment as that stop.

Options: ``auto`` (true: ``--auto``, approve permission requests not explicitly
denied; default false: opencode refuses them in ``run`` mode), ``sub_agents``
(default false), ``binary`` (default
``opencode``), ``args``, ``env``, ``tail_chars``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from taketurns import HarnessError, Message
from taketurns.harness import Prompt, Rollout, write_in_scratch
from taketurns.harnesses.agent_cli import (
    AgentCLIHarness,
    Finished,
    prompt_text,
    refuse,
    split_system,
)
from taketurns.harnesses.agent_mcp import opencode_mcp_config, rollout_servers

KEY_VAR = "TAKETURNS_API_KEY"
PROVIDER = "taketurns"
_QUIET = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}


def _events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


class OpencodeHarness(AgentCLIHarness):
    """``opencode run`` per segment, ``opencode run --session <id>`` to continue."""

    id = "opencode"
    resumes = True  # its resume continues the session natively
    binary = "opencode"
    final_failures = True  # opencode re-sends failed calls itself; nothing turns it off
    install = "npm install -g opencode-ai@1.18.33"

    def __init__(
        self,
        *,
        auto: bool = False,
        sub_agents: bool = False,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(binary=binary, env=env, args=args, tail_chars=tail_chars)
        if not isinstance(auto, bool):
            raise refuse("auto", auto, "true or false")
        if not isinstance(sub_agents, bool):
            raise refuse("sub_agents", sub_agents, "true or false")
        self.auto = auto
        self.sub_agents = sub_agents

    def _config(self, rollout: Rollout) -> str:
        model = rollout.boundary.model
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": PROVIDER,
            "options": {
                "baseURL": self.endpoint(rollout).base_url,
                "apiKey": f"{{env:{KEY_VAR}}}",
            },
            "models": {model: {"name": model}},
        }
        config: dict[str, Any] = {
            "provider": {PROVIDER: provider},
            "model": f"{PROVIDER}/{model}",
            "autoupdate": False,
            "share": "disabled",
        }
        if not self.sub_agents:  # its sub-agent tool (`task`) refused, so never offered
            config["permission"] = {"task": "deny"}
        instructions = rollout.state.get("instructions")
        if instructions:
            config["instructions"] = [instructions]
        if rollout.state.get("mcp"):
            config["mcp"] = rollout.state["mcp"]
        return json.dumps(config)

    def _env(self, rollout: Rollout) -> dict[str, str]:
        dirs = self.dirs(rollout)
        home = dirs.home
        extra = {
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "OPENCODE_CONFIG_CONTENT": self._config(rollout),
            KEY_VAR: self.endpoint(rollout).secret,
            **_QUIET,
        }
        return self.environment(dirs, extra)

    def _flags(self, rollout: Rollout) -> list[str]:
        argv = ["run", "--pure", "--format", "json", "-m", f"{PROVIDER}/{rollout.boundary.model}"]
        if self.auto:
            argv.append("--auto")
        return [*argv, *self.args]

    async def _segment(self, rollout: Rollout, argv: list[str], message: str) -> None:
        turns_before = len(rollout.trace.turns)
        finished = await self.run_agent(rollout, argv, self._env(rollout), stdin=message)
        events = _events(finished.stdout)
        if "session" not in rollout.state:
            found = next(
                (e["sessionID"] for e in events if isinstance(e.get("sessionID"), str)), None
            )
            if found is not None:
                rollout.state["session"] = found
        self.settle(rollout, turns_before, self._failure(finished, events))

    def _failure(self, finished: Finished, events: list[dict[str, Any]]) -> str | None:
        failure = self.exit_failure(finished)
        errors = [e.get("error") for e in events if e.get("type") == "error"]
        if failure is None and errors:
            failure = (
                f"{self.binary} reported an error: {json.dumps(errors[-1])[: self.tail_chars]}"
            )
        return failure

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        rollout.state["mcp"] = opencode_mcp_config(rollout_servers(rollout, self.id))
        system, rest = split_system(prompt.wire_messages())
        if not rest:
            raise HarnessError("opencode needs a user message to start from")
        if system:
            path = self.dirs(rollout).home / "instructions.md"
            write_in_scratch(rollout.scratch_dir(), path, "\n\n".join(system))
            rollout.state["instructions"] = str(path)
        await self._segment(
            rollout, [*self._flags(rollout), "--title", "taketurns"], prompt_text(rest)
        )

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        session = rollout.state.get("session")
        if session is None:
            raise HarnessError(
                "opencode printed no sessionID in its first segment: nothing to resume"
            )
        argv = [*self._flags(rollout), "--session", session]
        await self._segment(rollout, argv, prompt_text(messages))
