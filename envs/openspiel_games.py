"""OpenSpiel's side of the ``openspiel`` env, pure (no engine, no I/O): loading a game
from its name or game string, what a seat sees, its legal actions as bracketed names,
chance draws, forfeits, the information states of a small game and the exploitability
of a tabular policy over them (OpenSpiel's own ``exploitability`` module).

``pyspiel`` comes with the ``openspiel`` extra (``pip install 'taketurns[openspiel]'``)
and is imported on first use: without it a config naming an OpenSpiel game is refused
with that line.

What a seat reads is OpenSpiel's text with one change: square brackets become
parentheses (Leduc's ``[Private: 2]`` reads ``(Private: 2)``), so that the only
bracketed words a seat is shown are its legal actions. An action's name is OpenSpiel's
``action_to_string`` made into one bracketable word the same way (goofspiel's
``[P0]Bid: 3`` is ``P0 Bid: 3``), clipped to ``MAX_NAME`` characters; names that
would collide get `` #<action id>``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from random import Random
from typing import Any

from taketurns import OptionError
from taketurns.errors import ConfigError

__all__ = [
    "MAX_NAME",
    "MAX_STATES",
    "action_names",
    "chance_draw",
    "forfeit_payoffs",
    "information_states",
    "installed",
    "is_simultaneous",
    "is_zero_sum",
    "load",
    "nash_conv",
    "parse_action",
    "pyspiel",
    "seeded",
    "shown",
    "view_of",
]

MAX_NAME = 36  # the built-in model reads options of up to 40 characters
MAX_STATES = 20_000  # information states an exploitability run may ask about
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_SPACES = re.compile(r"\s+")
VIEWS = ("both", "information_state", "observation")


def installed() -> bool:
    """Whether ``pyspiel`` imports (a config is checked against OpenSpiel only then;
    without it the env itself refuses to be built, naming the extra)."""
    try:
        pyspiel()
    except ConfigError:
        return False
    return True


def pyspiel() -> Any:
    """The ``pyspiel`` module, or ``ConfigError`` naming the extra to install."""
    try:
        import pyspiel as module
    except ImportError as exc:
        raise ConfigError(
            "game: OpenSpiel is not installed; pip install 'taketurns[openspiel]' "
            "(open_spiel==2.0.2)"
        ) from exc
    return module


def _registered(spiel: Any) -> dict[str, Any]:
    return {t.short_name: t for t in spiel.registered_games()}


def load(game: str, *, field: str = "game") -> Any:
    """The OpenSpiel game ``game`` names (``kuhn_poker``, ``goofspiel(num_cards=4)``).
    Refuses, with one line naming ``field``: a name OpenSpiel does not register (the
    near misses named), a parameter the game does not take, a game OpenSpiel cannot
    load, a one-player game."""
    spiel = pyspiel()
    name = game.split("(", 1)[0].strip()
    types = _registered(spiel)
    if name not in types:
        from taketurns.env import one_of

        one_of(sorted(types), what="an OpenSpiel game", listing="pyspiel.registered_names()")(
            None, _Field(field), name
        )
    example = "a game string such as goofspiel(num_cards=4)"
    if game.count("(") != game.count(")") or ("(" in game and not game.rstrip().endswith(")")):
        raise OptionError(field, game, f"{example} (its parentheses do not match)")
    try:
        params = spiel.game_parameters_from_string(game)
    except spiel.SpielError as exc:
        raise OptionError(field, game, f"{example} ({_one_line(exc)})") from None
    known = types[name].parameter_specification
    unknown = sorted(set(params) - {"name"} - set(known))
    if unknown:
        raise OptionError(
            field, game, f"parameters of {name}: {', '.join(sorted(known)) or 'none'}"
        )
    players, kind = params.get("players"), types[name]
    if isinstance(players, int) and not kind.min_num_players <= players <= kind.max_num_players:
        raise OptionError(
            field,
            game,
            f"players from {kind.min_num_players} to {kind.max_num_players} for {name}",
        )
    try:
        loaded = spiel.load_game(game)
    except spiel.SpielError as exc:
        raise OptionError(field, game, f"a game OpenSpiel loads ({_one_line(exc)})") from None
    if loaded.num_players() < 2:
        raise OptionError(field, game, "a game of two or more players (this one has one seat)")
    if _samples_itself(loaded) and "rng_seed" not in known:
        raise OptionError(
            field, game, "a game whose chance the run's seed can draw (this one samples its "
            "own, with no rng_seed parameter)",
        )  # fmt: skip
    return loaded


def _samples_itself(game: Any) -> bool:
    mode = game.get_type().chance_mode
    return bool(mode == pyspiel().GameType.ChanceMode.SAMPLED_STOCHASTIC)


def seeded(game: Any, seed: int) -> Any:
    """``game`` itself, or, for a game that samples its own chance outcomes
    (``negotiation``), the same game loaded with ``rng_seed`` = ``seed`` (31 bits), so
    that the episode's seed draws them."""
    if not _samples_itself(game):
        return game
    params = {k: v for k, v in game.get_parameters().items() if k != "rng_seed"}
    return pyspiel().load_game(
        game.get_type().short_name, {**params, "rng_seed": seed & 0x7FFFFFFF}
    )


def _one_line(error: BaseException) -> str:
    """OpenSpiel's message without its source location, on one line."""
    text = _SPACES.sub(" ", str(error)).strip()
    return re.sub(r"^\S+\.cc:\d+ ", "", text)


class _Field:
    """What ``one_of`` reads of an attrs attribute: its name."""

    def __init__(self, name: str) -> None:
        self.name = name


def is_simultaneous(game: Any) -> bool:
    return bool(game.get_type().dynamics == pyspiel().GameType.Dynamics.SIMULTANEOUS)


def is_zero_sum(game: Any) -> bool:
    return bool(game.get_type().utility == pyspiel().GameType.Utility.ZERO_SUM)


def shown(text: str) -> str:
    """OpenSpiel's text as a seat reads it: brackets as parentheses (module docstring)."""
    return text.replace("[", "(").replace("]", ")")


def _name(text: str) -> str:
    word = _SPACES.sub(" ", _BRACKET.sub(r"\1 ", text).replace("[", "").replace("]", "")).strip()
    return word[:MAX_NAME].strip() or "?"


def action_names(state: Any, player: int, actions: Sequence[int]) -> dict[str, int]:
    """``player``'s legal ``actions`` at ``state`` by their bracketable names, in order."""
    names = [_name(state.action_to_string(player, a)) for a in actions]
    seen: dict[str, int] = {}
    for n in names:
        seen[n.casefold()] = seen.get(n.casefold(), 0) + 1
    return {
        (n if seen[n.casefold()] == 1 else f"{n[: MAX_NAME - 6]} #{a}"): a
        for n, a in zip(names, actions, strict=True)
    }


def parse_action(text: str, legal: Mapping[str, int]) -> int:
    """The one legal action ``text`` names in brackets (case and spacing ignored).
    Raises ``ValueError`` saying why when it names none, or more than one (the same
    one twice included)."""
    by_word = {_SPACES.sub(" ", n).casefold(): a for n, a in legal.items()}
    found = [
        by_word[w]
        for w in (_SPACES.sub(" ", b).strip().casefold() for b in _BRACKET.findall(text))
        if w in by_word
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError("your answer has no bracketed legal action")
    raise ValueError(f"your answer names {len(found)} actions; name exactly one")


def view_of(state: Any, player: int, view: str) -> str:
    """What ``player`` knows at ``state``: its information state and/or observation
    (``view``: ``both``, ``information_state``, ``observation``; each as far as the
    game provides it), never another player's."""
    kind = state.get_game().get_type()
    parts = []
    info = kind.provides_information_state_string and view in ("both", "information_state")
    if info or not kind.provides_observation_string:
        parts.append(f"Your information state:\n{shown(state.information_state_string(player))}")
    if kind.provides_observation_string and (view != "information_state" or not info):
        observed = state.observation_string(player)
        if not parts or observed != state.information_state_string(player):
            parts.append(f"Your observation:\n{shown(observed)}")
    return "\n".join(parts)


def chance_draw(state: Any, rng: Random) -> int:
    """A chance outcome of ``state`` drawn from ``rng`` by OpenSpiel's probabilities
    (a game that samples its own outcomes offers one: ``seeded`` seeds it)."""
    outcomes = state.chance_outcomes()
    u, total = rng.random(), 0.0
    for action, probability in outcomes:
        total += probability
        if u < total:
            return int(action)
    return int(outcomes[-1][0])


def forfeit_payoffs(game: Any, forfeiters: Sequence[int]) -> list[float]:
    """The payoffs when ``forfeiters`` forfeit: each is paid the game's lowest utility;
    the others share what keeps a zero-sum game at zero (a general-sum game pays
    them its highest utility, as the prisoner's dilemma pays a forfeit's opponent)."""
    n = game.num_players()
    low, high = float(game.min_utility()), float(game.max_utility())
    others = [p for p in range(n) if p not in forfeiters]
    pay = [low if p in forfeiters else 0.0 for p in range(n)]
    if not others:
        return pay
    share = -low * len(forfeiters) / len(others) if is_zero_sum(game) else high
    for p in others:
        pay[p] = share
    return pay


def information_states(game: Any, limit: int = MAX_STATES) -> Iterator[tuple[str, int, list[int]]]:
    """Each decision point of a sequential game once: (its information state string,
    the player to act, one history reaching it), over every chance outcome, in a
    stable order. Raises ``ConfigError`` for a simultaneous-move game, one without
    information state strings, or past ``limit`` states."""
    kind = game.get_type()
    if is_simultaneous(game) or not kind.provides_information_state_string:
        raise ConfigError(
            f"game: {game} is not a sequential game with information states; the "
            "exploitability of a policy is measured on those (kuhn_poker, leduc_poker)"
        )
    seen: set[str] = set()
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        if state.is_terminal():
            continue
        if not state.is_chance_node():
            player = state.current_player()
            key = state.information_state_string(player)
            if key not in seen:
                seen.add(key)
                if len(seen) > limit:
                    raise ConfigError(
                        f"game: {game} has more than {limit} information states; "
                        "exploitability is computed for small games only"
                    )
                yield key, player, list(state.history())
        children = (
            [a for a, _ in state.chance_outcomes()]
            if state.is_chance_node()
            else state.legal_actions()
        )
        stack.extend(state.child(a) for a in reversed(children))


@functools.cache
def _decisions(game_string: str) -> tuple[tuple[str, dict[str, int]], ...]:
    """Each information state of the game with its legal actions by name (made once
    per game: a bootstrap measures hundreds of policies of the same game)."""
    game = pyspiel().load_game(game_string)
    found = []
    for key, player, history in information_states(game):
        state = game.new_initial_state()
        for action in history:
            state.apply_action(action)
        found.append((key, action_names(state, player, state.legal_actions(player))))
    return tuple(found)


def nash_conv(game: Any, policy: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """NashConv and, for a zero- or constant-sum game, exploitability (OpenSpiel's
    ``exploitability`` module) of the tabular ``policy``: by information state, the
    probability of each action named as ``action_names`` names it; a state it leaves
    out, or whose probabilities sum to zero, plays uniformly."""
    from open_spiel.python.algorithms import exploitability

    table = _uniform(str(game)).__copy__()  # the template's array copied, not shared
    for key, names in _decisions(str(game)):
        row = policy.get(key)
        weights = {a: float(row.get(n, 0.0)) for n, a in names.items()} if row else {}
        total = sum(weights.values())
        if total <= 0:
            continue
        probs = table.policy_for_key(key)
        probs[:] = 0.0
        for action, weight in weights.items():
            probs[action] = weight / total
    conv = float(exploitability.nash_conv(game, table))
    measured = {"nash_conv": conv}
    utility = pyspiel().GameType.Utility
    if game.get_type().utility in (utility.ZERO_SUM, utility.CONSTANT_SUM):
        # OpenSpiel's exploitability of a constant-sum game: NashConv / players
        measured["exploitability"] = conv / game.num_players()
    return measured


@functools.cache
def _uniform(game_string: str) -> Any:
    """OpenSpiel's uniform ``TabularPolicy`` of the game (a template: copy it)."""
    from open_spiel.python import policy as policies

    return policies.TabularPolicy(pyspiel().load_game(game_string))
