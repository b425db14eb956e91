"""The eval's progress bar (rich, on stderr): episodes, rate, running mean reward,
error rate and tokens. Updating it is synchronous and cheap; rich redraws from its
own refresh thread (a library-owned thread, stopped in ``close``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["EvalProgress"]


class EvalProgress:
    def __init__(self, total: int, *, done: int = 0, enabled: bool = True) -> None:
        self.total = total
        self.episodes = done
        self.failed = 0
        self.reward_sum = 0.0
        self.rewarded = 0
        self.tokens = 0
        self.enabled = enabled
        self._done_before = done
        self._started = time.monotonic()
        self._pending = 0
        self._shown = 0.0
        self._bar = Progress(
            TextColumn("[bold]eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not enabled,
        )
        self._task = self._bar.add_task("eval", total=total, completed=done, stats="")

    def __enter__(self) -> EvalProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def add(self, digested: Mapping[str, Any]) -> None:
        """Count one finished episode, given its ``summary.digest``."""
        self.episodes += 1
        self.failed += not digested["ok"]
        for trace in digested["traces"]:
            if digested["ok"]:  # a failed episode's rewards are not the model's
                self.reward_sum += trace["reward"]
                self.rewarded += 1
            self.tokens += trace["usage"]["total_tokens"]
        self._pending += 1
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._shown < 0.1 and self.episodes < self.total:
            return  # rich redraws ~10 times a second anyway
        self._shown = now
        advance, self._pending = self._pending, 0
        elapsed = now - self._started
        rate = (self.episodes - self._done_before) / elapsed if elapsed > 0 else 0.0
        mean = self.reward_sum / self.rewarded if self.rewarded else 0.0
        stats = (
            f"reward {mean:+.3f}  errors {self.failed / self.episodes:.1%}  "
            f"{rate:.1f} ep/s  {self.tokens:,} tok"
        )
        self._bar.update(self._task, advance=advance, stats=stats)
