"""Fail fast: when an eval stops admitting episodes because too many failed.

``max_failures`` (``--max-failures N`` or ``P%``) is the user's limit: once more than
N of this run's episodes failed (P%: of the episodes this run plays), no further
episode is admitted. Unset, the default limit stops a run whose model endpoint is
plainly down: ``ENDPOINT_DOWN_AFTER`` episodes in a row failed by the ``model`` cause
with no ok episode between them (other failures neither count nor reset the run).
With the client's request retries (``--request-retries``, 3 by default, with backoff)
each of those episodes saw the endpoint fail several times: ten in a row is no blip.
A limit the user sets replaces the default (``--max-failures 100%`` never stops).

Cancelled episodes (a signal) are no failures here. Only this run's episodes count
(records kept from before a ``--resume`` do not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from taketurns._config.options import parse_limit

__all__ = ["ENDPOINT_DOWN_AFTER", "Brake", "parse_limit"]

ENDPOINT_DOWN_AFTER = 10


class Brake:
    """Counts this run's finished episodes (``add`` each summary digest) and says when
    to stop admitting more (``reason``: why, else None). ``planned``: the episodes
    this run would play (the base of a percentage)."""

    def __init__(self, limit: int | str | None, *, planned: int, endpoint: str = "") -> None:
        self.limit = limit
        self.endpoint = endpoint
        self.allowed: int | None = None  # failures tolerated; one more stops
        if isinstance(limit, str):
            self.allowed = math.floor(float(limit[:-1]) / 100 * planned)
        elif isinstance(limit, int):
            self.allowed = limit
        self.failed = 0
        self.model_in_a_row = 0
        self.reason: str | None = None

    def add(self, digested: Mapping[str, Any]) -> bool:
        """Count one finished episode; True when this one trips the brake."""
        cause = digested.get("cause")
        if cause == "cancelled":
            return False
        if cause is None:
            self.model_in_a_row = 0
            return False
        self.failed += 1
        if cause == "model":
            self.model_in_a_row += 1
        if self.reason is not None:
            return False
        if self.allowed is not None and self.failed > self.allowed:
            shown = self.limit if isinstance(self.limit, int) else f"{self.limit} ({self.allowed})"
            episodes = "episode" if self.failed == 1 else "episodes"
            self.reason = f"{self.failed} {episodes} failed, more than --max-failures {shown}"
            return True
        if self.limit is None and self.model_in_a_row >= ENDPOINT_DOWN_AFTER:
            at = f" at {self.endpoint}" if self.endpoint else ""
            self.reason = (
                f"the model endpoint{at} failed {self.model_in_a_row} episodes in a row with "
                "none ok between (it looks down; --max-failures sets another limit)"
            )
            return True
        return False
