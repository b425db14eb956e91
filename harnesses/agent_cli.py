"""What every real agent CLI harness shares (``codex``, ``claude-code``): the agent's
own directories, its scrubbed environment, one process per segment in its own
process group, and the segment's messages read back from the model boundary.

Per rollout, inside its scratch directory (removed when the session closes, also on
error and cancellation): ``home/`` (``HOME`` and the agent's config/session dir),
``work/`` (its working directory) and ``tmp/`` (``TMPDIR``). The environment is
built from nothing: ``PATH``, ``HOME``, ``TMPDIR``, ``LANG``, ``TERM=dumb``, what the
harness adds (the rollout's URL and secret) and the ``env`` option; the host's API
keys never reach the agent.

A segment's process is owned (``taketurns.harness.start_owned``: in the rollout's sandbox
unless the agent's ``sandbox`` is ``none``) with stdin, stdout and stderr from/to
files in the scratch directory (stdin holds the segment's message for the CLIs that
read it there, else nothing). The segment ends when the agent
exits; whatever it left running is killed then, and when the segment is cancelled
or times out the whole tree is killed and reaped.

The segment's messages are the model's own: each turn the boundary recorded during
the segment contributes its response (an assistant message) and, from the next
turn's request, the tool results answering that response's calls. So the trace's
conversation is exactly what the model read and wrote, in the chat shape, whatever
the agent's own event format.

After the process exits: a stop the boundary stamped (a limit, ``@stop``) ends the
segment as that stop condition, whatever the agent did with the refusal; a failed
model call is a model error; an exit on a reply cut at ``max_tokens`` that the agent's
output names is the model's doing (``segment_failure``: the segment ends on the cut
reply); any other non-zero exit is a ``HarnessError`` quoting the agent's stderr with
the rollout's secret as ``***``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from taketurns import (
    AssistantMessage,
    HarnessError,
    Message,
    ModelEndpointError,
    SystemMessage,
    ToolMessage,
    Trace,
    UserMessage,
)
from taketurns.errors import RolloutStopped
from taketurns.harness import (
    ErrorInfo,
    McpTool,
    Rollout,
    ServedHarness,
    create_in_scratch,
    read_descriptor,
    text_of,
)

KEEP_VARS = ("PATH", "LANG", "LC_ALL")


@attrs.frozen
class AgentDirs:
    home: Path
    work: Path
    tmp: Path


# trace.info's count of segments an agent gave up on the model's cut replies
GAVE_UP = "gave_up_on_cut_replies"


@attrs.frozen
class Finished:
    """One segment's process, exited: status, stdout, stderr (the secret scrubbed)."""

    returncode: int
    stdout: str
    stderr: str


def refuse(option: str, value: Any, expected: str) -> HarnessError:
    return HarnessError(f"harness option {option} must be {expected}, not {value!r}")


def check_bool(option: str, value: Any) -> bool:
    """``value`` if it is a bool; else the refusal naming ``option``."""
    if not isinstance(value, bool):
        raise refuse(option, value, "true or false")
    return value


def check_choice(option: str, value: Any, choices: Sequence[str]) -> str | None:
    """``value`` if it is None (the CLI's own default) or one of ``choices``; else the
    refusal naming ``option`` and the choices."""
    if value is not None and value not in choices:
        raise refuse(option, value, f"one of {', '.join(choices)}")
    return value


def check_strings(option: str, value: Any) -> list[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise refuse(option, value, "a list of strings")
    return list(value)


def prompt_text(messages: Sequence[Message]) -> str:
    """One text prompt for a CLI that takes one: a lone user message's text, else the
    messages as a transcript (``role: text`` blocks)."""
    if len(messages) == 1 and isinstance(messages[0], UserMessage):
        return text_of(messages[0].content)
    return "\n\n".join(f"{m.role}: {text_of(m.content)}" for m in messages)


def split_system(messages: Sequence[Message]) -> tuple[list[str], list[Message]]:
    """The leading system messages' texts, and the rest."""
    system: list[str] = []
    rest = list(messages)
    while rest and isinstance(rest[0], SystemMessage):
        system.append(text_of(rest.pop(0).content))
    return system, rest


def segment_messages(trace: Trace, start: int) -> list[Message]:
    """The messages of the turns recorded from ``start`` on: each response, and the
    tool results (from the following request) answering its calls."""
    out: list[Message] = []
    pending: set[str] = set()
    for turn in trace.turns[start:]:
        if pending:
            results: list[Message] = []
            for message in reversed(turn.request):
                if isinstance(message, AssistantMessage):
                    break
                if isinstance(message, ToolMessage) and message.tool_call_id in pending:
                    results.append(message)
            out += reversed(results)
        pending = set()
        if turn.response is not None:
            out.append(turn.response)
            pending = {call.id for call in turn.response.tool_calls}
    return out


class AgentCLIHarness(ServedHarness):
    """Base of the agent CLI harnesses. Subclasses set ``binary`` (the program's
    name) and ``install`` (the command that installs it), and build each segment's
    argv and environment (a subclass whose program depends on its options, ``acp``,
    sets them on the instance)."""

    binary: str
    install: str
    # a runaway agent (one claude-code segment once made 624 calls through its
    # sub-agents) ends as ``max_segment_turns``; ``limits.max_segment_turns`` changes it
    segment_turns = 100
    # measured: two codex runs of one Kuhn seat differ at the first request
    replay_refusal = (
        "an agent CLI's requests carry what differs in every run (its scratch directory's "
        "path, the date, session ids), so no recorded request can match a replayed one"
    )

    def __init__(
        self,
        *,
        binary: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        tail_chars: int = 2000,
    ) -> None:
        if not isinstance(env or {}, Mapping) or not all(
            isinstance(v, str) for v in (env or {}).values()
        ):
            raise refuse("env", env, "a table of strings")
        if not isinstance(tail_chars, int) or isinstance(tail_chars, bool) or tail_chars < 0:
            raise refuse("tail_chars", tail_chars, "a non-negative integer")
        program = binary or self.binary
        path = shutil.which(program)
        if path is None:
            raise HarnessError(
                f"harness {self.id!r} needs the {program!r} program, which is not on PATH; "
                f"install it with `{self.install}`"
            )
        self.path = path
        self.env = dict(env or {})
        self.args = check_strings("args", args)
        self.tail_chars = tail_chars

    # -- per rollout --------------------------------------------------------------------

    def dirs(self, rollout: Rollout) -> AgentDirs:
        """The rollout's own home, working and temp directories (created once)."""
        root = rollout.scratch_dir()
        dirs = AgentDirs(root / "home", root / "work", root / "tmp")
        for path in (dirs.home, dirs.work, dirs.tmp):
            path.mkdir(exist_ok=True)
        return dirs

    def environment(self, dirs: AgentDirs, extra: Mapping[str, str]) -> dict[str, str]:
        """The scrubbed environment: see the module docstring."""
        env = {k: os.environ[k] for k in KEEP_VARS if k in os.environ}
        env.setdefault("PATH", os.defpath)
        env.update(HOME=str(dirs.home), TMPDIR=str(dirs.tmp), TERM="dumb")
        env.update(extra)
        env.update(self.env)
        return env

    def check_tools(self, rollout: Rollout) -> None:
        """Refuse a rollout that offers tools: this harness's agent has only its own.
        The message says which kind was offered (MCP servers' tools, or Python ones)."""
        if not rollout.tools:
            return
        servers = sorted(
            {t.connection.server.name for t in rollout.tools if isinstance(t, McpTool)}
        )
        if servers:
            raise HarnessError(
                f"harness {self.id!r} runs the agent's own tools; it cannot hand the "
                f"taskset's MCP servers ({', '.join(servers)}) to its agent: use codex, "
                "claude-code, opencode or gemini-cli (their own MCP configuration takes them), "
                "or the tools or program harness"
            )
        raise HarnessError(
            f"harness {self.id!r} runs the agent's own tools; it cannot call the "
            "rollout's Python tools (use the tools or program harness for those)"
        )

    # -- one segment --------------------------------------------------------------------

    async def run_agent(
        self,
        rollout: Rollout,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        program: str | None = None,
        stdin: str | None = None,
    ) -> Finished:
        """Run one segment's process (``program``, default the agent's binary, with
        ``argv``) to its end; cancellation kills its tree. ``stdin``: the text the
        process reads on its stdin (a file in the scratch directory; default empty):
        never on its command line, where every process could read it."""
        dirs = self.dirs(rollout)
        n = rollout.state.get("segments", 0)
        rollout.state["segments"] = n + 1
        # the segment's files, made anew (never through a link the agent left) and
        # read back through the descriptors kept here, never reopened by name
        root = dirs.tmp.parent
        names = [root / f"{kind}-{n}" for kind in ("stdin", "stdout", "stderr")]
        fds: list[int] = []
        try:
            for name in names:
                fds.append(create_in_scratch(root, name))
            os.write(fds[0], (stdin or "").encode("utf-8"))
            os.lseek(fds[0], 0, os.SEEK_SET)
            owned = await self.start_owned(
                rollout,
                [program or self.path, *argv],
                cwd=dirs.work,
                env=env,
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
            )
            try:
                returncode = await owned.wait()
            finally:
                await owned.aclose()  # cancelled: the agent's tree; exited: what it left
                self.end_segment(rollout)
            out, err = read_descriptor(fds[1]), read_descriptor(fds[2])
        finally:
            for fd in fds:
                os.close(fd)
        secret = self.endpoint(rollout).secret
        return Finished(
            returncode,
            out.decode("utf-8", "replace").replace(secret, "***"),
            err.decode("utf-8", "replace").replace(secret, "***"),
        )

    def gave_up_on_cut_reply(self, finished: Finished) -> bool:
        """Whether the agent's own output says it stopped because the model's reply was
        cut at ``max_tokens`` (Codex fails its turn on one; Claude Code asks again and
        gives up after four). Default: no agent output says so."""
        return False

    def segment_failure(
        self, rollout: Rollout, turns_before: int, finished: Finished
    ) -> str | None:
        """What the segment's exit means (``settle``'s ``failure``): ``exit_failure``,
        except an exit the model caused. When the agent exited non-zero on a reply cut
        at ``max_tokens`` (the segment's last turn ended ``length`` and the agent's
        output says so: ``gave_up_on_cut_reply``), the model's replies were the cause:
        the segment ends on the cut reply, as any harness's would, and
        ``trace.info["gave_up_on_cut_replies"]`` counts such segments."""
        turns = rollout.trace.turns
        if (
            finished.returncode != 0
            and len(turns) > turns_before
            and turns[-1].finish_reason == "length"
            and self.gave_up_on_cut_reply(finished)
        ):
            info = rollout.trace.info
            info[GAVE_UP] = info.get(GAVE_UP, 0) + 1
            return None
        return self.exit_failure(finished)

    def exit_failure(self, finished: Finished) -> str | None:
        """What a non-zero exit says, quoting the agent's output; None for status 0."""
        if finished.returncode == 0:
            return None
        return (
            f"{self.binary} exited with status {finished.returncode}; stderr tail: "
            f"{finished.stderr[-self.tail_chars :]!r}; stdout tail: "
            f"{finished.stdout[-self.tail_chars :]!r}"
        )

    def settle(self, rollout: Rollout, turns_before: int, failure: str | None) -> None:
        """Emit the segment's messages; then raise what the outcome means (module
        docstring): ``failure`` is None when the agent finished cleanly."""
        for message in segment_messages(rollout.trace, turns_before):
            rollout.emit(message)
        trace = rollout.trace
        if trace.stop_condition is not None:
            raise RolloutStopped(trace.stop_condition)
        if failure is None:
            return
        turns = trace.turns
        if len(turns) > turns_before and turns[-1].error is not None:
            trace.errors.append(ErrorInfo("harness", failure, "HarnessError"))
            raise ModelEndpointError(f"the model endpoint failed; {failure}")
        raise HarnessError(failure)
