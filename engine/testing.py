"""Test doubles for code built on taketurns, injected through public interfaces, and
the call that plays one episode with them.

- ``BuiltinModel``: the deterministic built-in model (``builtin/<policy>``), in process.
- ``ScriptedModel``: a ``ModelClient`` (``Agent(..., client=...)``) that answers from a
  queue: a ``str`` or ``AssistantMessage`` becomes a reply, a ``ModelResponse`` is
  returned as is, an exception is raised and ``Sleep(s)`` sleeps before the next item.
  An empty queue answers ``default``. It records every request it was sent.
- ``run_episode(env, episode, make_agent)``: play one episode of an env in this trio
  run, with the agents ``make_agent(role, config, info, on_close)`` builds (on a
  double, or a real endpoint): no run directory, no runner.
- ``replay_episode(run_dir, episode_id)``: re-drive one recorded episode with each
  seat's recorded replies (``ReplayResult``; a call the record does not hold is a
  ``ReplayDivergence``), to check an env is deterministic or reproduce a failure.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import attrs
import trio

from taketurns._eval.episode import run_episode
from taketurns._models.builtin import BuiltinModel
from taketurns._models.messages import AssistantMessage
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse, Usage

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from taketurns._replay.model import ReplayDivergence
    from taketurns._replay.run import ReplayResult, replay_episode

# replay reads run directories and plays through the eval's plan: imported on first use
_LAZY = {
    "ReplayDivergence": "taketurns._replay.model",
    "ReplayResult": "taketurns._replay.run",
    "replay_episode": "taketurns._replay.run",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taketurns.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "USAGE",
    "BuiltinModel",
    "ReplayDivergence",
    "ReplayResult",
    "ScriptedModel",
    "Sleep",
    "replay_episode",
    "run_episode",
]


@attrs.frozen
class Sleep:
    """A script item: sleep ``seconds`` (a checkpoint) before the next item."""

    seconds: float


Item = str | AssistantMessage | ModelResponse | BaseException | Sleep
USAGE = Usage(3, 2)  # what every scripted reply costs, unless told otherwise


class ScriptedModel(ModelClient):
    """Answers from a queue of items; records every request it was sent."""

    def __init__(self, *script: Item, default: str = "ok", usage: Usage = USAGE) -> None:
        self.script: deque[Item] = deque(script)
        self.default = default
        self.usage = usage
        self.requests: list[ModelRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def push(self, *items: Item) -> None:
        self.script.extend(items)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer()
        finally:
            self.in_flight -= 1

    async def _answer(self) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        while self.script:
            item = self.script.popleft()
            if isinstance(item, Sleep):
                await trio.sleep(item.seconds)
            elif isinstance(item, BaseException):
                raise item
            elif isinstance(item, ModelResponse):
                return item
            else:
                message = AssistantMessage(item) if isinstance(item, str) else item
                finish = "tool_calls" if message.tool_calls else "stop"
                return ModelResponse(message, self.usage, finish)
        return ModelResponse(AssistantMessage(self.default), self.usage)
