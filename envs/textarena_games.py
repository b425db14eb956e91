"""The TextArena engine behind the ``textarena`` and ``wordle`` envs.

Why it is wrapped this way:

- TextArena is synchronous, and ``reset(seed=...)`` seeds Python's *global* ``random``
  (``textarena.core.State``) from which the games then draw their boards. So every
  call into it runs in a worker thread (``trio.to_thread``) while holding one
  process-wide ``threading.Lock`` for the whole call (seed and draws in one hold, and
  each step): concurrent episodes neither block the event loop nor interleave their
  draws. The global RNG state is saved and restored around each call, so the reseeding
  does not leak into the rest of the process. Whatever a game prints (WordSearch prints
  debug lines) is swallowed.
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

__all__ = ["GAMES", "Deal", "Game", "Outcome", "Step", "deal", "load", "render"]

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


async def _off_loop(fn: Callable[..., T], /, *args: Any) -> T:
    return await trio.to_thread.run_sync(_locked, fn, *args)


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


class Game:
    """One episode's engine: a fresh TextArena env dealt for ``(game_id, seed)``.
    ``open`` and ``step`` run off the event loop under the process-wide lock."""

    def __init__(self, env: Any, dealt: Deal) -> None:
        self._env = env
        self.deal = dealt

    @classmethod
    async def open(cls, game_id: str, seed: int) -> Game:
        env, dealt = await _off_loop(_new_env, game_id, seed)
        return cls(env, dealt)

    async def step(self, action: str) -> Step:
        """Play ``action``; the engine's feedback, and its outcome when the game ends."""
        return await _off_loop(_step, self._env, action)
