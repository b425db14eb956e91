"""The replay model: each seat of a recorded episode answered with its recorded
replies, in order, and a named divergence when the env asks something else.

``EpisodeReplay`` holds one recorded episode; ``model(seat)`` is the model client of
one seat (a role: every trace the record holds for it). Each call is matched against
the seat's recorded turns: it must be the next recorded call of one of the seat's
traces, with the same conversation (messages compared in OpenAI wire shape) and the
same tools offered. Then the recorded reply comes back as it was (message, usage,
finish reason, token ids and logprobs, policy version), and a recorded endpoint
failure is raised again as a ``ModelEndpointError`` with its recorded message.

A call the record does not hold (one call too many, or a request that differs from
the recorded one at that call: the env's prompt or rules changed) raises
``ReplayDiverged`` and is kept as a ``ReplayDivergence``: episode id, seat, turn
index and what differed (the first differing message, clipped around the first
differing character). ``finish`` adds one for a recorded call the replay never made.

A seat with several traces in one episode (an env that opens several sessions for
one role) matches a call to the first of its traces, already started ones first,
whose next recorded call is this one; with one trace a seat (every built-in env) the
match is exact, call by call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from taketurns._errors import ModelEndpointError, ReplayDiverged
from taketurns._eval.episode import Episode
from taketurns._exchange.trace import Trace, Turn
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse
from taketurns._models.wire import to_wire

__all__ = ["EpisodeReplay", "ReplayDivergence", "ReplayModel", "message_difference"]

CLIP = 60  # characters shown of each side of a differing message


@attrs.frozen
class ReplayDivergence:
    """Where a replay left its record: ``episode`` id, ``seat`` (the role), ``turn``
    (the index of the recorded call, or of the call the record lacks; None when the
    difference is not in one call) and ``what`` differed."""

    episode: str
    seat: str
    turn: int | None
    what: str

    def describe(self) -> str:
        turn = "" if self.turn is None else f", turn {self.turn}"
        return f"episode {self.episode}, seat {self.seat}{turn}: {self.what}"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _tool_names(tools: Sequence[Any]) -> tuple[str, ...]:
    return tuple(t.get("function", {}).get("name", "") for t in tools) if tools else ()


class _Cursor:
    """One recorded trace of a seat and how many of its calls were replayed."""

    __slots__ = ("_wire", "taken", "trace")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.taken = 0
        self._wire: dict[int, list[dict[str, Any]]] = {}

    @property
    def next_turn(self) -> Turn | None:
        turns = self.trace.turns
        return turns[self.taken] if self.taken < len(turns) else None

    def wire(self, turn: Turn) -> list[dict[str, Any]]:
        found = self._wire.get(turn.index)
        if found is None:
            found = self._wire[turn.index] = [to_wire(m) for m in turn.request]
        return found

    def expects(self, live: list[dict[str, Any]], tools: tuple[str, ...]) -> bool:
        turn = self.next_turn
        return turn is not None and tuple(turn.tools) == tools and self.wire(turn) == live

    def continued_by(self, live: list[dict[str, Any]]) -> bool:
        """Whether ``live`` starts with this trace's last recorded request and reply."""
        turns = self.trace.turns
        if not turns or turns[-1].response is None:
            return False
        before = [*self.wire(turns[-1]), to_wire(turns[-1].response)]
        return live[: len(before)] == before

    def shared(self, live: list[dict[str, Any]]) -> int:
        """How many leading messages the next recorded request shares with ``live``."""
        turn = self.next_turn
        if turn is None:
            return -1
        n = 0
        for a, b in zip(self.wire(turn), live, strict=False):
            if a != b:
                break
            n += 1
        return n


class ReplayModel(ModelClient):
    """The model client of one seat of an ``EpisodeReplay`` (module docstring).
    ``complete`` is a checkpoint; it raises ``ReplayDiverged`` for a call the record
    does not hold and ``ModelEndpointError`` where the recorded call failed."""

    def __init__(self, replay: EpisodeReplay, seat: str, traces: Sequence[Trace]) -> None:
        self.replay = replay
        self.seat = seat
        self.cursors = [_Cursor(t) for t in traces]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        live = [to_wire(m) for m in request.messages]
        tools = _tool_names(request.tools)
        cursor = self._match(live, tools)
        if cursor is None:
            raise ReplayDiverged(self.replay.diverged(self._divergence(live, tools)))
        turn = cursor.next_turn
        assert turn is not None
        cursor.taken += 1
        if turn.response is None:
            raise ModelEndpointError(turn.error or "the recorded model call failed")
        return ModelResponse(
            turn.response,
            turn.usage,
            turn.finish_reason,
            token_ids=turn.token_ids,
            prompt_token_ids=turn.prompt_token_ids,
            logprobs=turn.logprobs,
            policy_version=turn.policy_version,
        )

    def _match(self, live: list[dict[str, Any]], tools: tuple[str, ...]) -> _Cursor | None:
        started = [c for c in self.cursors if c.taken]
        for cursor in started + [c for c in self.cursors if not c.taken]:
            if cursor.expects(live, tools):
                return cursor
        return None

    def _divergence(self, live: list[dict[str, Any]], tools: tuple[str, ...]) -> ReplayDivergence:
        episode = self.replay.original.id
        open_ = [c for c in self.cursors if c.next_turn is not None]
        continued = [c for c in self.cursors if c.next_turn is None and c.continued_by(live)]
        if continued or not open_:
            # one call more than a session's record: the session whose whole recorded
            # conversation this request continues (else, with none left, the seat's)
            if not self.cursors:
                return ReplayDivergence(
                    episode, self.seat, 0, "the record holds no session of this seat"
                )
            made = len(continued[0].trace.turns) if continued else len(self.cursors[0].trace.turns)
            return ReplayDivergence(
                episode,
                self.seat,
                made,
                f"the env asked for call {made + 1} of this seat's session but the record "
                f"holds only {made} (the replay made one call more than the recorded run)",
            )
        cursor = max(open_, key=lambda c: c.shared(live))  # the first of the closest
        turn = cursor.next_turn
        assert turn is not None
        recorded = cursor.wire(turn)
        if recorded == live:
            what = f"the tools offered differ: recorded {list(turn.tools)}, replayed {list(tools)}"
        else:
            what = message_difference(recorded, live)
        return ReplayDivergence(episode, self.seat, turn.index, what)


def message_difference(recorded: list[dict[str, Any]], live: list[dict[str, Any]]) -> str:
    """The first difference between a recorded request and a replayed one, in words."""
    for i, (a, b) in enumerate(zip(recorded, live, strict=False)):
        if a != b:
            return f"the request differs from the recorded one at message {i} ({_role(b)}): " + (
                _text_difference(_shown(a), _shown(b))
            )
    if len(live) > len(recorded):
        extra = live[len(recorded)]
        return (
            f"the request has {len(live)} messages, the recorded one {len(recorded)}; the "
            f"first extra is message {len(recorded)} ({_role(extra)}): {_clip(_shown(extra))}"
        )
    lost = recorded[len(live)]
    return (
        f"the request has {len(live)} messages, the recorded one {len(recorded)}; the "
        f"first missing is message {len(live)} ({_role(lost)}): {_clip(_shown(lost))}"
    )


def _role(message: dict[str, Any]) -> str:
    return str(message.get("role", "?"))


def _shown(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str) and set(message) <= {"role", "content"}:
        return content
    return json.dumps(message, ensure_ascii=False, sort_keys=True)


def _clip(text: str, at: int = 0) -> str:
    start = max(0, at - CLIP // 3)
    end = start + CLIP
    return ("…" if start else "") + repr(text[start:end])[1:-1] + ("…" if end < len(text) else "")


def _text_difference(recorded: str, replayed: str) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
        min(len(recorded), len(replayed)),
    )
    return (
        f"at character {at}, recorded '{_clip(recorded, at)}' but replayed '{_clip(replayed, at)}'"
    )


class EpisodeReplay:
    """One recorded episode, replayed: ``model(seat)`` serves a seat's calls,
    ``divergences`` collects where the replay left the record (the first is the one
    that stopped it), ``finish`` checks every recorded call was made."""

    def __init__(self, original: Episode) -> None:
        self.original = original
        self.divergences: list[ReplayDivergence] = []
        self._models: dict[str, ReplayModel] = {}

    def model(self, seat: str) -> ReplayModel:
        found = self._models.get(seat)
        if found is None:
            traces = [t for t in self.original.traces if t.agent.name == seat]
            found = self._models[seat] = ReplayModel(self, seat, traces)
        return found

    def diverged(self, divergence: ReplayDivergence) -> ReplayDivergence:
        self.divergences.append(divergence)
        return divergence

    @property
    def divergence(self) -> ReplayDivergence | None:
        return self.divergences[0] if self.divergences else None

    def finish(self) -> None:
        """After the episode: a divergence for each trace whose recorded calls were
        not all made (the first one left), and for a seat the replay never opened."""
        for trace in self.original.traces:
            seat = trace.agent.name
            model = self.model(seat)
            for cursor in model.cursors:
                turn = cursor.next_turn
                if cursor.trace is trace and turn is not None:
                    self.diverged(
                        ReplayDivergence(
                            self.original.id,
                            seat,
                            turn.index,
                            f"the record holds {len(trace.turns)} calls of this seat but "
                            f"the replay made {cursor.taken} (the env stopped asking)",
                        )
                    )
