"""Rubrics: ``@reward`` / ``@metric`` functions that score a trace against its task,
and ``@stop`` hooks that end a rollout.

A reward or metric is ``fn(task, trace) -> float``: a plain function, a coroutine
function, or a plain function returning an awaitable (e.g. one calling an async judge);
all three are scored the same way, inside the session's shielded close bounded by
``timeouts.scoring_s`` (a plain function that overruns it is measured, not interrupted:
see ``Rubric.score``). A stop
hook is ``fn(trace) -> bool`` (sync or async), checked before every model call and
before a segment launches. Mark methods on an env or taskset class, or plain functions, and
collect them with ``Rubric.of(obj)`` / ``Rubric(fns)``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import trio

from taketurns._errors import ScoringError
from taketurns._exchange.task import Task
from taketurns._exchange.trace import ErrorInfo, Trace

__all__ = ["Rubric", "metric", "reward", "stop"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__taketurns_rubric__"


def reward(fn: F | None = None, *, weight: float = 1.0) -> Any:
    """Mark ``fn(task, trace) -> float`` as a reward; ``trace.reward`` is the weighted
    sum of rewards. Use bare (``@reward``) or with a weight (``@reward(weight=0.5)``)."""

    def mark(f: F) -> F:
        setattr(f, _MARK, ("reward", weight))
        return f

    return mark(fn) if fn is not None else mark


def metric(fn: F) -> F:
    """Mark ``fn(task, trace) -> float`` as a metric: recorded, never weighted."""
    setattr(fn, _MARK, ("metric", 0.0))
    return fn


def stop(fn: F) -> F:
    """Mark ``fn(trace) -> bool`` as a stop hook; its name becomes the stop condition."""
    setattr(fn, _MARK, ("stop", 0.0))
    return fn


@attrs.frozen
class _Scorer:
    name: str
    fn: Callable[..., Any]
    weight: float


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    value = fn(*args)
    if inspect.isawaitable(value):
        value = await value
    return value


def _definition_order(owner: object) -> list[str]:
    """Attribute names in definition order: base classes first, then the owner's own
    (a module or instance's namespace last); each name once."""
    cls = owner if isinstance(owner, type) else type(owner)
    spaces: list[Mapping[str, Any]] = [vars(k) for k in reversed(cls.__mro__)]
    if not isinstance(owner, type) and hasattr(owner, "__dict__"):
        spaces.append(vars(owner))
    names = dict.fromkeys(name for space in spaces for name in space)
    return [name for name in names if not name.startswith("__")]


@attrs.frozen
class Rubric:
    rewards: tuple[_Scorer, ...] = ()
    metrics: tuple[_Scorer, ...] = ()
    stops: tuple[_Scorer, ...] = ()

    @classmethod
    def from_functions(cls, fns: Iterable[Callable[..., Any]]) -> Rubric:
        groups: dict[str, list[_Scorer]] = {"reward": [], "metric": [], "stop": []}
        for fn in fns:
            kind, weight = getattr(fn, _MARK, ("reward", 1.0))
            groups[kind].append(_Scorer(getattr(fn, "__name__", "reward"), fn, weight))
        return cls(tuple(groups["reward"]), tuple(groups["metric"]), tuple(groups["stop"]))

    @classmethod
    def of(cls, *owners: object) -> Rubric:
        """Collect every marked method or function found on ``owners``, in order."""
        fns = []
        for owner in owners:
            for name in _definition_order(owner):
                value = inspect.getattr_static(owner, name, None)
                target = getattr(value, "__func__", value)
                if hasattr(target, _MARK):
                    fns.append(getattr(owner, name))
        return cls.from_functions(fns)

    def __add__(self, other: Rubric) -> Rubric:
        return Rubric(
            self.rewards + other.rewards, self.metrics + other.metrics, self.stops + other.stops
        )

    async def check_stops(self, trace: Trace) -> str | None:
        """The name of the first stop hook that fires, or None. A hook that raises
        stops the rollout too (its error is on the trace): never a checkpoint when
        there are no hooks."""
        for hook in self.stops:
            try:
                if await _call(hook.fn, trace):
                    return hook.name
            except Exception as exc:
                trace.errors.append(ErrorInfo.of("scoring", exc))
                return hook.name
        return None

    async def score(self, task: Task, trace: Trace, *, deadline: float = math.inf) -> bool:
        """Run every reward and metric once, in order, writing ``rewards``, ``reward``
        and ``metrics`` on the trace. A function that raises (or returns a
        non-number, or NaN) records its error and writes no value: a reward never
        computed is absent from ``rewards``, never a 0.0 (the episode fails).

        Every shape takes the same path: the scorer is called, and an awaitable it
        returns is awaited in the caller's scope (the session's close: shielded, and
        cancelled at ``deadline``, a ``trio.current_time()``). A plain function cannot
        be interrupted (nothing stops a thread safely, and one left running would
        still write on the trace), so it is measured instead: a scorer whose value
        arrives after ``deadline`` is not kept (a scoring error), and no scorer
        starts after it. Returns False when the deadline left scorers unrun (their
        names are not written: the caller records the timeout)."""
        total = 0.0
        for i, scorer in enumerate(self.rewards + self.metrics):
            if trio.current_time() >= deadline:
                return False
            value = await _value(scorer, task, trace, deadline)
            total = self._record(trace, i, value, total)
        return True

    async def score_within(self, task: Task, trace: Trace, scoring_s: float) -> None:
        """``score`` bounded by ``scoring_s`` seconds from now, as a session's close
        bounds it (``timeouts.scoring_s``): scorers still running then are cancelled,
        and what was left unscored is recorded by ``timed_out``. Not shielded: a
        cancellation from outside stops it (``rescore`` scores this way)."""
        finished = False
        with trio.move_on_after(scoring_s) as scope:
            finished = await self.score(task, trace, deadline=scope.deadline)
        if not finished:
            self.timed_out(trace, scoring_s)

    def timed_out(self, trace: Trace, scoring_s: float) -> None:
        """Record on ``trace`` that scoring was cut off at ``scoring_s``: the rewards
        and metrics not scored by then are absent, and a scoring error says why."""
        trace.errors.append(
            ErrorInfo(
                "scoring",
                f"finalize and scoring took longer than {scoring_s}s "
                "(timeouts.scoring_s); unfinished rewards are not recorded",
                "ScoringError",
            )
        )

    def _record(self, trace: Trace, i: int, value: float | None, total: float) -> float:
        """Write scorer ``i``'s value (rewards first, then metrics; None, a failed
        scorer: nothing); returns the weighted reward so far."""
        if value is None:
            return total
        if i < len(self.rewards):
            scorer = self.rewards[i]
            trace.rewards[scorer.name] = value
            total += scorer.weight * value
            trace.reward = total
        else:
            trace.metrics[self.metrics[i - len(self.rewards)].name] = value
        return total


async def _value(scorer: _Scorer, task: Task, trace: Trace, deadline: float) -> float | None:
    """One scorer's value, whatever its shape; None (with its error on the trace) when
    it fails or its value arrives after ``deadline``."""
    try:
        raw = scorer.fn(task, trace)
        if inspect.isawaitable(raw):
            raw = await raw
        late = trio.current_time() - deadline
        if late > 0:
            raise ScoringError(
                f"{scorer.name} returned {late:.3g}s after the scoring deadline "
                "(timeouts.scoring_s); its value is not kept"
            )
        return _checked(scorer, raw)
    except Exception as exc:
        _failed(scorer, trace, exc)
        return None


def _checked(scorer: _Scorer, raw: Any) -> float:
    value = float(raw)
    if math.isnan(value):
        raise ScoringError(f"{scorer.name} returned NaN")
    return value


def _failed(scorer: _Scorer, trace: Trace, exc: BaseException) -> None:
    error = ScoringError(f"{scorer.name} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc  # its traceback is the scorer's
    trace.errors.append(ErrorInfo.of("scoring", error))
