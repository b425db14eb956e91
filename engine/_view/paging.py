"""A page of a run's episodes: from line ``offset`` on, the first ``limit`` that pass
a filter, read through the line index (nothing before ``offset`` is parsed; the index
is extended only as far as the page needs, the rest in the background).

A filtered page over a large file is found by a bounded scan: at most ``MAX_SCAN``
lines per request; when the scan stops short, ``next`` says where the next request
continues, so a search over half a million episodes is a series of quick requests,
never one that holds the server. Indexing is bounded too: a page request indexes for
at most ``INDEX_BUDGET_S`` seconds (a long-lined file is indexed a step at a time, see
``lines``), and a page cut short by it says where to continue, as a short scan does."""

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
CHECKPOINT = 1000  # lines a page request reads between checkpoints
INDEX_BUDGET_S = 2.0  # seconds a page request may spend extending the line index


@attrs.frozen
class Page:
    """``episodes``: (line number from 0, record) in file order; ``next``: the line
    to continue from (None at the end of the file); ``total``: complete lines indexed
    so far, all of them when ``indexed_all``; ``damaged``: lines skipped because they
    are not records."""

    episodes: list[tuple[int, dict[str, Any]]]
    offset: int
    next: int | None
    total: int
    indexed_all: bool
    damaged: int
    scanned: int

    def as_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "next": self.next,
            "total": self.total,
            "indexed_all": self.indexed_all,
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
    budget_s: float | None = INDEX_BUDGET_S,
) -> Page:
    """See the module docstring. ``expand``: records as ``parse_record`` rebuilds them
    (each turn's request in full, for transcripts); otherwise as stored. ``budget_s``:
    how long the index may be extended for this page (None: as far as it needs)."""
    await run.index_lines(offset + (limit if flt.empty else max_scan), budget_s)
    generation = run.index.generation
    total = len(run.index)
    found: list[tuple[int, dict[str, Any]]] = []
    damaged = 0
    n = offset
    stop = min(total, offset + max_scan)
    for n, raw in run.index.read(offset, stop):
        if (n - offset) % CHECKPOINT == CHECKPOINT - 1:
            await trio.lowlevel.checkpoint()
            if run.index.generation != generation:  # the file was replaced meanwhile
                break
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
    following = max(n + 1, offset)  # the index may not have reached ``offset`` yet
    await trio.lowlevel.checkpoint()
    indexed_all = run.indexed_all
    return Page(
        episodes=found,
        offset=offset,
        next=following if following < total or not indexed_all else None,
        total=total,
        indexed_all=indexed_all,
        damaged=damaged,
        scanned=max(following - offset, 0),
    )
