"""The ``program`` harness: runs an external agent program against the interception
server.

The program runs in the rollout's scratch directory, with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` pointing at the interception server and the rollout's own secret
(``OPENAI_MODEL`` names the model). Each segment hands it the prompt (for a
continuation, the accreted conversation) as ``{"messages": [...], "tools": [...],
"tool_url": "..."}`` (``tools`` and ``tool_url`` only when the rollout has tools) and
takes back ``{"messages": [...]}``: the assistant and tool messages it produced, in
OpenAI chat format.

Per segment (the default), the program is started with ``--prompt-file P
--output-file O`` and exchanges those JSON objects through the two files; it exits
when done. A non-zero exit is a harness error, except when the engine stopped the
rollout (a limit or ``@stop``): then the run ends with that stop condition; and when
the program gave up on a failed model call, a model error.

Persistent (``persistent = true``), the program is started once per rollout, with
``--serve``, and serves every segment of it on a line protocol: per segment the
harness writes the prompt object as ONE line of JSON to the program's stdin, and the
program answers ONE line of JSON on its stdout, ``{"messages": [...]}``, adding
``"stopped": true`` when the server refused a call with ``type: rollout_stopped``.
The program keeps reading until stdin reaches EOF; nothing else may go to its stdout
(stderr goes to a file in the scratch directory, quoted on failure). The program
exiting, an answer that is not such an object, or ``stopped`` are classified as a
non-zero exit is; a program that died between segments fails the next one (it is not
restarted). A segment that ends abnormally (timeout, cancellation, failure) kills the
program; the rest are killed when the session closes.

Options (``--env.<role>.harness_options.<name>=...``): ``command`` (argv list;
default: the reference program ``python -m harnesses.programs.chat``), ``env``
(extra environment variables), ``tail_chars`` (how much stderr/stdout to keep on
failure), ``persistent`` (true: one process per rollout, as above).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import trio

from engine import (
    ErrorInfo,
    HarnessError,
    Message,
    ModelEndpointError,
    Prompt,
    Rollout,
    RolloutStopped,
    ServedHarness,
    as_tools,
    messages_from_wire,
    messages_to_wire,
)
from harnesses.program_process import ProgramProcess

DEFAULT_COMMAND = (sys.executable, "-m", "harnesses.programs.chat")
SERVE_FLAG = "--serve"
STDERR_FILE = "program-stderr.log"


def write_file(path: Path, text: str) -> None:
    """Write a small scratch file synchronously. These files are a few KiB in the
    rollout's private temp directory (the page cache, not the network): writing takes
    microseconds, while a thread round trip (trio.Path) costs about a hundred."""
    path.write_text(text, encoding="utf-8")


def _tail(data: bytes, chars: int, secret: str) -> str:
    text = data.decode("utf-8", "replace").replace(secret, "***")
    return text[-chars:]


def _refuse(option: str, value: Any, expected: str) -> HarnessError:
    return HarnessError(f"harness option {option} must be {expected}, not {value!r}")


class ProgramHarness(ServedHarness):
    """Runs an external agent program (``command``; None: the reference chat/tool
    loop) against the interception server: per segment, or once per rollout when
    ``persistent``."""

    id = "program"
    default_command: ClassVar[tuple[str, ...]] = DEFAULT_COMMAND

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
        persistent: bool = False,
    ) -> None:
        if command is None:
            command = self.default_command
        if isinstance(command, str) or not command:
            raise HarnessError("harness option command must be a non-empty list of strings")
        if not isinstance(env or {}, Mapping) or not all(
            isinstance(v, str) for v in (env or {}).values()
        ):
            raise _refuse("env", env, "a table of strings")
        if not isinstance(tail_chars, int) or isinstance(tail_chars, bool) or tail_chars < 0:
            raise _refuse("tail_chars", tail_chars, "a non-negative integer")
        if not isinstance(persistent, bool):
            raise _refuse("persistent", persistent, "true or false")
        self.command = [str(c) for c in command]
        self.env = dict(env or {})
        self.tail_chars = tail_chars
        self.persistent = persistent

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
        write_file(prompt_file, json.dumps(body))
        output = workdir / f"output-{n}.json"
        await self.run_program(rollout, ["--prompt-file", str(prompt_file)], output)

    def _environment(self, rollout: Rollout) -> dict[str, str]:
        endpoint = self.endpoint(rollout)
        return {
            **os.environ,
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
        output.unlink(missing_ok=True)  # noqa: ASYNC240 - see write_file
        turns_before = len(rollout.trace.turns)
        try:
            result = await trio.run_process(
                [*self.command, *args, "--output-file", str(output)],
                cwd=str(rollout.scratch_dir()),
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        finally:
            self.end_segment(rollout)
        try:
            produced = self._read_output(output)
        except HarnessError as exc:  # its text may quote the file, key included
            raise HarnessError(str(exc).replace(secret, "***")) from None
        failure = None
        if result.returncode != 0:
            failure = (
                f"{self.command[-1]} exited with status {result.returncode}; stderr tail: "
                f"{_tail(result.stderr, self.tail_chars, secret)!r}; stdout tail: "
                f"{_tail(result.stdout, self.tail_chars, secret)!r}"
            )
        elif not produced and not output.exists():  # noqa: ASYNC240 - see write_file
            raise HarnessError(f"{self.command[-1]} exited 0 but wrote no output file")
        self._settle(rollout, turns_before, produced, failure)

    async def serve_segment(self, rollout: Rollout, body: dict[str, Any]) -> None:
        """One segment on the rollout's persistent program (started on first use):
        one line out, one line back; emit its messages. Raises as ``run_program``."""
        secret = self.endpoint(rollout).secret
        turns_before = len(rollout.trace.turns)
        program: ProgramProcess | None = rollout.state.get("program")
        produced: list[Message] = []
        failure: str | None
        try:
            if program is None:
                program = await self._start(rollout)
            answer = await program.exchange(json.dumps(body).encode() + b"\n")
            if answer is None:
                failure = f"{self.command[-1]} {await program.farewell()}"
            else:
                produced, failure = self._parse_answer(answer, secret)
        except BaseException:
            if program is not None:
                program.kill()  # cancelled mid-exchange: its protocol state is unknown
            raise
        finally:
            self.end_segment(rollout)
        if failure is not None:
            program.kill()
            failure += f"; stderr tail: {program.stderr_tail(self.tail_chars, secret)!r}"
        self._settle(rollout, turns_before, produced, failure)

    async def _start(self, rollout: Rollout) -> ProgramProcess:
        workdir = rollout.scratch_dir()
        program = await ProgramProcess.start(
            [*self.command, SERVE_FLAG],
            cwd=workdir,
            env=self._environment(rollout),
            stderr_path=workdir / STDERR_FILE,
        )
        rollout.state["program"] = program
        return program

    def _parse_answer(self, answer: bytes, secret: str) -> tuple[list[Message], str | None]:
        """(messages, failure) from the program's answer line."""
        try:
            raw = json.loads(answer)
            produced = messages_from_wire(raw["messages"], "answer.messages")
        except (ValueError, KeyError, TypeError) as exc:
            quoted = _tail(answer, self.tail_chars, secret)
            garbage = str(exc).replace(secret, "***")
            return [], f"{self.command[-1]} answered garbage ({garbage}): {quoted!r}"
        if raw.get("stopped"):
            return produced, f"{self.command[-1]} reported the rollout stopped"
        return produced, None

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

    async def aclose(self, rollout: Rollout) -> None:
        program: ProgramProcess | None = rollout.state.pop("program", None)
        try:
            if program is not None:
                await program.aclose()
        finally:
            await super().aclose(rollout)

    @staticmethod
    def _read_output(output: Path) -> list[Message]:
        if not output.exists():
            return []
        try:
            raw = json.loads(output.read_text(encoding="utf-8"))
            return messages_from_wire(raw["messages"], "output.messages")
        except (ValueError, KeyError, TypeError) as exc:
            raise HarnessError(f"the program's output file is malformed: {exc}") from None
