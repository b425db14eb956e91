"""``builtin/cfr``: a built-in model that plays an OpenSpiel game by a solver's policy.

For a seat of the ``openspiel`` env it reads the game (its system prompt names
OpenSpiel's game string) and its information state (the latest question), solves the
game once per process with OpenSpiel's CFR+ (``ITERATIONS`` iterations: a fraction of
a second for Kuhn poker, whose result is within 0.002 of a Nash equilibrium) and
answers one bracketed legal action drawn from the average policy, by a hash of the
conversation and the call's seed (the same request and seed, the same answer). A
request it cannot place (another env's, a game too large or without information
states) is answered as ``builtin/bracket`` would. Registered when
``taketurns.envs.openspiel`` is imported (``taketurns.env.register_builtin_policy``).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

from taketurns import AssistantMessage, ConfigError, SystemMessage, UserMessage
from taketurns.env import ModelRequest, register_builtin_policy
from taketurns.envs import openspiel_games as games
from taketurns.harness import text_of

__all__ = ["ITERATIONS", "cfr", "register", "solved"]

ITERATIONS = 200
_GAME = re.compile(r"\(OpenSpiel's (.+?)\), \d+ players")
_INFO = re.compile(
    r"Your information state:\n(.*?)\n(?:Your observation:|Your legal actions:)", re.S
)
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,40})\]")


@functools.cache
def solved(game_string: str) -> dict[str, dict[str, float]]:
    """CFR+'s average policy of the game, by information state as a seat reads it
    (``games.shown``), each action by its bracketed name."""
    from open_spiel.python.algorithms import cfr as solvers

    game = games.load(game_string)
    solver = solvers.CFRPlusSolver(game)
    for _ in range(ITERATIONS):
        solver.evaluate_and_update_policy()
    average = solver.average_policy()
    policy = {}
    for key, player, history in games.information_states(game, limit=5_000):
        state = game.new_initial_state()
        for action in history:
            state.apply_action(action)
        probs = average.policy_for_key(key)
        names = games.action_names(state, player, state.legal_actions(player))
        policy[games.shown(key)] = {n: float(probs[a]) for n, a in names.items()}
    return policy


def _placed(request: ModelRequest) -> dict[str, float] | None:
    """The solver's action probabilities for the seat asked, or None."""
    system = next((m for m in request.messages if isinstance(m, SystemMessage)), None)
    user = next((m for m in reversed(request.messages) if isinstance(m, UserMessage)), None)
    if system is None or user is None:
        return None
    game = _GAME.search(text_of(system.content))
    info = _INFO.search(text_of(user.content))
    if game is None or info is None:
        return None
    try:
        return solved(game.group(1)).get(info.group(1))
    except ConfigError:
        return None


def cfr(request: ModelRequest, seed: int) -> AssistantMessage:
    """The policy ``builtin/cfr`` serves (module docstring)."""
    digest = hashlib.blake2b(str(seed).encode(), digest_size=8)
    for m in request.messages:
        digest.update(m.role.encode() + text_of(m.content).encode())
    rng = random.Random(int.from_bytes(digest.digest(), "big"))
    row = _placed(request)
    if not row or sum(row.values()) <= 0:
        user = next((m for m in reversed(request.messages) if isinstance(m, UserMessage)), None)
        options = _BRACKETED.findall(text_of(user.content)) if user is not None else []
        if not options:
            return AssistantMessage("I have nothing to choose here.")
        return AssistantMessage(f"[{rng.choice(options)}]")
    names = sorted(row)
    chosen = rng.choices(names, weights=[max(row[n], 0.0) for n in names])[0]
    return AssistantMessage(f"[{chosen}]")


def register() -> None:
    register_builtin_policy("cfr", cfr)
