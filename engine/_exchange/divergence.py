"""Token divergence: where a turn's prompt ids stop extending the token sequence of
the same trace's earlier turns (their prompt + completion ids, and what the
conversation inserted between them).

A multi-turn trace is one training sequence only while every prompt the server saw
starts with everything before it, token for token. Where it does not, the position,
the two token runs and the reason are a ``Divergence``:

- ``completion``: the difference lies inside an earlier completion: the model's own
  tokens re-tokenize differently once its reply is rendered into the next prompt
  (a model may sample a non-canonical split of a text, e.g. ``"\\n" "\\n"`` where
  the tokenizer writes ``"\\n\\n"``);
- ``template``: it lies in prompt tokens: the chat template rendered an earlier part
  of the conversation differently (a template that drops earlier reasoning, a
  harness that rewrote its history);
- ``truncated``: the new prompt is a strict prefix of the sequence (history cut).

A trace's last completion has no next prompt to show it: where the client knows the
tokenizer, it renders the reply into the next prompt itself and records the tokens it
would take (``Turn.retokenized``, kept only where they differ); ``retokenized``
makes the same ``completion`` divergence of them, its ``turn`` and ``previous`` both
the turn itself.

``check_trace_tokens`` counts them for a trace (``summary.json``); the samples
(``taketurns._train.samples``) split there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

__all__ = [
    "RUN",
    "Divergence",
    "TokenSequence",
    "check_trace_tokens",
    "first_difference",
    "retokenized",
]

RUN = 16  # how many tokens of each side a divergence keeps, from its position


def first_difference(seq: Sequence[int], prompt: Sequence[int]) -> int | None:
    """None when ``prompt`` starts with ``seq``, else the first index where they
    differ (``len(prompt)`` when ``prompt`` is a strict prefix of ``seq``)."""
    n = len(seq)
    if len(prompt) >= n and prompt[:n] == seq:
        return None
    for i, (a, b) in enumerate(zip(seq, prompt, strict=False)):
        if a != b:
            return i
    return len(prompt)


@attrs.frozen
class Divergence:
    """Turn ``turn``'s prompt does not extend the sequence merged up to turn
    ``previous``: they differ at token ``position``; ``expected`` is the sequence
    from there, ``got`` the prompt from there (``RUN`` tokens each); ``kind`` is
    ``completion`` (inside turn ``within``'s completion), ``template`` or
    ``truncated`` (module docstring)."""

    turn: int
    previous: int
    position: int
    kind: str
    within: int | None
    expected: list[int]
    got: list[int]

    def describe(self) -> str:
        if self.turn == self.previous:
            return (
                f"turn {self.turn}'s completion re-tokenizes differently once rendered into "
                f"a next prompt: from token {self.position}, sampled {self.expected} vs "
                f"re-tokenized {self.got}"
            )
        if self.kind == "completion":
            why = f"inside turn {self.within}'s completion: it re-tokenizes differently"
        elif self.kind == "template":
            why = "in prompt tokens: the chat template rendered earlier messages differently"
        else:
            why = "the prompt ends there: the history was cut"
        return (
            f"turn {self.turn}'s prompt does not extend turn {self.previous}'s prompt + "
            f"completion: they differ at token {self.position} ({why}); sequence "
            f"{self.expected} vs prompt {self.got}"
        )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def retokenized(
    turn: int, start: int, completion: Sequence[int], again: Sequence[int] | None
) -> Divergence | None:
    """The divergence of turn ``turn``'s ``completion`` (at position ``start`` of its
    sequence) from ``again``, its tokens as a next prompt would re-tokenize them
    (``Turn.retokenized``); None when ``again`` is None or the same."""
    if again is None:
        return None
    at = first_difference(completion, again)
    if at is None:
        return None
    return Divergence(
        turn,
        turn,
        start + at,
        "completion",
        turn,
        list(completion[at : at + RUN]),
        list(again[at : at + RUN]),
    )


@attrs.define
class TokenSequence:
    """One trace's token sequence as it is merged turn by turn: its tokens and
    which spans are which turn's completion."""

    tokens: list[int] = attrs.field(factory=list)
    completions: list[tuple[int, int, int]] = attrs.field(factory=list)  # start, end, turn
    last: int = -1

    def start(self, turn: int, prompt: Sequence[int], completion: Sequence[int]) -> None:
        self.tokens = list(prompt)
        self.completions = []
        self._add(turn, completion)

    def extend(self, turn: int, prompt: Sequence[int], completion: Sequence[int]) -> None:
        """Append what ``prompt`` inserts after the sequence, then ``completion``."""
        self.tokens += prompt[len(self.tokens) :]
        self._add(turn, completion)

    def _add(self, turn: int, completion: Sequence[int]) -> None:
        start = len(self.tokens)
        self.tokens += completion
        self.completions.append((start, len(self.tokens), turn))
        self.last = turn

    def divergence(self, turn: int, prompt: Sequence[int]) -> Divergence | None:
        """None when ``prompt`` extends the sequence, else where and why not."""
        at = first_difference(self.tokens, prompt)
        if at is None:
            return None
        within = next((t for s, e, t in self.completions if s <= at < e), None)
        if at == len(prompt):
            kind = "truncated"
        else:
            kind = "completion" if within is not None else "template"
        return Divergence(
            turn,
            self.last,
            at,
            kind,
            within,
            self.tokens[at : at + RUN],
            list(prompt[at : at + RUN]),
        )


def check_trace_tokens(
    turns: Iterable[tuple[Any, ...]],
) -> dict[str, Any]:
    """The token check of one trace's turns, given as (index, prompt ids, completion
    ids[, retokenized ids or None]): ``turns`` with token ids, ``checked`` (compared
    with a sequence before them), ``divergent`` and the count by ``kind``; and
    ``final_retokenized``: 1 when the trace's last turn's completion re-tokenizes
    differently (module docstring), else 0. A turn without ids ends the sequence (the
    next one starts afresh, unchecked)."""
    seq: TokenSequence | None = None
    with_ids = checked = 0
    kinds: dict[str, int] = {}
    final = 0
    for index, prompt, completion, *again in turns:
        if prompt is None or completion is None:
            seq = None
            final = 0
            continue
        final = 1 if again and again[0] else 0
        with_ids += 1
        if seq is None:
            seq = TokenSequence()
            seq.start(index, prompt, completion)
            continue
        checked += 1
        found = seq.divergence(index, prompt)
        if found is None:
            seq.extend(index, prompt, completion)
        else:
            kinds[found.kind] = kinds.get(found.kind, 0) + 1
            seq.start(index, prompt, completion)
    return {
        "turns": with_ids,
        "checked": checked,
        "divergent": sum(kinds.values()),
        "kinds": kinds,
        "final_retokenized": final,
    }
