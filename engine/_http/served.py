"""``ServedHarness``: the base of harnesses whose agent program reaches the model over
HTTP, through the interception server (``taketurns._http.interception``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import attrs
import trio

from taketurns._errors import HarnessError
from taketurns._exchange.harness import Harness, Rollout
from taketurns._exchange.mcp_servers import McpTool
from taketurns._http.interception import Endpoint, InterceptionServer
from taketurns._procs import owner
from taketurns._procs.sandbox import Layout, Sandbox, agent_paths, host_ids, layout

__all__ = ["ServedHarness"]


_LAYOUTS = 64  # the most sandbox layouts a harness keeps


def _mcp_paths(rollout: Rollout, sandbox: Sandbox) -> tuple[str, ...]:
    """What the rollout's MCP servers need readable in its sandbox (an agent CLI
    starts its stdio servers there): their programs' install trees, the absolute
    paths on their command lines, their working directories. Refuses an HTTP server
    where the sandbox's network is its model endpoint only."""
    paths: list[str] = []
    for tool in rollout.tools:
        if not isinstance(tool, McpTool):
            continue
        server = tool.connection.server
        if server.url is not None and sandbox.network != "host":
            role = rollout.trace.agent.name
            raise HarnessError(
                f"MCP server {server.name!r} is served at {server.url}, which a sandboxed "
                f"agent cannot reach (its network is its model endpoint only): set "
                f"--env.{role}.sandbox_network=host"
            )
        paths += agent_paths(server.command or (), os.environ.get("PATH"))
        if server.cwd is not None:
            paths.append(server.cwd)
    return (*sandbox.readable, *paths)


def _stop_on_limit(rollout: Rollout, limit: str) -> None:
    """A sandboxed tree passed a resource limit and was killed: the rollout ends with
    stop condition ``resource_limit`` (an outcome: ``taketurns._procs.limits``), the
    limit named in ``trace.info["resource_limit"]``; the harness then raises
    ``RolloutStopped`` as for any stop the trace carries."""
    trace = rollout.trace
    trace.info.setdefault("resource_limit", limit)
    if trace.stop_condition is None:
        trace.stop_condition = "resource_limit"


class ServedHarness(Harness):
    """Base of harnesses whose agent program calls the model over HTTP. The eval
    runner starts the interception server when any role's harness is one; outside an
    eval, pass ``services={"interception": server}`` to the ``Agent``.

    ``endpoint(rollout)`` registers the rollout on first use; every segment opens
    its endpoint for the segment's duration only (``open_segment``: 409 between
    segments); ``aclose`` (at session close) unregisters it, so its secret stops
    working. A harness whose program
    re-sends failed requests unmarked, with no way to turn that off, sets
    ``final_failures`` (see ``InterceptionServer.register``)."""

    final_failures: ClassVar[bool] = False

    def endpoint(self, rollout: Rollout) -> Endpoint:
        endpoint: Endpoint | None = rollout.state.get("endpoint")
        if endpoint is None:
            server = rollout.services.get("interception")
            if not isinstance(server, InterceptionServer):
                raise HarnessError(
                    f"harness {self.id!r} needs the interception server: run it under "
                    "`taketurns eval`, or open one with open_interception_server() and pass "
                    "Agent(..., services={'interception': server})"
                )
            if self.final_failures:
                endpoint = server.register(rollout, final_failures=True)
            else:
                endpoint = server.register(rollout)
            rollout.state["endpoint"] = endpoint
        return endpoint

    def open_segment(self, rollout: Rollout) -> AbstractAsyncContextManager[Any]:
        """The rollout's endpoint, open for this segment only (registered on first use):
        between segments and after close it answers 409 and records nothing, and the
        segment's model calls still in flight when it ends are cancelled."""
        endpoint = self.endpoint(rollout)
        server: InterceptionServer = rollout.services["interception"]
        return server.open_segment(endpoint)

    def end_segment(self, rollout: Rollout) -> None:
        """Close the endpoint before the segment ends (its program is gone): requests
        answer 409 and model calls still in flight are cancelled."""
        endpoint = rollout.state.get("endpoint")
        if endpoint is not None:
            rollout.services["interception"].cancel_inflight(endpoint)

    def containment(self, rollout: Rollout) -> dict[str, Any]:
        """How ``rollout``'s processes are owned: its ``Sandbox`` (the run directory,
        if the runner named one, hidden too) and the interception server's socket and
        port for the sandbox's bridge. Recorded on the trace as ``info["sandbox"]``.
        Keyword arguments for ``start_owned``/``run_owned``."""
        endpoint = self.endpoint(rollout)
        server = rollout.services["interception"]
        sandbox = rollout.sandbox
        run_dir = rollout.services.get("run_dir")
        hide = sandbox.hide if run_dir is None else (*sandbox.hide, str(run_dir))
        if sandbox.kind == "bwrap":
            sandbox = attrs.evolve(sandbox, hide=hide, readable=_mcp_paths(rollout, sandbox))
        elif run_dir is not None:
            sandbox = attrs.evolve(sandbox, hide=hide)
        rollout.trace.info["sandbox"] = sandbox.describe()
        if sandbox.kind == "bwrap":
            rollout.trace.info["sandbox_limits"] = sandbox.limits.record()
        return {
            "sandbox": sandbox,
            "model_socket": server.unix_path,
            "model_port": urlsplit(endpoint.base_url).port,
            "on_limit": lambda limit: _stop_on_limit(rollout, limit),
        }

    async def start_owned(
        self,
        rollout: Rollout,
        program: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        **stdio: Any,
    ) -> owner.OwnedProcess:
        """Start one of ``rollout``'s processes, owned and contained
        (``taketurns._procs.owner.start``): its scratch directory is the only place
        it may write. ``stdio``: ``stdin``/``stdout``/``stderr``."""
        options = self._owned(rollout, program, env)
        return await owner.start(program, cwd=cwd, env=env, **options, **stdio)

    async def run_owned(
        self, rollout: Rollout, program: Sequence[str], *, cwd: Path, env: Mapping[str, str]
    ) -> owner.Captured:
        """Run one of ``rollout``'s processes to its exit, output captured, owned and
        contained (``taketurns._procs.owner.run``)."""
        return await owner.run(program, cwd=cwd, env=env, **self._owned(rollout, program, env))

    def _owned(
        self, rollout: Rollout, program: Sequence[str], env: Mapping[str, str]
    ) -> dict[str, Any]:
        """``owner.start``'s keyword arguments for one of ``rollout``'s processes
        but the program, its directory, environment and streams: the scratch, the
        containment and the sandbox's layout for ``program``."""
        scratch = rollout.scratch_dir()
        containment = self.containment(rollout)
        resolved = self._layout(containment["sandbox"], program, env, scratch)
        return {"scratch": scratch, "resolved": resolved, **containment}

    def _layout(
        self, sandbox: Sandbox, program: Sequence[str], env: Mapping[str, str], scratch: Path
    ) -> Layout | None:
        """``sandbox`` resolved against the host for ``program`` (``Layout``), once per
        sandbox, command, ``PATH`` and scratch folder for as long as this harness
        lives (an eval: its rollouts share a sandbox and a command); None unsandboxed.
        What no bind may contain and what a start adds (its arguments, its scratch)
        are read at every start."""
        if sandbox.kind != "bwrap" or not program:
            return None
        user = host_ids()
        key = (sandbox, program[0], env.get("PATH"), os.path.dirname(scratch), user)
        layouts: dict[tuple[Any, ...], Layout] = self.__dict__.setdefault("_layouts", {})
        found = layouts.get(key)
        if found is None:
            if len(layouts) >= _LAYOUTS:  # sandboxes or commands that vary: start afresh
                layouts.clear()
            found = layouts[key] = layout(sandbox, program[0], env.get("PATH"), key[3], user)
        return found

    async def aclose(self, rollout: Rollout) -> None:
        endpoint = rollout.state.pop("endpoint", None)
        if endpoint is not None:
            rollout.services["interception"].unregister(endpoint)
        await trio.lowlevel.checkpoint()
