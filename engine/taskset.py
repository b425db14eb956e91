"""What a taskset author needs beyond ``taketurns`` (``Taskset``, ``TasksetConfig``,
``register_taskset``, ``reward``, ``metric``, ``Judge`` are there): ``open_taskset``
(a taskset by id, to read its tasks), ``parse_verdict`` (a judge's verdict read from
its text), the ``taskset_registry``. An env author's door is ``taketurns.env``, a
harness author's ``taketurns.harness`` (issue 41: one door per audience).
"""

from taketurns._config.registry import tasksets as taskset_registry
from taketurns._eval.taskset import open_taskset
from taketurns._exchange.judge import parse_verdict

__all__ = [
    "open_taskset",
    "parse_verdict",
    "taskset_registry",
]
