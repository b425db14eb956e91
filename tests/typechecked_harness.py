"""A harness module that imports its annotation types only for the type checker (issue
23, item 4): the engine must never evaluate its annotations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taketurns.harness import Harness

if TYPE_CHECKING:
    from collections.abc import Sequence

    from taketurns import Message
    from taketurns.harness import Prompt, Rollout


class TypeCheckedHarness(Harness):
    """Relaunches on messages (the default ``resume``)."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        response = await rollout.complete(prompt.wire_messages())
        rollout.emit(response.message)


class TypeCheckedTextHarness(Harness):
    """Takes text and resumes natively."""

    takes_text = True
    resumes = True

    async def launch(self, rollout: Rollout, prompt: str) -> None:
        response = await rollout.complete(rollout.conversation)
        rollout.emit(response.message)

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        await self.launch(rollout, "")
