"""The harness contract: what plays one agent's side for one segment.

A segment runs from a user message until the agent yields back. ``launch`` runs the
first segment, ``resume`` every continuation. A harness declares what it can do in two
class attributes, read as declared (never guessed from annotations or from which
methods it overrides) and checked when the class is defined:

- ``takes_text`` (default False): ``launch`` receives the task's prompt as plain text
  (``str``) instead of a ``Prompt`` of messages;
- ``resumes`` (default False): its own ``resume`` continues the session natively (the
  program keeps its state); else the default ``resume`` relaunches on the accreted
  conversation, which needs a ``launch`` that takes a ``Prompt``.

So a harness can chat when it ``resumes``, or relaunches on messages (``takes_text``
False); a text-only harness without a native resume is one-shot (``agent.run``).
"""

from __future__ import annotations

import abc
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import attrs
import trio

from taketurns._exchange.boundary import ModelBoundary
from taketurns._exchange.task import Task
from taketurns._exchange.tools import Tool
from taketurns._exchange.trace import Trace
from taketurns._models.messages import Message, SystemMessage
from taketurns._models.model import ModelResponse
from taketurns._procs import journal
from taketurns._procs.sandbox import Sandbox

__all__ = ["Harness", "Prompt", "Rollout", "can_chat"]


@attrs.frozen
class Prompt:
    """What a segment starts from: the task's ``system_prompt`` (to be sent as the
    first system message) and the conversation messages that follow it."""

    system_prompt: str | None
    messages: tuple[Message, ...]
    # the conversation's own system message for ``system_prompt``, when it has one:
    # sent as is, so a request shares its message objects with the conversation
    system: SystemMessage | None = attrs.field(default=None, eq=False, repr=False)

    def wire_messages(self) -> tuple[Message, ...]:
        if self.system_prompt is None:
            return self.messages
        return (self.system or SystemMessage(self.system_prompt), *self.messages)


_NO_SERVICES: Mapping[str, Any] = MappingProxyType({})


class Rollout:
    """A harness's handle on its rollout. Created by the session; harnesses call
    ``complete`` (the model boundary), ``emit`` (add an assistant or tool message to
    the conversation) and, if they need one, ``scratch_dir``."""

    __slots__ = (
        "_scratch",
        "_segment",
        "boundary",
        "sandbox",
        "services",
        "state",
        "synthesized_system",
        "task",
        "tools",
        "trace",
    )

    def __init__(
        self,
        trace: Trace,
        boundary: ModelBoundary,
        *,
        task: Task,
        tools: Sequence[Callable[..., Any] | Tool] = (),
        services: Mapping[str, Any] | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.trace = trace
        self.boundary = boundary
        self.task = task
        self.tools = tuple(tools)
        self.services: Mapping[str, Any] = services if services is not None else _NO_SERVICES
        # how the rollout's out-of-process harness contains its processes
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.synthesized_system = False
        self.state: dict[str, Any] = {}  # per-rollout state a harness keeps between segments
        self._segment: list[Message] = []
        self._scratch: Path | None = None

    @property
    def conversation(self) -> list[Message]:
        """The accreted conversation (live; do not mutate)."""
        return self.trace.messages

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        sampling: Mapping[str, Any] | None = None,
    ) -> ModelResponse:
        """One model call through the boundary (see ``ModelBoundary.complete``)."""
        return await self.boundary.complete(messages, tools=tools, sampling=sampling)

    def emit(self, message: Message) -> None:
        """Append a message the agent produced during this segment."""
        self.trace.messages.append(message)
        self._segment.append(message)

    def relaunch_prompt(self) -> Prompt:
        """The accreted conversation as a fresh prompt, without the system message the
        session synthesised from ``system_prompt`` (the prompt carries it again)."""
        messages = self.trace.messages
        if self.synthesized_system:
            system = messages[0]
            assert isinstance(system, SystemMessage)
            return Prompt(self.task.system_prompt, tuple(messages[1:]), system)
        return Prompt(self.task.system_prompt, tuple(messages))

    def scratch_dir(self) -> Path:
        """A private directory for this rollout, created on first use and removed when
        the session closes."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="taketurns-"))
            journal.record(self.services.get("run_dir"), self._scratch)  # for a SIGKILL
        return self._scratch

    # the session's side of the handle: it opens each segment, reads back what the
    # segment emitted, and removes the scratch directory when it closes

    def start_segment(self) -> None:
        """A new segment begins: ``segment_messages`` starts empty (the session's call)."""
        self._segment = []

    def segment_messages(self) -> tuple[Message, ...]:
        """The messages ``emit`` added since the segment began, in order."""
        return tuple(self._segment)

    def remove_scratch(self) -> None:
        """Remove the scratch directory, if one was made (the session's call, at close)."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


class Harness(abc.ABC):
    """Plays the agent's side. Subclasses implement ``launch``; ``resume`` and
    ``aclose`` are optional; a subclass whose ``launch`` takes text declares
    ``takes_text = True``, one whose ``resume`` continues natively ``resumes = True``
    (module docstring). ``aclose`` (finalize) runs at every close. ``launch`` and
    ``resume`` may raise anything: the session records the error and ends the run;
    ``RolloutStopped`` (control flow, a ``BaseException``: an ``except Exception``
    lets it through) ends it with that stop condition. Harness instances are shared
    between rollouts: keep per-rollout state on the ``Rollout`` or in its scratch
    directory, and release what is shared in ``shutdown``."""

    id: ClassVar[str] = ""
    # the default of ``limits.max_segment_turns`` for this harness's agents (None: no
    # cap); an agent's own ``limits.max_segment_turns`` overrides it
    segment_turns: ClassVar[int | None] = None

    # what the harness can do (see the module docstring); checked at class definition
    takes_text: ClassVar[bool] = False
    resumes: ClassVar[bool] = False
    # why a recorded rollout of this harness cannot be replayed (``taketurns replay``
    # refuses its seats before any episode, saying this); empty: it can
    replay_refusal: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_declarations(cls)

    @abc.abstractmethod
    async def launch(self, rollout: Rollout, prompt: Any) -> None:
        """Run the first segment. ``prompt`` is a ``Prompt``, or the task's prompt text
        (``str``) for a harness that declares ``takes_text = True``."""

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        """Run a continuation after the user sent ``messages`` (already appended to the
        conversation). Default: relaunch on the accreted conversation."""
        await self.launch(rollout, rollout.relaunch_prompt())

    def open_segment(self, rollout: Rollout) -> AbstractAsyncContextManager[Any]:
        """What the harness holds open for exactly one segment: the session enters it
        around every ``launch``/``resume``, inside the segment's cancel scope, and
        leaves it when the segment ends, however it ends (a served harness opens its
        rollout's endpoint here: ``ServedHarness``). Default: nothing."""
        return contextlib.nullcontext()

    async def aclose(self, rollout: Rollout) -> None:  # noqa: B027 - optional hook
        """Finalize the rollout at session close, once (in the close's shielded scope
        bounded by ``timeouts.scoring_s``, before the scorers). Default: nothing."""

    def missing(self) -> str | None:
        """What this machine lacks to run the harness (its program not on PATH, say),
        in words that name the fix; None when nothing is. The eval refuses a role
        whose harness misses something before any episode. Default: None."""
        return None

    async def shutdown(self) -> None:
        """Release what the harness holds across its rollouts (a pool of programs,
        say). The eval runner calls it once, shielded, after the last session of every
        agent using this instance has closed, also when the eval fails or is
        cancelled; outside an eval, call it yourself when done with the harness.
        Default: nothing (a checkpoint)."""
        await trio.lowlevel.checkpoint()


def _check_declarations(cls: type[Harness]) -> None:
    """Refuse a harness class whose declarations are not booleans or contradict it."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    for attr in ("takes_text", "resumes"):
        if not isinstance(getattr(cls, attr), bool):
            raise TypeError(
                f"harness {name}: {attr} = {getattr(cls, attr)!r}; declare it True or False "
                "(see taketurns.harness.Harness)"
            )
    if cls.resumes and cls.resume is Harness.resume:
        raise TypeError(
            f"harness {name} declares resumes = True but defines no resume(): define the "
            "native resume, or drop the declaration (the default resume relaunches)"
        )
    if cls.takes_text and not cls.resumes and "resume" in vars(cls):
        raise TypeError(
            f"harness {name} defines resume() but takes text and does not declare "
            "resumes = True: its resume would never run (chat() is refused); declare "
            "resumes = True if it continues the session natively"
        )


def can_chat(harness: Harness) -> bool:
    """Whether ``agent.chat`` can hold this harness open turn by turn: it resumes
    natively, or relaunches on messages (its ``launch`` takes a ``Prompt``)."""
    return harness.resumes or not harness.takes_text
