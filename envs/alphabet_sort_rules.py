"""``alphabet-sort`` rules: the seeded name generator, the user's messages, the answer
parser and the per-turn score. No engine imports: plain functions, tested directly.

A task is a list of turns, each a list of "First Last" names. Within one task every
first name and every last name is distinct, so the sorted order is never ambiguous.
Turn 0 asks for the names sorted inside ``<alphabetical_sorted>``; every later turn
adds names and asks for the whole list so far inside ``<combined_alphabetical_sorted>``
with that turn's names marked ``// new name!``.
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
from collections.abc import Sequence

__all__ = [
    "FIRST_NAMES",
    "LAST_NAMES",
    "MARKER",
    "SORT_KEYS",
    "expected_lines",
    "generate_turns",
    "parse_lines",
    "similarity",
    "tag_for",
    "task_seed",
    "turn_message",
]

FIRST_NAMES = (
    "Ada", "Alan", "Amara", "Anders", "Anika", "Arjun", "Astrid", "Beatriz", "Benedikt",
    "Bianca", "Bruno", "Camille", "Carlos", "Chiara", "Dario", "Deepa", "Dmitri", "Elena",
    "Elif", "Emeka", "Esther", "Farah", "Felix", "Freya", "Gideon", "Greta", "Hamid",
    "Hana", "Hugo", "Ines", "Ingrid", "Isaac", "Jonas", "Jun", "Kaito", "Kamala", "Kofi",
    "Lars", "Leila", "Lucia", "Malik", "Marta", "Mateo", "Mei", "Nadia", "Niko", "Noor",
    "Olga", "Omar", "Paloma", "Pavel", "Priya", "Quentin", "Rafael", "Rosa", "Sanjay",
    "Sofia", "Tariq", "Thea", "Tomas", "Ursula", "Valentin", "Wanjiru", "Yusuf",
)  # fmt: skip
LAST_NAMES = (
    "Abara", "Adeyemi", "Almeida", "Andersson", "Baptiste", "Bergstrom", "Brennan",
    "Castillo", "Chen", "Costa", "Dalton", "Delgado", "Dubois", "Eklund", "Esposito",
    "Falk", "Ferreira", "Fischer", "Gallo", "Gupta", "Haddad", "Hansen", "Herrera",
    "Ibarra", "Ivanova", "Jansen", "Jovanovic", "Kaplan", "Kowalski", "Kruger", "Lambert",
    "Larsen", "Lindqvist", "Lopez", "Marino", "Moreau", "Murphy", "Nakamura", "Novak",
    "Nyberg", "Okafor", "Olsen", "Ortega", "Park", "Petrov", "Quinn", "Ramos", "Rossi",
    "Sato", "Schmidt", "Silva", "Sorensen", "Tanaka", "Torres", "Ueda", "Varga", "Vogel",
    "Wagner", "Weber", "Yamada", "Young", "Zeller", "Zhou", "Xu",
)  # fmt: skip

MARKER = "// new name!"
SORT_KEYS = ("first", "last")

_BULLET = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")
_MARKED = re.compile(r"^(.*?)\s*//\s*new\s+name\s*!?$", re.IGNORECASE)


def task_seed(seed: int, idx: int) -> int:
    """Task ``idx``'s seed under the eval-level ``seed`` (stable across runs)."""
    digest = hashlib.blake2b(f"alphabet-sort/{seed}/{idx}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def generate_turns(
    rng: random.Random, num_turns: int, min_names: int, max_names: int
) -> list[list[str]]:
    """``num_turns`` lists of new names; no first or last name repeats in a task."""
    counts = [rng.randint(min_names, max_names) for _ in range(num_turns)]
    total = sum(counts)
    firsts, lasts = rng.sample(FIRST_NAMES, total), rng.sample(LAST_NAMES, total)
    names = [f"{first} {last}" for first, last in zip(firsts, lasts, strict=True)]
    turns, start = [], 0
    for count in counts:
        turns.append(names[start : start + count])
        start += count
    return turns


def _key(name: str, sort_by: str) -> tuple[str, str]:
    first, last = name.split(" ", 1)
    pair = (first, last) if sort_by == "first" else (last, first)
    return (pair[0].casefold(), pair[1].casefold())


def expected_lines(turns: Sequence[Sequence[str]], turn: int, sort_by: str) -> list[str]:
    """The answer lines for ``turn``: every name so far sorted by ``sort_by``, the
    names new in this turn marked (from the second turn on)."""
    so_far = [name for names in turns[: turn + 1] for name in names]
    new = set(turns[turn]) if turn > 0 else set()
    ordered = sorted(so_far, key=lambda name: _key(name, sort_by))
    return [f"{name} {MARKER}" if name in new else name for name in ordered]


def tag_for(turn: int) -> str:
    return "alphabetical_sorted" if turn == 0 else "combined_alphabetical_sorted"


def turn_message(turns: Sequence[Sequence[str]], turn: int, sort_by: str) -> str:
    """What the user says at ``turn``."""
    names = "\n".join(turns[turn])
    tag = tag_for(turn)
    if turn == 0:
        return (
            f"Sort these names alphabetically by {sort_by} name:\n{names}\n\n"
            f"Write the sorted names inside <{tag}></{tag}> tags, one name per line, "
            "each written exactly as above."
        )
    count = len(turns[turn])
    more = "1 more name" if count == 1 else f"{count} more names"
    return (
        f"Here {'is' if count == 1 else 'are'} {more}:\n{names}\n\n"
        f"Now sort all the names so far, earlier and new, alphabetically by {sort_by} "
        f"name. Write the combined list inside <{tag}></{tag}> tags, one name per line, "
        f"and end the line of each name added in this message with ' {MARKER}'."
    )


def _canonical(line: str) -> str:
    line = _BULLET.sub("", line.strip())
    marked = _MARKED.match(line)
    if marked:
        return f"{' '.join(marked.group(1).split())} {MARKER}"
    return " ".join(line.split())


def parse_lines(text: str, tag: str) -> list[str] | None:
    """The non-empty lines inside the last ``<tag>...</tag>`` of ``text``, or None
    when there is none. Lines are normalised: surrounding and repeated whitespace and
    a leading list bullet ("- ", "* ", "1. ") go; a trailing new-name marker is
    rewritten as `` // new name!`` however it was spaced."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL | re.IGNORECASE)
    if not found:
        return None
    return [_canonical(line) for line in found[-1].splitlines() if line.strip()]


def similarity(got: Sequence[str] | None, expected: Sequence[str]) -> float:
    """How close the answer lines are to the expected ones (difflib's ratio over
    lines, 1.0 only for the exact list); 0.0 for a missing answer."""
    if got is None:
        return 0.0
    return difflib.SequenceMatcher(None, list(got), list(expected), autojunk=False).ratio()
