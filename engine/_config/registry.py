"""Explicit registration by id: envs, tasksets and harnesses.

Built-in and third-party components alike register through entry-point groups
(``taketurns.envs``, ``taketurns.tasksets``, ``taketurns.harnesses``) or the
``register`` decorator. An entry point is imported only when its id is asked for; an
unknown id raises ``ConfigError`` listing the ids that exist. No silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from taketurns._errors import ConfigError

__all__ = ["Registry", "envs", "harnesses", "tasksets"]

T = TypeVar("T")


class Registry:
    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group
        self._items: dict[str, Any] = {}

    def register(self, id: str) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``id`` (and set ``obj.id`` on classes)."""

        def add(obj: T) -> T:
            self._items[id] = obj
            if isinstance(obj, type):
                obj.id = id  # type: ignore[attr-defined]
            return obj

        return add

    def _entry_points(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def ids(self) -> list[str]:
        return sorted(set(self._items) | set(self._entry_points()))

    def get(self, id: str, *, field: str | None = None) -> Any:
        """The object registered as ``id``; ``field`` names the option in errors."""
        if id in self._items:
            return self._items[id]
        ep = self._entry_points().get(id)
        if ep is None:
            where = f"{field}: " if field else ""
            raise ConfigError(
                f"{where}unknown {self.kind} {id!r}; known {self.kind}s: {', '.join(self.ids())}"
            )
        try:
            obj = ep.load()
        except ImportError as exc:
            raise ConfigError(
                f"{self.kind} {id!r} could not be imported ({exc}); if it needs an optional "
                "package, install it (e.g. pip install 'taketurns[textarena]')"
            ) from exc
        self._items[id] = obj
        if isinstance(obj, type) and not getattr(obj, "id", ""):
            obj.id = id  # type: ignore[attr-defined]
        return obj

    def create(self, id: str, *args: Any, field: str | None = None, **kwargs: Any) -> Any:
        return self.get(id, field=field)(*args, **kwargs)


envs = Registry("env", "taketurns.envs")
tasksets = Registry("taskset", "taketurns.tasksets")
harnesses = Registry("harness", "taketurns.harnesses")
