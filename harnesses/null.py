"""The ``null`` harness: one model call per segment, no tools, no subprocess."""

from __future__ import annotations

from engine import Harness, Prompt, Rollout


class NullHarness(Harness):
    """Sends the prompt (system prompt first) and emits the model's reply. Multi-turn
    through the default ``resume``: a relaunch on the accreted conversation."""

    id = "null"

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        response = await rollout.complete(prompt.wire_messages())
        rollout.emit(response.message)
