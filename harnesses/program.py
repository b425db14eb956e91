"""The ``program`` harness: runs an external agent program per segment.

The program is started with ``trio.run_process`` in the rollout's scratch directory,
with ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` pointing at the interception server
and the rollout's own secret. The prompt (for ``resume``, the accreted conversation)
is handed over in a JSON file; the program writes the messages it produced to an
output file. A non-zero exit is a harness error, except when the engine stopped the
rollout (a limit or ``@stop``): then the run ends with that stop condition.

Options (``--env.<role>.harness_options.<name>=...``): ``command`` (argv list;
default: the reference program ``python -m harnesses.programs.chat``), ``env``
(extra environment variables), ``tail_chars`` (how much stderr/stdout to keep on
failure).
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

DEFAULT_COMMAND = (sys.executable, "-m", "harnesses.programs.chat")


def write_file(path: Path, text: str) -> None:
    """Write a small scratch file synchronously. These files are a few KiB in the
    rollout's private temp directory (the page cache, not the network): writing takes
    microseconds, while a thread round trip (trio.Path) costs about a hundred."""
    path.write_text(text, encoding="utf-8")


def _tail(data: bytes, chars: int, secret: str) -> str:
    text = data.decode("utf-8", "replace").replace(secret, "***")
    return text[-chars:]


class ProgramHarness(ServedHarness):
    """Runs an external agent program per segment (``command``; None: the reference
    chat/tool loop) against the interception server."""

    id = "program"
    default_command: ClassVar[tuple[str, ...]] = DEFAULT_COMMAND

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
    ) -> None:
        if command is None:
            command = self.default_command
        if isinstance(command, str) or not command:
            raise HarnessError("harness option command must be a non-empty list of strings")
        self.command = [str(c) for c in command]
        self.env = dict(env or {})
        self.tail_chars = tail_chars

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
        workdir, n = self._files(rollout)
        prompt_file = workdir / f"prompt-{n}.json"
        write_file(prompt_file, json.dumps(self.prompt_body(rollout, prompt.wire_messages())))
        output = workdir / f"output-{n}.json"
        await self.run_program(rollout, ["--prompt-file", str(prompt_file)], output)

    async def run_program(self, rollout: Rollout, args: list[str], output: Path) -> None:
        """Run the program once with ``args`` plus ``--output-file``; emit what it
        wrote. Raises ``RolloutStopped`` or ``HarnessError`` as the module says."""
        endpoint = self.endpoint(rollout)
        env = {
            **os.environ,
            **self.env,
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.secret,
            "OPENAI_MODEL": rollout.boundary.model,
        }
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
            raise HarnessError(str(exc).replace(endpoint.secret, "***")) from None
        for message in produced:
            rollout.emit(message)
        if result.returncode != 0:
            if rollout.trace.stop_condition is not None:
                raise RolloutStopped(rollout.trace.stop_condition)
            message = (
                f"{self.command[-1]} exited with status {result.returncode}; stderr tail: "
                f"{_tail(result.stderr, self.tail_chars, endpoint.secret)!r}; stdout tail: "
                f"{_tail(result.stdout, self.tail_chars, endpoint.secret)!r}"
            )
            turns = rollout.trace.turns
            if len(turns) > turns_before and turns[-1].error is not None:
                # the program gave up after the model endpoint failed: a model error,
                # as it would be in process (the endpoint's error is on the trace; the
                # program's own words go beside it)
                rollout.trace.errors.append(ErrorInfo("harness", message, "HarnessError"))
                raise ModelEndpointError(f"the model endpoint failed; {message}")
            raise HarnessError(message)
        if not produced and not output.exists():  # noqa: ASYNC240 - see write_file
            raise HarnessError(f"{self.command[-1]} exited 0 but wrote no output file")

    @staticmethod
    def _read_output(output: Path) -> list[Message]:
        if not output.exists():
            return []
        try:
            raw = json.loads(output.read_text(encoding="utf-8"))
            return messages_from_wire(raw["messages"], "output.messages")
        except (ValueError, KeyError, TypeError) as exc:
            raise HarnessError(f"the program's output file is malformed: {exc}") from None
