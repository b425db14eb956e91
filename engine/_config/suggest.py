""" "Did you mean": the near misses of a mistyped id, flag, option or value.

One rule for every kind of name (``difflib``'s ratio, with dashes and underscores
alike and case ignored): at most three candidates, best first, each at least 60%
similar and within 0.1 of the best; when none is, the candidates the word begins
as a whole part of (``word`` for ``word-game``). Long lists are never dumped: a message names the
near misses and where the whole list is.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

__all__ = ["LONG_LIST", "choices_text", "close_matches", "did_you_mean"]

# a list of accepted values longer than this is not spelled out in a message
LONG_LIST = 12


def _folded(text: str) -> str:
    return text.lower().replace("-", "_")


def close_matches(word: str, candidates: Iterable[str], *, n: int = 3) -> list[str]:
    """The candidates closest to ``word``: at most ``n``, best first, each within
    0.1 of the best one's similarity (a clear winner is named alone); else those
    ``word`` is the first dash-separated parts of (``word`` -> ``word-game``)."""
    by_folded: dict[str, str] = {}
    for candidate in candidates:
        by_folded.setdefault(_folded(candidate), candidate)
    folded = _folded(word)
    scored = []
    for key in difflib.get_close_matches(folded, list(by_folded), n=n, cutoff=0.6):
        scored.append((difflib.SequenceMatcher(None, folded, key).ratio(), key))
    if not scored:
        starting = [key for key in by_folded if folded and key.startswith(folded + "_")]
        return [by_folded[key] for key in sorted(starting, key=len)[:n]]
    best = scored[0][0]
    return [by_folded[key] for ratio, key in scored if ratio >= best - 0.1]


def did_you_mean(word: str, candidates: Iterable[str], *, quote: str = "'") -> str:
    """``"did you mean 'my-env'?"`` (or ``"... 'a' or 'b'?"``); "" when nothing
    is close."""
    found = close_matches(word, candidates)
    if not found:
        return ""
    shown = [f"{quote}{c}{quote}" for c in found]
    return f"did you mean {' or '.join(shown)}?"


def choices_text(
    word: str, choices: Sequence[str], *, what: str, listing: str | None = None
) -> str:
    """What a value-taking option accepts, for a refused ``word``: ``what`` with the
    near misses, and every choice when the list is short; a long list is named by how
    many it holds and ``listing`` (the command that prints it)."""
    hint = did_you_mean(word, choices)
    if len(choices) <= LONG_LIST:
        text = f"{what}: one of {', '.join(choices)}"
        return f"{text}; {hint}" if hint else text
    where = f" ({listing} lists all {len(choices)})" if listing else ""
    return f"{what}; {hint or 'none is close to it'}{where}"
