"""A page of a run's episodes: from line ``offset`` on, the first ``limit`` that pass
a filter, read through the line index (nothing before ``offset`` is read).

A filtered page over a large file is found by a bounded scan: at most ``MAX_SCAN``
lines per request; when the scan stops short, ``next`` says where the next request
continues, so a search over half a million episodes is a series of quick requests,
never one that holds the server."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import trio

from taketurns._output.records import parse_record
from taketurns._view.filters import EpisodeFilter
from taketurns._view.run import RunView

__all__ = ["MAX_LIMIT", "Page", "find_episodes"]

MAX_LIMIT = 500
MAX_SCAN = 20_000
CHECKPOINT = 200


@attrs.frozen
class Page:
    """``episodes``: (line number from 0, record) in file order; ``next``: the line
    to continue from (None at the end of what is indexed); ``total``: complete lines
    indexed; ``damaged``: lines skipped because they are not records."""

    episodes: list[tuple[int, dict[str, Any]]]
    offset: int
    next: int | None
    total: int
    damaged: int
    scanned: int

    def as_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "next": self.next,
            "total": self.total,
            "scanned": self.scanned,
            "damaged": self.damaged,
            "episodes": [{"line": n, "record": r} for n, r in self.episodes],
        }


async def find_episodes(
    run: RunView,
    flt: EpisodeFilter,
    offset: int,
    limit: int,
    *,
    expand: bool,
    max_scan: int = MAX_SCAN,
) -> Page:
    """See the module docstring. ``expand``: records as ``parse_record`` rebuilds them
    (each turn's request in full, for transcripts); otherwise as stored."""
    run.extend_index()
    total = len(run.index)
    found: list[tuple[int, dict[str, Any]]] = []
    damaged = 0
    n = offset
    stop = min(total, offset + max_scan)
    for n, raw in run.index.read(offset, stop):
        if (n - offset) % CHECKPOINT == CHECKPOINT - 1:
            await trio.lowlevel.checkpoint()
        if not flt.may_match(raw):
            continue
        record = parse_record(raw)
        if record is None:
            damaged += 1
            continue
        if flt.matches(record):
            found.append((n, record if expand else orjson.loads(raw)))
            if len(found) >= limit:
                break
    else:
        n = stop - 1
    following = n + 1
    await trio.lowlevel.checkpoint()
    return Page(
        episodes=found,
        offset=offset,
        next=following if following < total else None,
        total=total,
        damaged=damaged,
        scanned=max(following - offset, 0),
    )
