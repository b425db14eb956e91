"""The dialects the servers speak: every one registered (``taketurns._config.registry.
dialects``: the ``taketurns.dialects`` entry points, and ``register`` calls), one
stateless instance each. The built-in three (chat completions, Responses, Anthropic
Messages) and Gemini register as entry points like any third-party dialect."""

from __future__ import annotations

from taketurns._config.registry import dialects
from taketurns._errors import ConfigError
from taketurns._http.dialect import Dialect

__all__ = ["served_dialects"]


def served_dialects() -> tuple[Dialect, ...]:
    """One instance of each registered dialect, in id order; ``ConfigError`` if a
    registered id is not a ``Dialect`` class."""
    out = []
    for id in dialects.ids():
        cls = dialects.get(id)
        if not (isinstance(cls, type) and issubclass(cls, Dialect)):
            raise ConfigError(f"dialect {id!r} is registered as {cls!r}, not a Dialect class")
        out.append(cls())
    return tuple(out)
