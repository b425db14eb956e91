"""Kuhn poker's rules, pure: the deal, whose turn it is, what is legal, how an answer
is read and who wins what. No I/O and no engine: ``taketurns.envs.kuhn`` referees with these.

Three cards (J < Q < K), two players, ante 1, one betting round of at most one bet.
A history is the list of actions in order; the seats alternate, player 0 first:

    check check        showdown for the antes (±1)
    check bet fold     player 0 folds (-1)
    check bet call     showdown for 2 each (±2)
    bet fold           player 1 folds (+1 to player 0)
    bet call           showdown for 2 each (±2)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

__all__ = [
    "ACTIONS",
    "ANTE",
    "CARDS",
    "OPEN_HISTORIES",
    "InvalidAnswer",
    "deal",
    "forfeit_payoffs",
    "is_over",
    "legal_actions",
    "narrate",
    "options",
    "parse_action",
    "payoffs",
    "task_seed",
    "to_act",
]

CARDS = ("J", "Q", "K")  # in rank order
ACTIONS = ("check", "bet", "call", "fold")
ANTE = 1

_RANK = {card: rank for rank, card in enumerate(CARDS)}
_LEGAL: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("check", "bet"),
    ("check",): ("check", "bet"),
    ("check", "bet"): ("fold", "call"),
    ("bet",): ("fold", "call"),
}
OPEN_HISTORIES = tuple(_LEGAL)  # the histories at which a seat is still to act
_BRACKETED = re.compile(r"\[([^\[\]]*)\]")
_VERB = {"check": "checks", "bet": "bets", "call": "calls", "fold": "folds"}


class InvalidAnswer(ValueError):
    """A reply that does not count as an action; the message says why."""


def task_seed(base: int, idx: int) -> int:
    """The deal seed of task ``idx`` under config seed ``base`` (stable across runs and
    Python versions: a hash, not ``hash()``)."""
    digest = hashlib.blake2b(f"kuhn-poker/{base}/{idx}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


_DEALS = tuple((a, b) for a in CARDS for b in CARDS if a != b)


def deal(seed: int) -> tuple[str, str]:
    """The cards of player 0 and player 1 (two different cards of the three): one of
    the six ordered deals, picked by the seed (itself a uniform 64-bit hash)."""
    return _DEALS[seed % len(_DEALS)]


def is_over(history: Sequence[str]) -> bool:
    return tuple(history) not in _LEGAL


def to_act(history: Sequence[str]) -> int:
    """The seat to act next (the seats alternate, player 0 first)."""
    return len(history) % 2


def legal_actions(history: Sequence[str]) -> tuple[str, ...]:
    """The actions open to the seat to act; () once the hand is over."""
    return _LEGAL.get(tuple(history), ())


def options(legal: Sequence[str]) -> str:
    """``legal`` as bracketed options: ``[check] [bet]``."""
    return " ".join(f"[{action}]" for action in legal)


def narrate(history: Sequence[str]) -> str:
    """The betting so far in words: ``player0 checks, player1 bets`` (or ``none``)."""
    if not history:
        return "none"
    return ", ".join(f"player{to_act(history[:i])} {_VERB[a]}" for i, a in enumerate(history))


def parse_action(text: str, legal: Sequence[str]) -> str:
    """The one legal action ``text`` names in brackets (case-insensitive), as the
    prompt asks: exactly one bracketed action. Bracketed text that is not an action
    word is ignored. Raises ``InvalidAnswer`` when there is no action, more than one
    (the same action named twice included), or an illegal one."""
    found = _BRACKETED.findall(text)
    if len(found) == 1:  # the usual answer: one bracketed word, no list work
        action = found[0].strip().lower()
        if action in legal:
            return action
    actions = [a for a in (m.strip().lower() for m in found) if a in ACTIONS]
    if not actions:
        raise InvalidAnswer("your answer has no bracketed action")
    if len(actions) > 1:
        different = list(dict.fromkeys(actions))
        what = (
            f"{len(different)} different actions ({', '.join(different)})"
            if len(different) > 1
            else f"[{actions[0]}] {len(actions)} times"
        )
        raise InvalidAnswer(f"your answer names {what}; name exactly one bracketed action")
    if actions[0] not in legal:
        raise InvalidAnswer(f"{actions[0]} is not a legal action now")
    return actions[0]


def payoffs(cards: Sequence[str], history: Sequence[str]) -> tuple[int, int]:
    """Zero-sum payoffs of a finished hand: a folder loses what it put in; at showdown
    the lower card loses what it put in (1, or 2 after a call)."""
    if not is_over(history):
        raise ValueError(f"the hand is not over: {list(history)}")
    stake = [ANTE, ANTE]
    for i, action in enumerate(history):
        if action in ("bet", "call"):
            stake[to_act(history[:i])] += 1
    if history[-1] == "fold":
        loser = to_act(history[:-1])
    else:
        loser = 0 if _RANK[cards[0]] < _RANK[cards[1]] else 1
    return _lost(loser, stake[loser])


def forfeit_payoffs(seat: int) -> tuple[int, int]:
    """A forfeit costs the forfeiting seat 1, paid to the other."""
    return _lost(seat, 1)


def _lost(loser: int, amount: int) -> tuple[int, int]:
    return (-amount, amount) if loser == 0 else (amount, -amount)
