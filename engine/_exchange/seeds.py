"""Seeds: how the run's one seed (``--seed``, config ``seed``) becomes every seed a
run uses, with no global RNG anywhere.

Each seed is a stable hash (BLAKE2b, not Python's ``hash()``) of the seed it derives
from and the coordinates of what it seeds, so it depends on *what* is seeded and never
on *when*: not on the concurrency, the backend, the worker or the order episodes are
scheduled in. The chain::

    run seed S
     ├─ the env's tasks           (env.seed: S, unless the env config sets its own)
     └─ episode_seed(S, task, rollout)      -> agents.rng, agents.seed (the env's RNG)
         └─ session_seed(episode, agent, n, task, key)
                                   (the n-th session that agent opened on that task,
                                    or the session opened with that ``seed_key``)
             └─ call_seed(session, i)          -> the ``seed`` of the i-th model call
     └─ judge_seed(S, judge, prompt)        -> the ``seed`` of an LLM judge's call (the
                                               same judgement, the same seed: cached)

A session's seed depends only on what the user chose: the task it is opened on and the
number of sessions that agent opened on the same task before it, or an explicit
``seed_key`` (``agent.chat(task, seed_key=...)``). Sessions opened from concurrent
tasks on different tasks get the same seeds whatever the order they open in; several
opened concurrently on one task take a ``seed_key`` each to be independent of timing.

A call's seed is 31 bits (0 .. 2**31 - 1): every endpoint that takes a ``seed`` takes
that (llama.cpp's is 32-bit). The others are 63 bits.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "DEFAULT_SEED",
    "CallSeeds",
    "call_seed",
    "derive",
    "episode_seed",
    "judge_seed",
    "session_seed",
]

DEFAULT_SEED = 0  # the run seed when none is given: every run is reproducible

_CALL_BITS = 0x7FFFFFFF
# BLAKE2b-64 of nothing yet: copying it costs a fifth of making a new one
_BLANK = hashlib.blake2b(digest_size=8)


def derive(*parts: int | str) -> int:
    """A 63-bit seed from ``parts`` (ints and strings; stable across runs, machines
    and Python versions)."""
    h = _BLANK.copy()
    h.update("\x1f".join(map(str, parts)).encode())
    return int.from_bytes(h.digest(), "big") >> 1


def episode_seed(run_seed: int, task_idx: int, rollout: int) -> int:
    """The seed of rollout ``rollout`` of task ``task_idx`` under ``run_seed``: an
    episode retried after a failure keeps it (it replays the same draws)."""
    return derive("episode", run_seed, task_idx, rollout)


def session_seed(
    episode: int,
    agent: str,
    opened: int,
    task: int | None = None,
    key: int | str | None = None,
) -> int:
    """The seed of a session agent ``agent`` opened in the episode seeded ``episode``:
    with a ``key`` (the caller's ``seed_key``), that key's; else the ``opened``-th
    session (from 0) it opened on task ``task`` (None: the episode's own task)."""
    if key is not None:
        return derive("session", episode, agent, "key", key)
    if task is None:
        return derive("session", episode, agent, opened)
    return derive("session", episode, agent, "task", task, opened)


def call_seed(session: int, call: int) -> int:
    """The ``seed`` request field of the ``call``-th model call (from 0) of the session
    seeded ``session``: 31 bits."""
    h = _BLANK.copy()
    h.update(f"{session}\x1f{call}".encode())
    return int.from_bytes(h.digest(), "big") & _CALL_BITS


class CallSeeds:
    """The seeds of one session's model calls, in order: ``next()`` is
    ``call_seed(session, i)`` for i = 0, 1, ... (the session's part hashed once: a
    call costs a copy and an update of the hash, about half a microsecond)."""

    __slots__ = ("_base", "_calls")

    def __init__(self, session: int) -> None:
        self._base = _BLANK.copy()
        self._base.update(f"{session}\x1f".encode())
        self._calls = 0

    def next(self) -> int:
        h = self._base.copy()
        h.update(str(self._calls).encode())
        self._calls += 1
        return int.from_bytes(h.digest(), "big") & _CALL_BITS


def judge_seed(run_seed: int, judge: str, prompt: str) -> int:
    """The ``seed`` request field of judge ``judge``'s call on ``prompt`` (the text it
    is asked) under ``run_seed``: 31 bits."""
    return derive("judge", run_seed, judge, prompt) & _CALL_BITS
