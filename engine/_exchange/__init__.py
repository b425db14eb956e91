"""The exchange: ``Agent`` (harness x model x sampling x limits), ``ChatSession`` (one
rollout held open turn by turn), the ``Harness`` contract and the built-in ``null``
harness, the model boundary (the one place a model call is made and recorded), the
rubric, tools, ``Task`` and ``Trace``."""
