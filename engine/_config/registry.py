"""Explicit registration by id: envs, tasksets, harnesses and wire dialects.

Built-in and third-party components alike register through entry-point groups
(``taketurns.envs``, ``taketurns.tasksets``, ``taketurns.harnesses``,
``taketurns.dialects``) or the ``register`` decorator. An entry point is imported
only when its id is asked for; an unknown id raises ``ConfigError`` listing the ids
that exist. No silent fallback.

An id of the shape ``./path/file.py:Class`` or ``package.module:Class`` is not looked
up but imported (``taketurns._config.reference``): a component runs without packaging.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from taketurns._config.reference import is_reference, load_reference, reference_name
from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError

__all__ = ["Registry", "dialects", "envs", "harnesses", "name_class", "tasksets"]

T = TypeVar("T")


class Registry:
    """Ids of one kind. ``also``: a registry whose ids are accepted where this one's
    are (a taskset runs where an env is named): an unknown id's message lists both."""

    def __init__(self, kind: str, group: str, *, also: Registry | None = None) -> None:
        self.kind = kind
        self.group = group
        self.also = also
        self._items: dict[str, Any] = {}

    def register(self, id: str) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``id`` (and set ``obj.id`` on classes)."""

        def add(obj: T) -> T:
            self._items[id] = obj
            if isinstance(obj, type):
                obj.id = id  # type: ignore[attr-defined]
            return obj

        return add

    def unregister(self, id: str) -> None:
        """Forget what ``register(id)`` added (an entry point of that id stays)."""
        self._items.pop(id, None)

    def _entry_points(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def ids(self) -> list[str]:
        return sorted(set(self._items) | set(self._entry_points()))

    def get(self, id: str, *, field: str | None = None) -> Any:
        """The object registered as ``id``; ``field`` names the option in errors."""
        if id in self._items:
            return self._items[id]
        ep = self._entry_points().get(id)
        if ep is None and is_reference(id):
            return self._by_reference(id, field=field or self.kind)
        if ep is None:
            raise ConfigError(self._unknown(id, field))
        try:
            obj = ep.load()
        except ImportError as exc:
            raise ConfigError(
                f"{self.kind} {id!r} could not be imported ({exc}); if it needs an optional "
                "package, install it (the env's page under docs/envs/ names the pip extra)"
            ) from exc
        self._items[id] = obj
        return name_class(obj, id)

    def _unknown(self, id: str, field: str | None) -> str:
        """``unknown env 'my-evn'; did you mean 'my-env'? known envs: ...``"""
        where = f"{field}: " if field else ""
        known = [f"known {_plural(self.kind)}: {', '.join(self.ids())}"]
        candidates = self.ids()
        if self.also is not None:
            others = self.also.ids()
            known.append(f"{_plural(self.also.kind)}: {', '.join(others)}")
            candidates += others
        hint = did_you_mean(id, candidates)
        return (
            f"{where}unknown {self.kind} {id!r}; {hint + ' ' if hint else ''}{'; '.join(known)}; "
            "or name a class: ./path/file.py:Class or package.module:Class"
        )

    def _by_reference(self, ref: str, *, field: str) -> Any:
        """The class ``ref`` names, imported (not registered: ``ids()`` stays the
        registered ones); a class without an ``id`` of its own is named after ``ref``."""
        return name_class(load_reference(ref, field=field), ref)

    def create(self, id: str, *args: Any, field: str | None = None, **kwargs: Any) -> Any:
        return self.get(id, field=field)(*args, **kwargs)


def name_class(obj: T, id: str) -> T:
    """Give a class found as ``id`` that id when it sets none itself: an entry point's
    class its id (unless it inherits one), a referenced class ``reference_name(id)``.
    Worker processes call this too: a class they unpickle was imported by name, without
    the id the driver's lookup gave it."""
    if not isinstance(obj, type):
        return obj
    if is_reference(id):
        if not obj.__dict__.get("id"):
            obj.id = reference_name(id)  # type: ignore[attr-defined]
    elif not getattr(obj, "id", ""):
        obj.id = id  # type: ignore[attr-defined]
    return obj


def _plural(kind: str) -> str:
    return f"{kind}es" if kind.endswith("s") else f"{kind}s"


tasksets = Registry("taskset", "taketurns.tasksets")
envs = Registry("env", "taketurns.envs", also=tasksets)
harnesses = Registry("harness", "taketurns.harnesses")
dialects = Registry("dialect", "taketurns.dialects")
