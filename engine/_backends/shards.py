"""An eval sharded over workers (``--backend ray``, ``--backend processes``): the owed
(task, rollout) pairs dealt round robin into shards, ``-c`` (and
``--max-concurrent-calls``) split between them, and the driver's ledger.

Exactly once: the driver writes a pair the first time it receives it and, when a
worker is lost, runs again only the pairs of its shard it has not received, so a dead
worker's finished-but-undelivered episodes run again and a redelivered one is dropped.
A shard lost ``MAX_LOST + 1`` times (a pair that kills every worker running it) stops
the eval with ``WorkerLost``; what was received is on disk and ``--resume`` continues
on any backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taketurns._config.options import EvalConfig
from taketurns._errors import WorkerLost
from taketurns._exchange.task import Task

__all__ = ["MAX_LOST", "Ledger", "OnLines", "Shard", "deal", "split"]

MAX_LOST = 3  # workers that may die on one shard's pairs before the eval gives up

Pair = tuple[Task, int]
Key = tuple[int, int]  # (task idx, rollout)
# what a driver hands run_eval's writer: finished episodes as their workers serialised
# them, each a JSONL line (no newline) with its ``summary.digest``
OnLines = Callable[[list[tuple[bytes, dict[str, Any]]]], None]


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares differing by at most one, largest first."""
    return [total // parts + (i < total % parts) for i in range(parts)]


@attrs.define
class Shard:
    """Pairs one worker runs, with its share of the eval's limits."""

    pairs: list[Pair]
    share: int  # episodes at once
    calls: int | None  # model calls at once (None: no cap)
    lost: int = 0  # workers that died on these pairs so far
    pending: set[Key] = attrs.field(init=False)  # not yet received by the driver

    def __attrs_post_init__(self) -> None:
        self.pending = {(task.idx, r) for task, r in self.pairs}

    def config(self, config: EvalConfig) -> EvalConfig:
        """The eval's config as this shard's worker runs it (in process, its shares)."""
        return attrs.evolve(
            config, backend="local", concurrency=self.share, max_concurrent_calls=self.calls
        )


def deal(pairs: Sequence[Pair], workers: int, config: EvalConfig) -> list[Shard]:
    """``pairs`` round robin into W = min(workers, -c, pairs, call cap) shards (at
    least one), each with its share of ``-c`` and of ``--max-concurrent-calls``."""
    calls = config.max_concurrent_calls
    n = max(1, min(workers, config.concurrency, len(pairs), calls or len(pairs)))
    shares = split(config.concurrency, n)
    call_shares: list[int | None] = list(split(calls, n)) if calls else [None] * n
    return [Shard(list(pairs[i::n]), shares[i], call_shares[i]) for i in range(n)]


class Ledger:
    """The driver's side of exactly once: what it received, what a lost worker owes.
    ``on_lost`` hears one line each time a worker is lost and its pairs run again
    (the run's summary keeps them as notes: the run says what happened)."""

    def __init__(self, on_lost: Callable[[str], None] | None = None) -> None:
        self.received: set[Key] = set()
        self.on_lost = on_lost

    def receive(self, shard: Shard, key: Key) -> bool:
        """Mark ``key`` received from ``shard``'s worker; False for a redelivery (drop it)."""
        shard.pending.discard(key)
        if key in self.received:
            return False
        self.received.add(key)
        return True

    def redo(self, shard: Shard, cause: BaseException) -> Shard | None:
        """After ``shard``'s worker ended (``cause``: how): the shard of its pairs not
        yet received, to run in a new worker; None when nothing is owed. Raises
        ``WorkerLost`` when this shard already lost ``MAX_LOST`` workers."""
        if not shard.pending:
            return None
        if shard.lost >= MAX_LOST:
            raise WorkerLost(sorted(shard.pending), cause, attempts=MAX_LOST + 1)
        rest = [(task, r) for task, r in shard.pairs if (task.idx, r) in shard.pending]
        if self.on_lost is not None:
            done = len(shard.pairs) - len(rest)
            self.on_lost(
                f"a worker was lost ({type(cause).__name__}: {_first_line(cause)}); "
                f"{done} of its {len(shard.pairs)} episodes were received, the other "
                f"{len(rest)} run again in a new worker"
            )
        return Shard(rest, shard.share, shard.calls, lost=shard.lost + 1)


def _first_line(cause: BaseException) -> str:
    text = str(cause).strip().splitlines()
    return text[0][:200] if text else "no message"
