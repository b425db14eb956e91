"""The ``null`` harness: one model call per segment, no tools, no subprocess. Part of
the core (an agent's default harness), registered here under the id ``null``."""

from __future__ import annotations

from taketurns._config.registry import harnesses
from taketurns._exchange.harness import Harness, Prompt, Rollout

__all__ = ["NullHarness"]


@harnesses.register("null")
class NullHarness(Harness):
    """Sends the prompt (system prompt first) and emits the model's reply. Multi-turn
    through the default ``resume``: a relaunch on the accreted conversation."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        response = await rollout.complete(prompt.wire_messages())
        rollout.emit(response.message)
