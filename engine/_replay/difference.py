"""How a replayed episode's record differs from the recorded one.

Both episodes are written as ``episodes.jsonl`` writes them (``episode_line``) and
compared field by field, except what differs between any two runs of one episode:
ids (the episode's and the trace stamps' ``episode.id``), timing (``timing``, each
turn's and judge call's ``latency_s``), where Python put an error's frames
(``where``, ``traceback``) and the provenance notes of ``rescore`` and ``replay``
(``info.rescored``, ``info.replayed``, a trace's ``info.rescored_from``). Everything
else (rewards, metrics, turns, messages, stop conditions, errors, outcome) must be
equal.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from taketurns._eval.episode import Episode
from taketurns._output.records import episode_line

__all__ = ["Difference", "record_differences"]

CLIP = 60  # characters of each value shown

_MISSING = object()


@attrs.frozen
class Difference:
    """One field that differs: its ``path`` (``traces[0].reward``), both values as
    short text, and the ``seat`` and ``turn`` it lies in (None when outside one)."""

    path: str
    recorded: str
    replayed: str
    seat: str | None = None
    turn: int | None = None

    def describe(self) -> str:
        return f"{self.path} was {self.recorded}, replayed {self.replayed}"


def record_differences(original: Episode, replayed: Episode, *, limit: int = 5) -> list[Difference]:
    """Up to ``limit`` fields in which ``replayed``'s record differs from
    ``original``'s (module docstring), in record order."""
    a, b = _comparable(original), _comparable(replayed)
    found: list[tuple[tuple[Any, ...], Any, Any]] = []
    _walk(a, b, (), found, limit)
    return [_difference(a, path, x, y) for path, x, y in found]


def _comparable(episode: Episode) -> dict[str, Any]:
    record: dict[str, Any] = orjson.loads(episode_line(episode))
    for key in ("id", "timing"):
        record.pop(key, None)
    for key in ("rescored", "replayed"):
        (record.get("info") or {}).pop(key, None)
    _drop_frames(record.get("errors"))
    for trace in record.get("traces") or ():
        trace.pop("timing", None)
        (trace.get("episode") or {}).pop("id", None)
        (trace.get("info") or {}).pop("rescored_from", None)
        _drop_frames(trace.get("errors"))
        for item in (trace.get("turns") or []) + (trace.get("judge_calls") or []):
            item.pop("latency_s", None)
    return record


def _drop_frames(errors: list[dict[str, Any]] | None) -> None:
    for error in errors or ():
        error.pop("where", None)
        error.pop("traceback", None)


def _walk(a: Any, b: Any, path: tuple[Any, ...], out: list[Any], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), (*path, key), out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _walk(x, y, (*path, i), out, limit)
    elif a != b:
        out.append((path, a, b))


def _difference(record: dict[str, Any], path: tuple[Any, ...], a: Any, b: Any) -> Difference:
    seat = turn = None
    if len(path) > 1 and path[0] == "traces":
        trace = record["traces"][path[1]]
        seat = (trace.get("agent") or {}).get("name")
        if len(path) > 3 and path[2] == "turns":
            turn = trace["turns"][path[3]].get("index")
    return Difference(_path(path), _shown(a), _shown(b), seat, turn)


def _path(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    if isinstance(value, list):
        text = f"{len(value)} items " + orjson.dumps(value).decode()
    else:
        text = orjson.dumps(value).decode()
    return text if len(text) <= CLIP else text[: CLIP - 1] + "…"
