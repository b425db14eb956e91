"""The colour duel's rules, pure: the question, how a reply is read, what it pays.
No I/O and no engine: ``taketurns.envs.colour_duel`` referees with these.

A reply is read as ``(colour, alone)``: the first colour word it names (None: none)
and whether the reply is that one word alone. A seat's score against its opponent's
reading:

    one colour word alone, not the opponent's colour   1.0
    one colour word alone, the opponent's colour        0.75
    a colour among other words                          0.25
    no colour                                           0.0
"""

from __future__ import annotations

__all__ = ["COLOURS", "QUESTION", "Reading", "colour_of", "score_of"]

_WORDS = "red orange yellow green blue purple violet pink brown black white grey gray gold"
COLOURS = frozenset([*_WORDS.split(), "silver", "cyan", "magenta", "indigo", "teal", "navy"])
QUESTION = "Name one colour. Reply with the colour only, one word."
#: a reply read: the first colour word it names (None: none), and whether it is alone
Reading = tuple[str | None, bool]


def colour_of(text: str) -> Reading:
    """The first colour word ``text`` names (None: none) and whether ``text`` is
    that one word alone (case and the surrounding punctuation aside)."""
    words = [w.strip(".,!?:;\"'*()").lower() for w in text.split()]
    colour = next((w for w in words if w in COLOURS), None)
    return colour, colour is not None and len(words) == 1


def score_of(mine: Reading, theirs: Reading) -> float:
    """1.0: one colour word alone, not the opponent's colour; 0.75: the same colour;
    0.25: a colour among other words; 0.0: no colour."""
    colour, alone = mine
    if colour is None:
        return 0.0
    if not alone:
        return 0.25
    return 0.75 if colour == theirs[0] else 1.0
