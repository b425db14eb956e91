"""What an env's report hooks read: each record of ``episodes.jsonl`` as a light view,
not a structured ``Episode``.

The view answers the fields report hooks read (``id``, ``env``, ``task``, ``rollout``,
``ok``, ``cause``, ``stop``, ``info``, ``seed`` and ``traces``; per trace ``agent``,
``info``, ``rewards``, ``reward``, ``metrics``, ``stop_condition`` and ``last_text``)
straight from the parsed JSON, and ``raw`` is the record itself. Any other attribute
(``timing``, ``errors``, a trace's ``turns`` or ``messages``...) structures the whole
``Episode`` or ``Trace`` through the record converter, once, on first use: a hook
pays for the turns only when it reads them.
"""

from __future__ import annotations

from typing import Any

from taketurns._eval.episode import Episode
from taketurns._exchange.outcome import record_cause
from taketurns._exchange.task import Task
from taketurns._exchange.trace import AgentStamp, Trace
from taketurns._output.records import episode_from, record

__all__ = ["EpisodeView", "TraceView"]

Json = dict[str, Any]


def _dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


class TraceView:
    """One trace of a record (module docstring); ``raw`` is its JSON object."""

    __slots__ = ("_agent", "_full", "raw")

    def __init__(self, raw: Json) -> None:
        self.raw = raw
        self._agent: AgentStamp | None = None
        self._full: Trace | None = None

    @property
    def agent(self) -> AgentStamp:
        if self._agent is None:
            a = _dict(self.raw.get("agent"))
            self._agent = AgentStamp(
                str(a.get("name", "?")),
                str(a.get("model", "?")),
                str(a.get("harness", "?")),
                bool(a.get("trainable", True)),
            )
        return self._agent

    @property
    def info(self) -> Json:
        return _dict(self.raw.get("info"))

    @property
    def rewards(self) -> dict[str, float]:
        return _dict(self.raw.get("rewards"))

    @property
    def metrics(self) -> dict[str, float]:
        return _dict(self.raw.get("metrics"))

    @property
    def reward(self) -> float:
        value = self.raw.get("reward")
        return float(value) if isinstance(value, int | float) else 0.0

    @property
    def stop_condition(self) -> str | None:
        stop = self.raw.get("stop_condition")
        return stop if isinstance(stop, str) else None

    @property
    def last_text(self) -> str:
        """As ``Trace.last_text``: the last assistant message with content's text."""
        for m in reversed(self.raw.get("messages") or ()):
            if not isinstance(m, dict) or m.get("role") != "assistant" or not m.get("content"):
                continue
            content = m["content"]
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, list) else ()
            return "\n".join(
                str(p.get("text", ""))
                for p in parts
                if isinstance(p, dict) and p.get("type") == "text"
            )
        return ""

    def trace(self) -> Trace:
        """The whole ``Trace`` (structured once; raises for a record that does not)."""
        if self._full is None:
            self._full = record.structure(self.raw, Trace)
        return self._full

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.trace(), name)


class EpisodeView:
    """One record of ``episodes.jsonl`` (module docstring); ``raw`` is the record."""

    __slots__ = ("_full", "_task", "_traces", "raw")

    def __init__(self, raw: Json) -> None:
        self.raw = raw
        self._full: Episode | None = None
        self._task: Task | None = None
        self._traces: list[TraceView] | None = None

    @property
    def id(self) -> str:
        return str(self.raw.get("id", ""))

    @property
    def env(self) -> str:
        return str(self.raw.get("env", ""))

    @property
    def rollout(self) -> int:
        return int(self.raw.get("rollout") or 0)

    @property
    def cause(self) -> str | None:
        return record_cause(self.raw)

    @property
    def ok(self) -> bool:
        """True when the episode's result is the model's (``Episode.ok``)."""
        return record_cause(self.raw) is None

    @property
    def stop(self) -> str:
        return str(self.raw.get("stop", "completed"))

    @property
    def seed(self) -> int:
        return int(self.raw.get("seed") or 0)

    @property
    def info(self) -> Json:
        return _dict(self.raw.get("info"))

    @property
    def task(self) -> Task:
        if self._task is None:
            self._task = record.structure(self.raw.get("task"), Task)
        return self._task

    @property
    def traces(self) -> list[TraceView]:
        if self._traces is None:
            found = self.raw.get("traces")
            self._traces = [TraceView(t) for t in found or () if isinstance(t, dict)]
        return self._traces

    def episode(self) -> Episode:
        """The whole ``Episode`` (structured once; raises for a record that does not)."""
        if self._full is None:
            self._full = episode_from(self.raw)
        return self._full

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.episode(), name)
