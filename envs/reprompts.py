"""Asking a seat until its answer counts: the re-prompt rule the two-player games
share (``kuhn-poker``, ``prisoners-dilemma``), for any env that wants it.

``ask`` sends the question; ``parse`` turns the reply's text into the answer or
raises ``ValueError`` saying why it does not count. A reply that does not count is
answered with ``feedback`` (the problem, the tries left, the question again), up to
``retries`` times; past that the seat forfeits. So does a seat whose run stops
instead of answering (a limit, a timeout), unless the infrastructure ended it (its
model endpoint or harness failed: ``taketurns.is_failure``): that is no move of the
model's, and the answer is marked ``failed`` (the game has no result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import attrs

from taketurns import ChatSession, is_failure

__all__ = ["Answer", "ask", "feedback", "retries_text"]

T = TypeVar("T")


@attrs.frozen
class Answer(Generic[T]):
    """A seat's answer: ``value`` when it counts, else None (``forfeited``, or
    ``failed`` when the infrastructure ended its run); ``turn``: the index of the
    model call that made it (None when no call was recorded: a harness answering by
    itself)."""

    value: T | None
    failed: bool = False
    turn: int | None = None

    @property
    def forfeited(self) -> bool:
        return self.value is None and not self.failed


def retries_text(retries: int) -> str:
    """``1 retry`` or ``N retries``: how a rules prompt states the allowance."""
    return "1 retry" if retries == 1 else f"{retries} retries"


def feedback(problem: str, left: int, question: str) -> str:
    """The re-prompt after an answer that does not count: why, the tries left (at
    least one), and the question again."""
    tries = "1 try left" if left == 1 else f"{left} tries left"
    return f"That answer does not count: {problem} ({tries}). {question}"


async def ask(
    session: ChatSession, question: str, parse: Callable[[str], T], *, retries: int
) -> Answer[T]:
    """Ask ``question`` until a reply parses, at most ``retries`` re-prompts (module
    docstring)."""
    left, message = retries, question
    while True:
        reply = await session.turn(message)
        turns = session.trace.turns
        turn = turns[-1].index if turns else None
        if reply.stopped:
            return Answer(None, failed=is_failure(reply.stop_condition), turn=turn)
        try:
            return Answer(parse(reply.text), turn=turn)
        except ValueError as exc:
            if left == 0:
                return Answer(None, turn=turn)
            message = feedback(str(exc), left, question)
            left -= 1
