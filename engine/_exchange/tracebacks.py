"""An exception as text for an error record: its traceback, capped in size, and the
place to look first (``where``: file:line of the innermost frame in the user's code).

``where`` skips the engine's own frames (the ``taketurns`` package, not its built-in
envs and harnesses), the standard library and installed libraries, looking through
the exception and its causes (the root cause first): a ``KeyError`` raised in an
env's ``run``, a reward dividing by zero, points at that line. When no frame is the
user's, the innermost frame of the exception itself that is outside the engine and
the standard library (user code installed as a library), else its innermost frame
(an endpoint failing: where the engine raised, not inside httpx).
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

__all__ = ["MAX_FRAMES", "MAX_TRACEBACK_CHARS", "format_traceback", "where"]

MAX_FRAMES = 30  # the innermost frames of each exception in the chain
MAX_TRACEBACK_CHARS = 16_000  # the end of the text is kept (the exception itself)

_ENGINE = str(Path(__file__).resolve().parents[1]) + os.sep
# built-in envs and harnesses live inside the package in a regular install: user code
_NOT_ENGINE = tuple(f"{_ENGINE}{sub}{os.sep}" for sub in ("envs", "harnesses"))
_STDLIB = tuple(
    str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep for k in ("stdlib", "platstdlib")
)


def format_traceback(exc: BaseException) -> str:
    """``exc`` formatted as Python prints it (its causes included, each with at most
    ``MAX_FRAMES`` innermost frames); longer than ``MAX_TRACEBACK_CHARS``, its start
    is cut and says so. Empty when ``exc`` was never raised and has no cause."""
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        return ""
    try:
        text = "".join(traceback.format_exception(exc, limit=-MAX_FRAMES))
    except Exception:  # a broken __str__ must not lose the record
        return ""
    if len(text) > MAX_TRACEBACK_CHARS:
        cut = len(text) - MAX_TRACEBACK_CHARS
        text = f"[... {cut} characters cut ...]\n" + text[cut:]
    return text


def where(exc: BaseException) -> str:
    """``file:line in function`` to look at first for ``exc`` (see the module
    docstring), or "" when no frame is known."""
    chain = _chain(exc)
    for e in reversed(chain):  # the root cause first
        for frame in reversed(traceback.extract_tb(e.__traceback__)):
            if _is_user(frame.filename):
                return _shown(frame)
    own = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(own):  # user code installed as a library
        if _is_not_engine_or_stdlib(frame.filename):
            return _shown(frame)
    if own:
        return _shown(own[-1])
    return ""


def _chain(exc: BaseException, seen: set[int] | None = None) -> list[BaseException]:
    """``exc`` and its causes / contexts, outermost first, each exception group
    followed by its first member's chain (no cycles)."""
    chain: list[BaseException] = []
    seen = set() if seen is None else seen
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            chain += _chain(current.exceptions[0], seen)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return chain


def _shown(frame: traceback.FrameSummary) -> str:
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _is_engine(filename: str) -> bool:
    return filename.startswith(_ENGINE) and not filename.startswith(_NOT_ENGINE)


def _is_stdlib(filename: str) -> bool:
    return filename.startswith("<") or filename.startswith(_STDLIB)


def _is_not_engine_or_stdlib(filename: str) -> bool:
    return not _is_engine(filename) and not _is_stdlib(filename)


def _is_user(filename: str) -> bool:
    if not _is_not_engine_or_stdlib(filename):
        return False
    parts = Path(filename).parts
    return "site-packages" not in parts and "dist-packages" not in parts
