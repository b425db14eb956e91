"""Every error taketurns raises on purpose, in one tree under ``TaketurnsError`` (drawn
in ``taketurns._errors``'s docstring, and checked against it). ``taketurns`` itself
re-exports the ones an env author or an eval user catches or raises; the rest are
here alone: what a harness raises (``RolloutStopped``, ``ToolArgumentError``), what
the HTTP face answers with (``BadRequest``, ``ModelServerError``), how an eval's
output or its worker processes fail (``OutputError``, ``Worker*``), and a replay's
divergence (``ReplayDiverged``)."""

from taketurns._errors import *  # noqa: F403 - the whole tree, as taketurns._errors lists it
from taketurns._errors import __all__ as __all__
