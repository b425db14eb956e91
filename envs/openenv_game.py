"""``number-guess``: the small OpenEnv environment the ``openenv`` env serves by default,
built with ``openenv-core`` (the ``openenv`` extra). Imported only by the server
process (``python -m taketurns.envs.openenv_serve taketurns.envs.openenv_game:app``).

``reset(seed=..., high=8, max_guesses=4)`` picks a secret number from 1 to ``high``
with ``random.Random(seed)``. Each observation says what is known and lists the numbers
still possible as bracketed options (``[3] [4] [5]``); the action is ``{"guess": N}``.
A right guess ends the episode with reward 1.0; a wrong one gets the hint "higher" or
"lower" (reward 0.0); running out of guesses ends it. A guess outside 1..``high`` is
refused by the action's schema (the server answers an error and steps nothing).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["GuessAction", "GuessObservation", "NumberGuess", "app"]

MAX_HIGH = 1000


class GuessAction(Action):
    """One guess."""

    guess: int = Field(..., ge=1, le=MAX_HIGH, description="the number you guess")


class GuessObservation(Observation):
    """What the player knows."""

    message: str = Field(default="", description="what happened, and what to do")
    low: int = Field(default=1, description="the secret is at least this")
    high: int = Field(default=1, description="the secret is at most this")
    guesses_left: int = Field(default=0, description="guesses still allowed")


class NumberGuess(Environment):
    """Guess a secret number with higher/lower hints."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every WebSocket session has its own instance

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        self._secret = 1
        self._low, self._high, self._left = 1, 1, 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        high: int = 8,
        max_guesses: int = 4,
        **kwargs: Any,
    ) -> GuessObservation:
        if not 1 <= high <= MAX_HIGH or max_guesses < 1:
            raise ValueError(f"reset: need 1 <= high <= {MAX_HIGH} and max_guesses >= 1")
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        self._secret = random.Random(seed).randint(1, high)
        self._low, self._high, self._left = 1, high, max_guesses
        return self._observe(f"I picked a number from 1 to {high}. Guess it.", 0.0, False)

    def step(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> GuessObservation:
        assert isinstance(action, GuessAction)
        self._state.step_count += 1
        if self._left <= 0:
            return self._observe("The game is over.", 0.0, True)
        self._left -= 1
        guess = action.guess
        if guess == self._secret:
            return self._observe(f"{guess} is right!", 1.0, True)
        if guess < self._secret:
            self._low = max(self._low, guess + 1)
            hint = f"{guess} is too low: the number is higher."
        else:
            self._high = min(self._high, guess - 1)
            hint = f"{guess} is too high: the number is lower."
        if self._left == 0:
            return self._observe(f"{hint} No guesses left; it was {self._secret}.", 0.0, True)
        return self._observe(hint, 0.0, False)

    def _observe(self, text: str, reward: float, done: bool) -> GuessObservation:
        if not done:
            options = " ".join(f"[{n}]" for n in range(self._low, self._high + 1))
            text = f"{text} Still possible: {options}. Guesses left: {self._left}."
        return GuessObservation(
            message=text,
            low=self._low,
            high=self._high,
            guesses_left=self._left,
            reward=reward,
            done=done,
        )

    @property
    def state(self) -> State:
        return self._state


# one env per WebSocket session, as many sessions as an eval runs episodes at once
app = create_app(
    NumberGuess, GuessAction, GuessObservation, env_name="number-guess", max_concurrent_envs=1024
)
