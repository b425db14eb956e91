"""Kuhn poker with rubric knobs, for ``taketurns rescore`` tests: ``bonus`` adds a
reward for a won hand; ``broken`` makes that reward raise (a scoring failure);
``slow_s`` > 0 adds a reward that takes that long (1.0 when it finishes)."""

from __future__ import annotations

import attrs
import trio

from taketurns import Task, Trace, reward
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker


@attrs.define
class BonusConfig(KuhnConfig):
    bonus: float = 0.0
    broken: bool = False
    slow_s: float = 0.0


class BonusKuhn(KuhnPoker):
    config_class = BonusConfig
    config: BonusConfig

    @reward
    def won(self, task: Task, trace: Trace) -> float:
        if self.config.broken:
            raise ArithmeticError("the won reward broke")
        return self.config.bonus if trace.info.get("payoff", 0) > 0 else 0.0

    @reward(weight=0.0)
    async def slow(self, task: Task, trace: Trace) -> float:
        await trio.sleep(self.config.slow_s)
        return 1.0
