"""Kuhn poker with rubric knobs, for ``taketurns rescore`` tests: ``bonus`` adds a
reward for a won hand; ``broken`` makes that reward raise (a scoring failure)."""

from __future__ import annotations

import attrs

from taketurns import Task, Trace, reward
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker


@attrs.define
class BonusConfig(KuhnConfig):
    bonus: float = 0.0
    broken: bool = False


class BonusKuhn(KuhnPoker):
    config_class = BonusConfig
    config: BonusConfig

    @reward
    def won(self, task: Task, trace: Trace) -> float:
        if self.config.broken:
            raise ArithmeticError("the won reward broke")
        return self.config.bonus if trace.info.get("payoff", 0) > 0 else 0.0
