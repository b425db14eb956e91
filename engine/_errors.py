"""The error tree. Every error taketurns raises on purpose is defined here and derives
from one root (a test checks that this drawing is the tree, and that every exception
a public module exports is in it; ``taketurns.errors`` exports them all)::

    TaketurnsError
    ├── ConfigError              bad configuration; raised before any episode starts
    │   └── OptionError          one option's value refused (also a ValueError)
    ├── SessionError             the exchange protocol was misused
    │   ├── TurnError            a turn's message does not fit (also a ValueError)
    │   ├── SessionOver          turn() after the run ended instead of answering
    │   └── SessionClosed        turn() after close()
    ├── HarnessError             a harness failed or cannot do what was asked
    ├── ToolArgumentError        a model's tool arguments do not fit (also a ValueError)
    ├── ModelEndpointError       a model endpoint answered badly or not at all
    │   ├── ModelServerError     a model server the eval started failed to start or died
    │   └── ReplayDiverged       a replay was asked a call its record does not hold
    ├── BadRequest               a request to taketurns' own HTTP face is refused with
    │                            400 (also a ValueError)
    ├── ScoringError             a reward, metric or stop hook failed
    ├── OutputError              writing the run directory failed (a full disk, ...)
    ├── AsyncioCancelled         run_asyncio's asyncio side cancelled on its own
    ├── Interrupted              the eval was stopped by a signal
    ├── WorkerDied               how a worker process ended before its shard did
    ├── WorkerLost               workers kept dying on the same pairs
    └── WorkerError              a worker process's own code failed, not re-raisable
                                 as itself

Errors inside a rollout are data on its trace; errors in an env's ``run`` fail
the episode; neither stops the rest of an eval.

Control flow is not an error, and is not in the tree: ``RolloutStopped`` (the model
boundary refused a call; the segment ends with its stop condition) is a
``BaseException``, as trio's ``Cancelled`` is, so that a harness's ``except
Exception`` cannot swallow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AsyncioCancelled",
    "BadRequest",
    "ConfigError",
    "HarnessError",
    "Interrupted",
    "ModelEndpointError",
    "ModelServerError",
    "OptionError",
    "OutputError",
    "ReplayDiverged",
    "RolloutStopped",
    "ScoringError",
    "SessionClosed",
    "SessionError",
    "SessionOver",
    "TaketurnsError",
    "ToolArgumentError",
    "TurnError",
    "WorkerDied",
    "WorkerError",
    "WorkerLost",
]  # the whole tree: taketurns.errors exports exactly this (sole_error is the core's)


def sole_error(exc: BaseException) -> BaseException:
    """``exc`` with single-member exception groups (trio's nurseries wrap everything)
    peeled off: the one error inside, or the group when it holds several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class TaketurnsError(Exception):
    """Root of every error taketurns raises on purpose."""


class ConfigError(TaketurnsError):
    """A configuration was refused. ``problems`` holds one line per problem, each
    naming the dotted path of the field, the value given and what is accepted."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        self.problems: list[str] = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class OptionError(ConfigError, ValueError):
    """Raised by config validators: ``field`` was given ``value``; ``accepted`` says
    what would do. ``taketurns._config.settings`` renders it with the option's dotted
    path."""

    def __init__(self, field: str, value: Any, accepted: str) -> None:
        self.field, self.value, self.accepted = field, value, accepted
        super().__init__(f"{field} = {value!r} is not accepted; expected {accepted}")


class SessionError(TaketurnsError):
    """The exchange protocol was used out of order."""


class TurnError(SessionError, ValueError):
    """A ``turn()`` message does not fit the session (a prompted task opened with a
    message, a prompt-less one opened bare, a later bare turn): says which call to make."""


class SessionOver(SessionError):
    """``turn()`` was called after the run ended instead of answering.

    ``stop_condition`` says why the run ended."""

    def __init__(self, stop_condition: str | None) -> None:
        self.stop_condition = stop_condition
        super().__init__(
            f"this session's run is over (stop condition {stop_condition!r}); "
            "close it and read session.trace"
        )


class SessionClosed(SessionError):
    """``turn()`` was called after ``close()``."""

    def __init__(self) -> None:
        super().__init__("this session is closed; open a new one with agent.chat(task)")


class HarnessError(TaketurnsError):
    """A harness failed, or was asked for something its contract cannot do."""


class ToolArgumentError(TaketurnsError, ValueError):
    """The model's arguments do not fit the tool; the message goes back to the model."""


class ModelEndpointError(TaketurnsError):
    """A model endpoint failed. ``status`` is the HTTP status (None when no response
    came back); ``retryable`` says whether retrying the same request makes sense."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class BadRequest(TaketurnsError, ValueError):
    """A request the server refuses with HTTP 400; the message names the problem."""


class ModelServerError(ModelEndpointError):
    """A model server the eval owns (``--model llamacpp/...``, ``--model-server``)
    could not start, did not become ready, or exited during the eval. The message
    names its log file and quotes its last lines."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class ReplayDiverged(ModelEndpointError):
    """A replayed seat was asked for a model call its record does not hold (one call
    too many, or a request whose conversation differs from the recorded one): the env
    or its rules changed. ``divergence`` is the ``ReplayDivergence`` (episode, seat,
    turn, what differed), its ``describe()`` the message. The replay's own endpoint
    failing: the session ends with ``model_error``, as for any endpoint failure."""

    def __init__(self, divergence: Any) -> None:
        self.divergence = divergence
        super().__init__(divergence.describe(), retryable=False)


class ScoringError(TaketurnsError):
    """A reward, metric or stop hook raised or timed out."""


class OutputError(TaketurnsError):
    """Writing the run directory failed (a full disk, a read-only file system, ...).
    ``path`` is the file being written, ``run_dir`` its run directory. What was
    already written stays as it was; the message says what to do next."""

    def __init__(self, path: str, run_dir: str, exc: OSError) -> None:
        self.path = path
        self.run_dir = run_dir
        self.errno = exc.errno
        reason = exc.strerror or str(exc)
        super().__init__(
            f"cannot write {path} ({reason}); what was already written is kept: free "
            f"some space (or fix the file system), then continue with --resume -o {run_dir}"
        )


class RolloutStopped(BaseException):
    """Raised by the model boundary instead of making a call a limit or ``@stop`` hook
    refuses. Control flow, not an error: a ``BaseException`` (as ``trio.Cancelled``), so
    a harness's ``except Exception`` lets it through; the segment ends with
    ``Reply(stopped=True)``. ``stop_condition`` names the limit or hook. A harness that
    ends its segment because of the engine's stop (a program told so by the
    interception server) raises it too."""

    def __init__(self, stop_condition: str) -> None:
        self.stop_condition = stop_condition
        super().__init__(f"the rollout was stopped: {stop_condition}")


class AsyncioCancelled(TaketurnsError):
    """The asyncio side of ``run_asyncio`` was cancelled while its trio caller was not
    (an asyncio library cancelled its own task). Raised from the ``CancelledError``."""


class Interrupted(TaketurnsError):
    """The eval was stopped by SIGINT/SIGTERM/SIGHUP; finished episodes are on disk."""


class WorkerDied(TaketurnsError):
    """How a worker process ended before sending its whole shard (``WorkerLost.cause``)."""


class WorkerLost(TaketurnsError):
    """Workers kept dying on the same pairs (``pairs``: (task idx, rollout)), ``attempts``
    times (``taketurns._backends.shards``)."""

    def __init__(
        self, pairs: Sequence[tuple[int, int]], cause: BaseException, *, attempts: int
    ) -> None:
        self.pairs = sorted(pairs)
        self.cause = cause
        shown = ", ".join(map(str, self.pairs[:8])) + (" ..." if len(pairs) > 8 else "")
        super().__init__(
            f"workers died {attempts} times running the pairs {shown} "
            f"(last: {type(cause).__name__}: {cause}); the episodes received are written: "
            "find the failing task, then continue with --resume"
        )


class WorkerError(TaketurnsError):
    """A worker process's own code raised (``kind``: the exception's type) and the
    error could not be re-raised here as itself; ``traceback`` is the worker's
    (``taketurns._backends.processes``)."""

    def __init__(self, kind: str, message: str, traceback: str) -> None:
        self.kind, self.message, self.traceback = kind, message, traceback
        super().__init__(
            f"a worker process failed with {kind}: {message}\n"
            f"the worker's traceback:\n{traceback.rstrip()}"
        )
