"""The ``stateful`` harness: native resume, like an agent CLI with ``exec resume``.

Its program keeps its own session in the rollout's scratch directory (removed when
the session closes, also on error and cancellation) and continues it with a resume
flag and only the new user message. A first segment, including one opened by the
user's message, launches fresh.

Options as for ``program`` except ``persistent`` and ``max_programs``: no pool of
shared programs (a relaunch per segment on the rollout's own session is the point);
``command`` defaults to the reference program ``taketurns/harnesses/programs/stateful.py``,
run by path with ``python -S`` (``programs.command``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from taketurns import Message
from taketurns.harness import Prompt, Rollout, messages_to_wire, write_in_scratch
from taketurns.harnesses import programs
from taketurns.harnesses.program import ProgramHarness

DEFAULT_COMMAND = programs.command("stateful")


class StatefulHarness(ProgramHarness):
    """Like ``program``, but the program keeps its own session and resumes it with
    only the new user message (``command``; None: the reference stateful program)."""

    id = "stateful"
    resumes = True  # its resume continues the session natively
    default_command = DEFAULT_COMMAND

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        tail_chars: int = 2000,
    ) -> None:
        super().__init__(command, env=env, tail_chars=tail_chars)

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        workdir, n = self._files(rollout)
        prompt_file = workdir / f"prompt-{n}.json"
        body = self.prompt_body(rollout, prompt.wire_messages())
        write_in_scratch(workdir, prompt_file, json.dumps(body))
        args = ["--session-dir", str(workdir), "--prompt-file", str(prompt_file)]
        await self.run_program(rollout, args, workdir / f"output-{n}.json")

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        workdir, n = self._files(rollout)
        message_file = workdir / f"message-{n}.json"
        body = {"messages": messages_to_wire(messages)}
        write_in_scratch(workdir, message_file, json.dumps(body))
        args = ["--session-dir", str(workdir), "--resume", "--message-file", str(message_file)]
        await self.run_program(rollout, args, workdir / f"output-{n}.json")
