"""The TextArena engine behind the ``textarena`` and ``wordle`` envs.

Why it is wrapped this way:

- TextArena is synchronous, and ``reset(seed=...)`` seeds Python's *global* ``random``
  (``textarena.core.State``) from which the games then draw their boards. So every
  call into it runs in a worker thread (``trio.to_thread``) while holding one
  process-wide ``threading.Lock`` for the whole call (seed and draws in one hold, and
  each step): concurrent episodes neither block the event loop nor interleave their
  draws. The global RNG state is saved and restored around each call, so the reseeding
  does not leak into the rest of the process; each game keeps its own state between
  calls (``_OwnRandom``): dealt by the task's seed, then drawing from a state the
  episode's RNG (``agents.rng``) seeds, so a run replays whatever else runs. Whatever
  a game prints (WordSearch prints debug lines) is swallowed.
- ``ta.make`` costs 1-2 s for Wordle and WordLadder (POS-tagging the word list, loading
  spelling dictionaries). Each game id is built once per process as a pristine
  *template* that is never reset or stepped; every deal plays a shallow copy of it: a
  new env object whose whole game state comes from its own ``reset``, sharing only the
  read-only word lists (checked for the games in ``GAMES``).
- nltk calls the network on every ``nltk.download`` even when the data is there (the
  games call it at import and in ``ta.make``). When the data they need is present
  (``NLTK_DATA`` or nltk's usual places), those calls become no-ops; otherwise nltk
  downloads as usual.

textarena and nltk are imported lazily (``load``): without the extra, ``taketurns envs``
still works and creating the env raises ``ConfigError`` naming the extra.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import os
import random
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs
import trio

from taketurns import ConfigError

__all__ = [
    "GAMES",
    "SELFPLAY_GAMES",
    "Deal",
    "Game",
    "Match",
    "Outcome",
    "Position",
    "Step",
    "Verdict",
    "deal",
    "load",
    "render",
    "render_for",
]

GAMES = ("Wordle-v0", "Wordle-v0-long", "Hangman-v0", "WordLadder-v0", "WordSearch-v0")

# what the games above ask nltk for, and where nltk keeps it
_NLTK_DATA = {
    "words": "corpora/words",
    "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng",
}

T = TypeVar("T")
_LOCK = threading.Lock()  # every call into textarena holds it (see the module docstring)
_templates: dict[str, Any] = {}  # game id -> pristine env, never reset or stepped


def load() -> Any:
    """The ``textarena`` module, with nltk made ready; ``ConfigError`` without the extra."""
    try:
        import nltk

        _prepare_nltk(nltk)
        import textarena
    except ImportError as exc:
        raise ConfigError(
            f"the TextArena envs need the textarena extra ({exc}); "
            "install it with: pip install 'taketurns[textarena]'"
        ) from exc
    return textarena


def _prepare_nltk(nltk: Any) -> None:
    for path in reversed(os.environ.get("NLTK_DATA", "").split(os.pathsep)):
        if path and path not in nltk.data.path:
            nltk.data.path.insert(0, path)  # NLTK_DATA set after nltk was imported
    if getattr(nltk.download, "_taketurns_offline", False):
        return
    if not all(_has_data(nltk, resource) for resource in _NLTK_DATA.values()):
        return  # a real user's machine: let nltk download as usual
    download = nltk.download

    def offline_download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(info_or_id, str) and info_or_id in _NLTK_DATA:
            return True  # present (checked above): no network call
        return download(info_or_id, *args, **kwargs)

    offline_download._taketurns_offline = True  # type: ignore[attr-defined]
    nltk.download = offline_download


def _has_data(nltk: Any, resource: str) -> bool:
    try:
        nltk.data.find(resource)
    except LookupError:
        return False
    return True


@attrs.frozen
class Deal:
    """A freshly dealt game: ``board`` is the engine's first observation (the prompt);
    ``fingerprint`` digests the engine's whole initial state (kept in memory only:
    for Wordle it stands for the secret word)."""

    board: str
    fingerprint: str


@attrs.frozen
class Outcome:
    """The engine's verdict on a finished game (player 0's reward and reason)."""

    reward: float
    reason: str | None
    invalid_move: bool


@attrs.frozen
class Step:
    """What one move produced: the new observation text for the player, and the
    outcome once the game is over."""

    feedback: str
    outcome: Outcome | None = None


def render(messages: Iterable[tuple[int, str, Any]]) -> str:
    """Observation messages as the player's text: the game's messages in order,
    without the echo of the player's own move."""
    texts = (text.strip() for _, text, kind in messages if kind.name != "PLAYER_ACTION")
    return "\n\n".join(text for text in texts if text)


def _locked(fn: Callable[..., T], /, *args: Any) -> T:
    with _LOCK:
        saved = random.getstate()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                return fn(*args)
        finally:
            random.setstate(saved)


def _template(ta: Any, game_id: str) -> Any:
    if game_id not in _templates:
        try:
            _templates[game_id] = ta.make(f"{game_id}-raw")  # the bare game, no wrappers
        except LookupError:
            raise ConfigError(
                f"TextArena's {game_id} needs nltk data (the 'words' corpus and the "
                "'averaged_perceptron_tagger_eng' tagger) and nltk could not download it; "
                "run `python -m nltk.downloader words averaged_perceptron_tagger_eng` on a "
                "machine with network, or point NLTK_DATA at a directory holding them"
            ) from None
    return _templates[game_id]


def _action_wrappers(ta: Any, game_id: str) -> list[Any]:
    """TextArena's default action wrappers for ``game_id`` (e.g. adding missing
    brackets); its observation wrappers are left out: we send only what is new."""
    spec = ta.envs.registration.ENV_REGISTRY[game_id]
    return [w for w in spec.default_wrappers or () if issubclass(w, ta.ActionWrapper)]


def _new_env(game_id: str, seed: int) -> tuple[Any, Deal]:
    ta = load()
    env = copy.copy(_template(ta, game_id))
    for wrapper in _action_wrappers(ta, game_id):
        env = wrapper(env)
    env.reset(num_players=1, seed=seed)
    _, messages = env.get_observation()
    state = repr(env.state.game_state).encode()
    return env, Deal(render(messages), hashlib.blake2b(state, digest_size=16).hexdigest())


def _step(env: Any, action: str) -> Step:
    done, _ = env.step(action)
    _, messages = env.get_observation()
    if not done:
        return Step(render(messages))
    rewards, game_info = env.close()
    info = game_info.get(0, {})
    reward = float((rewards or {}).get(0, 0.0))
    return Step(
        render(messages), Outcome(reward, info.get("reason"), bool(info.get("invalid_move")))
    )


def deal(game_id: str, seed: int) -> Deal:
    """The board ``game_id`` deals for ``seed`` (synchronous: for making tasks)."""
    return _locked(_new_env, game_id, seed)[1]


class _OwnRandom:
    """A game's own state of Python's global RNG: each call sets it, runs under the
    process-wide lock, and keeps what the game left, restoring the process's state
    after (so a game draws the same whatever else runs)."""

    def __init__(self, state: Any = None) -> None:
        self.state = state  # None: the call starts from whatever reset() seeds

    def call(self, fn: Callable[..., T], /, *args: Any) -> T:
        with _LOCK:
            saved = random.getstate()
            if self.state is not None:
                random.setstate(self.state)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    return fn(*args)
            finally:
                self.state = random.getstate()
                random.setstate(saved)

    def reseed(self, rng: random.Random | None) -> None:
        """Continue from a state drawn from ``rng`` (the episode's RNG, ``agents.rng``):
        the deal is the seed's, the draws while playing the episode's."""
        if rng is not None:
            self.state = random.Random(rng.getrandbits(64)).getstate()


class Game:
    """One episode's engine: a fresh TextArena env dealt for ``(game_id, seed)``, its
    draws while playing from ``rng`` (the episode's RNG; None: the seed's own
    stream). ``open`` and ``step`` run off the event loop under the process-wide lock."""

    def __init__(self, env: Any, dealt: Deal, rng: _OwnRandom) -> None:
        self._env = env
        self.deal = dealt
        self._rng = rng

    @classmethod
    async def open(cls, game_id: str, seed: int, rng: random.Random | None = None) -> Game:
        own = _OwnRandom()
        env, dealt = await trio.to_thread.run_sync(own.call, _new_env, game_id, seed)
        own.reseed(rng)
        return cls(env, dealt, own)

    async def step(self, action: str) -> Step:
        """Play ``action``; the engine's feedback, and its outcome when the game ends."""
        return await trio.to_thread.run_sync(self._rng.call, _step, self._env, action)


# --- two-player games (the ``textarena-selfplay`` env) --------------------------------
#
# A two-player game also draws from the global RNG while it is played (KuhnPoker-v0
# deals every round in ``step``), so a ``Match`` keeps its own RNG state: each call
# sets it, runs, and keeps what the game left, restoring the process's state after.
# Each match plays a new engine from ``ta.make`` (they cost milliseconds), except the
# games in ``_COPIED``, slow to make, whose copies of the template share only read-only
# word lists (KuhnPoker-v0, say, shuffles a deck list it keeps on the env object: a
# shallow copy would carry one episode's deck into the next).

SELFPLAY_GAMES = (
    "TicTacToe-v0",
    "WordChains-v0",
    "SimpleNegotiation-v0",
    "KuhnPoker-v0",
    "ConnectFour-v0",
)
_COPIED = frozenset({"WordChains-v0"})  # ta.make costs ~3 s (its word lists)


def render_for(seat: int, messages: Iterable[tuple[int, str, Any]]) -> str:
    """A seat's observation as its text: the game's messages in order, the other
    seat's moves as ``[Player N] move``, without the echo of the seat's own moves."""
    texts = []
    for sender, text, kind in messages:
        if kind.name == "PLAYER_ACTION":
            if sender == seat:
                continue
            text = f"[Player {sender}] {text.strip()}"
        if text.strip():
            texts.append(text.strip())
    return "\n\n".join(texts)


@attrs.frozen
class Verdict:
    """The engine's final result: each seat's reward, the reason, and which seat (if
    any) lost by invalid moves."""

    rewards: tuple[float, float]
    reason: str | None
    invalid_move: tuple[bool, bool]


@attrs.frozen
class Position:
    """Whose move it is and what that seat is told (everything new since it last
    moved), or the verdict once the game is over."""

    seat: int = -1
    observation: str = ""
    verdict: Verdict | None = None


def _verdict(env: Any) -> Verdict:
    rewards, info = env.close()
    rewards = rewards or {}
    reasons = [info.get(seat, {}).get("reason") for seat in (0, 1)]
    return Verdict(
        (float(rewards.get(0, 0.0)), float(rewards.get(1, 0.0))),
        next((r for r in reasons if r), None),
        tuple(bool(info.get(seat, {}).get("invalid_move")) for seat in (0, 1)),  # type: ignore[arg-type]
    )


def _position(env: Any) -> Position:
    seat, messages = env.get_observation()
    return Position(int(seat), render_for(int(seat), messages))


def _new_match(game_id: str, seed: int) -> Any:
    ta = load()
    env = copy.copy(_template(ta, game_id)) if game_id in _COPIED else ta.make(f"{game_id}-raw")
    for wrapper in _action_wrappers(ta, game_id):
        env = wrapper(env)
    env.reset(num_players=2, seed=seed)
    return env


def _move(env: Any, action: str) -> Position:
    done, _ = env.step(action)
    return Position(verdict=_verdict(env)) if done else _position(env)


def _forfeit(env: Any, seat: int, reason: str) -> Position:
    env.state.set_winner(1 - seat, reason=reason)
    return Position(verdict=_verdict(env))


class Match:
    """One episode's two-player engine, dealt for ``(game_id, seed)`` on a fresh copy
    of the game, its draws while playing from ``rng`` (the episode's RNG; None: the
    seed's own stream). Every call runs off the event loop under the process-wide
    lock, with the match's own RNG state (so a seed plays the same game whatever else
    runs)."""

    def __init__(self) -> None:
        self._env: Any = None
        self._own = _OwnRandom()
        self._call = self._own.call

    @classmethod
    async def open(
        cls, game_id: str, seed: int, rng: random.Random | None = None
    ) -> tuple[Match, Position]:
        """A new match and its first position (the seat to move and what it sees)."""
        match = cls()

        def start() -> Position:
            match._env = _new_match(game_id, seed)  # reset seeds the global RNG
            return _position(match._env)

        position = await trio.to_thread.run_sync(match._call, start)
        match._own.reseed(rng)
        return match, position

    async def move(self, action: str) -> Position:
        """The seat to move plays ``action`` (the engine rules on it: an invalid move
        is re-asked or loses, as the game's rules say); the next position."""
        return await trio.to_thread.run_sync(self._call, _move, self._env, action)

    async def forfeit(self, seat: int, reason: str) -> Verdict:
        """End the game as a loss for ``seat`` (its run stopped instead of moving)."""
        position = await trio.to_thread.run_sync(self._call, _forfeit, self._env, seat, reason)
        assert position.verdict is not None
        return position.verdict
