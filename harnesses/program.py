"""The ``program`` harness: runs an external agent program against the interception
server.

Each segment hands the program the prompt (for a continuation, the accreted
conversation) as ``{"messages": [...], "tools": [...], "tool_url": "..."}`` (``tools``
and ``tool_url`` only when the rollout has tools) and takes back ``{"messages":
[...]}``: the assistant and tool messages it produced, in OpenAI chat format.

Per segment (the default), the program is started with ``--prompt-file P
--output-file O`` in the rollout's scratch directory, with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` pointing at the interception server and the rollout's own secret
(``OPENAI_MODEL`` names the model), and exchanges those JSON objects through the two
files; the segment ends when it exits (whatever its children do with its pipes).
Every program is owned and contained (``taketurns.harness.start_owned``: the rollout's bwrap
sandbox unless its agent's ``sandbox`` is ``none``; its whole process tree killed
when it exits, on timeout and on cancellation) and gets an environment built from
nothing: ``PATH``, ``LANG``, ``LC_ALL``, ``HOME`` and ``TMPDIR`` (its scratch
directory), the ``env`` option and the endpoint variables; never the host's keys.
A non-zero exit is a harness error, except when the engine stopped the rollout (a
limit or ``@stop``): then the run ends with that stop condition; and when the
program gave up on a failed model call, a model error.

Persistent (``persistent = true``), the harness instance keeps a pool of programs
started ``command --serve`` (``taketurns.harnesses.program_pool``), shared by all of its
rollouts: the harness is stateless, every segment carries the whole conversation, so
a program belongs to no rollout. A segment takes an idle program (or starts one when
none is idle) and speaks a line protocol with it: the harness writes ONE line of JSON
to the program's stdin, the prompt object plus the rollout's endpoint, ``{"base_url":
..., "api_key": ..., "model": ..., "messages": [...], "tools": [...], "tool_url":
...}``, and the program answers ONE line of JSON on its stdout, ``{"messages":
[...]}``, adding ``"stopped": true`` when the server refused a call with ``type:
rollout_stopped``; the program then goes back to the pool. The program must call the
model at that line's ``base_url`` with that line's ``api_key`` as bearer token (the
key routes each call to its own rollout's trace; ``OPENAI_*`` are not set), keep
reading until stdin reaches EOF, and print nothing else to stdout. Its working
directory and stderr file are its own, in the pool's temp directory, and kept across
the segments it serves.

The program exiting, an answer that is not such an object, or ``stopped`` are
classified as a non-zero exit is, quoting what the program wrote to stderr during the
segment, with the rollout's secret as ``***``. (Residual risk: a program that writes
*another* rollout's key to stderr, say one it kept from an earlier line, would have
it quoted; programs should not log keys.) A segment that is cancelled, times out or
gets garbage or nothing back kills its program (its protocol state is unknown); the
next segment starts a fresh one. A program that died while idle is replaced
transparently. ``shutdown()`` kills and reaps every program and removes the pool's
directory; the eval runner calls it when the eval ends (outside an eval, call it
when done with the harness; a later segment opens a new pool). A program's tree
is also killed when the eval's process dies (the supervisor's lifeline).

Options (``--env.<role>.harness_options.<name>=...``): ``command`` (argv list;
default: the reference program ``taketurns/harnesses/programs/chat.py`` run by path
with ``python -S``, standard library only: ``programs.command``), ``env``
(extra environment variables), ``tail_chars`` (how much stderr/stdout to keep on
failure), ``persistent`` (true: the pool above), ``max_programs`` (with
``persistent``: how many programs may exist at once, a segment waiting for one while
that many are busy; default: as many as segments run at once).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson
import trio

from taketurns import HarnessError, Message, ModelEndpointError
from taketurns.errors import RolloutStopped
from taketurns.harness import (
    ErrorInfo,
    Prompt,
    Rollout,
    ServedHarness,
    as_tools,
    messages_from_wire,
    messages_to_wire,
    read_in_scratch,
    write_in_scratch,
)
from taketurns.harnesses import programs
from taketurns.harnesses.program_pool import ProgramPool
from taketurns.harnesses.program_process import ProgramProcess, scrubbed_environment

DEFAULT_COMMAND = programs.command("chat")
SERVE_FLAG = "--serve"
# a pooled program gets its endpoint per line; these would name no rollout
ENDPOINT_VARS = frozenset({"OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"})


def _tail(data: bytes, chars: int, secret: str) -> str:
    text = data.decode("utf-8", "replace").replace(secret, "***")
    return text[-chars:]


def _refuse(option: str, value: Any, expected: str) -> HarnessError:
    return HarnessError(f"harness option {option} must be {expected}, not {value!r}")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ProgramHarness(ServedHarness):
    """Runs an external agent program (``command``; None: the reference chat/tool
    loop) against the interception server: per segment, or on a pool of serving
    programs shared by the harness's rollouts when ``persistent``."""

    id = "program"
    default_command: ClassVar[tuple[str, ...]] = DEFAULT_COMMAND

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
        persistent: bool = False,
        max_programs: int | None = None,
    ) -> None:
        if command is None:
            command = self.default_command
        if isinstance(command, str) or not command:
            raise HarnessError("harness option command must be a non-empty list of strings")
        if not isinstance(env or {}, Mapping) or not all(
            isinstance(v, str) for v in (env or {}).values()
        ):
            raise _refuse("env", env, "a table of strings")
        if not _count(tail_chars) or tail_chars < 0:
            raise _refuse("tail_chars", tail_chars, "a non-negative integer")
        if not isinstance(persistent, bool):
            raise _refuse("persistent", persistent, "true or false")
        if max_programs is not None and (not _count(max_programs) or max_programs < 1):
            raise _refuse("max_programs", max_programs, "a positive integer")
        if max_programs is not None and not persistent:
            raise HarnessError("harness option max_programs needs persistent = true")
        self.command = [str(c) for c in command]
        self.env = dict(env or {})
        self.tail_chars = tail_chars
        self.persistent = persistent
        self.max_programs = max_programs
        self.pool: ProgramPool | None = None  # opened by the first pooled segment

    def missing(self) -> str | None:
        """The command's program when it cannot be found: a bare name not on PATH
        (the harness's own ``env`` PATH when it sets one), or an absolute path that
        is not an executable file. A relative path is the program's own business."""
        program = self.command[0]
        if "/" not in program:
            if shutil.which(program, path=self.env.get("PATH")) is None:
                return (
                    f"its command's program {program!r} is not on PATH; install it or give its path"
                )
        elif os.path.isabs(program) and not os.access(program, os.X_OK):
            return f"its command's program {program} is not an executable file"
        return None

    def _files(self, rollout: Rollout) -> tuple[Path, int]:
        n = rollout.state.get("segments", 0)
        rollout.state["segments"] = n + 1
        return rollout.scratch_dir(), n

    def prompt_body(self, rollout: Rollout, messages: Sequence[Message]) -> dict[str, Any]:
        endpoint = self.endpoint(rollout)
        body: dict[str, Any] = {"messages": messages_to_wire(messages)}
        tools = as_tools(rollout.tools)
        if tools:
            body["tools"] = [t.schema for t in tools.values()]
            body["tool_url"] = f"{endpoint.base_url}/tools/call"
        return body

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        body = self.prompt_body(rollout, prompt.wire_messages())
        if self.persistent:
            await self.serve_segment(rollout, body)
            return
        workdir, n = self._files(rollout)
        prompt_file = workdir / f"prompt-{n}.json"
        write_in_scratch(workdir, prompt_file, json.dumps(body))
        output = workdir / f"output-{n}.json"
        await self.run_program(rollout, ["--prompt-file", str(prompt_file)], output)

    def _environment(self, rollout: Rollout) -> dict[str, str]:
        endpoint = self.endpoint(rollout)
        return {
            **scrubbed_environment(rollout.scratch_dir()),
            **self.env,
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.secret,
            "OPENAI_MODEL": rollout.boundary.model,
        }

    async def run_program(self, rollout: Rollout, args: list[str], output: Path) -> None:
        """Run the program once with ``args`` plus ``--output-file``; emit what it
        wrote. Raises ``RolloutStopped`` or ``HarnessError`` as the module says."""
        secret = self.endpoint(rollout).secret
        env = self._environment(rollout)
        output.unlink(missing_ok=True)  # noqa: ASYNC240 - as the scratch files: synchronous
        turns_before = len(rollout.trace.turns)
        try:
            result = await self.run_owned(
                rollout,
                [*self.command, *args, "--output-file", str(output)],
                cwd=rollout.scratch_dir(),
                env=env,
            )
        finally:
            self.end_segment(rollout)
        try:
            produced = self._read_output(rollout.scratch_dir(), output)
        except HarnessError as exc:  # its text may quote the file, key included
            raise HarnessError(str(exc).replace(secret, "***")) from None
        failure = None
        if result.returncode != 0:
            failure = (
                f"{self.command[-1]} exited with status {result.returncode}; stderr tail: "
                f"{_tail(result.stderr, self.tail_chars, secret)!r}; stdout tail: "
                f"{_tail(result.stdout, self.tail_chars, secret)!r}"
            )
        elif produced is None:
            raise HarnessError(f"{self.command[-1]} exited 0 but wrote no output file")
        self._settle(rollout, turns_before, produced or [], failure)

    # -- persistent: the pool ---------------------------------------------------------

    def _open_pool(self, rollout: Rollout) -> ProgramPool:
        env = {k: v for k, v in self.env.items() if k not in ENDPOINT_VARS}
        self.pool = ProgramPool(
            [*self.command, SERVE_FLAG],
            env=env,
            max_programs=self.max_programs,
            containment=self.containment(rollout),
        )
        return self.pool

    async def serve_segment(self, rollout: Rollout, body: dict[str, Any]) -> None:
        """One segment on a pooled program: one line out (``body`` plus the rollout's
        endpoint), one line back; emit its messages. Raises as ``run_program``."""
        endpoint = self.endpoint(rollout)
        body["base_url"] = endpoint.base_url
        body["api_key"] = endpoint.secret
        body["model"] = rollout.boundary.model
        line = orjson.dumps(body) + b"\n"
        pool = self.pool if self.pool is not None else self._open_pool(rollout)
        rollout.trace.info["sandbox"] = pool.containment["sandbox"].describe()
        turns_before = len(rollout.trace.turns)
        program: ProgramProcess | None = None
        try:
            program = await pool.take()
            produced, failure, answered = await self._exchange(program, line, endpoint.secret)
        except BaseException:
            if program is not None:  # cancelled mid-exchange: its protocol state is unknown
                await pool.discard(program)
            raise
        finally:
            self.end_segment(rollout)
        if answered:
            pool.give_back(program)
        else:
            await pool.discard(program)
        self._settle(rollout, turns_before, produced, failure)

    async def _exchange(
        self, program: ProgramProcess, line: bytes, secret: str
    ) -> tuple[list[Message], str | None, bool]:
        """(messages, failure, whether the program answered a well-formed line)."""
        answer = await program.exchange(line)
        if answer is None:
            produced: list[Message] = []
            failure: str | None = f"{self.command[-1]} {await program.farewell()}"
            answered = False
        else:
            produced, failure, answered = self._parse_answer(answer, secret)
        if failure is not None:
            failure += f"; stderr tail: {program.stderr_tail(self.tail_chars, secret)!r}"
        return produced, failure, answered

    def _parse_answer(self, answer: bytes, secret: str) -> tuple[list[Message], str | None, bool]:
        """(messages, failure, well-formed) from the program's answer line."""
        try:
            raw = orjson.loads(answer)
            produced = messages_from_wire(raw["messages"], "answer.messages")
        except (ValueError, KeyError, TypeError) as exc:
            quoted = _tail(answer, self.tail_chars, secret)
            garbage = str(exc).replace(secret, "***")
            return [], f"{self.command[-1]} answered garbage ({garbage}): {quoted!r}", False
        if raw.get("stopped"):
            return produced, f"{self.command[-1]} reported the rollout stopped", True
        return produced, None, True

    async def shutdown(self) -> None:
        """Close the pool, if one is open: every program killed and reaped, its
        directory removed. A later pooled segment opens a new pool."""
        pool, self.pool = self.pool, None
        if pool is None:
            await trio.lowlevel.checkpoint()
            return
        await pool.aclose()

    # -- both -------------------------------------------------------------------------

    def _settle(
        self, rollout: Rollout, turns_before: int, produced: list[Message], failure: str | None
    ) -> None:
        """Emit what the program produced; then, if it failed, raise what the failure
        means: the engine's stop, a model error (the program gave up after the model
        endpoint failed) or a harness error."""
        for message in produced:
            rollout.emit(message)
        if failure is None:
            return
        if rollout.trace.stop_condition is not None:
            raise RolloutStopped(rollout.trace.stop_condition)
        turns = rollout.trace.turns
        if len(turns) > turns_before and turns[-1].error is not None:
            # a model error, as it would be in process (the endpoint's error is on the
            # trace; the program's own words go beside it)
            rollout.trace.errors.append(ErrorInfo("harness", failure, "HarnessError"))
            raise ModelEndpointError(f"the model endpoint failed; {failure}")
        raise HarnessError(failure)

    @staticmethod
    def _read_output(root: Path, output: Path) -> list[Message] | None:
        """The messages the program wrote to ``output``; None when it wrote no file.
        A link or a non-file there is the program's fault (``HarnessError``), never
        followed (``read_in_scratch``)."""
        try:
            data = read_in_scratch(root, output)
        except OSError as exc:
            raise HarnessError(f"the program's output file cannot be read: {exc}") from None
        if data is None:
            return None
        try:
            raw = json.loads(data.decode("utf-8"))
            return messages_from_wire(raw["messages"], "output.messages")
        except (ValueError, KeyError, TypeError) as exc:
            raise HarnessError(f"the program's output file is malformed: {exc}") from None
