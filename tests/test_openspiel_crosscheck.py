"""Our own referees checked against OpenSpiel's: ``kuhn-poker`` against OpenSpiel's
``kuhn_poker`` and ``prisoners-dilemma`` against an OpenSpiel matrix game with the
same payoffs, repeated as many rounds. Each example drives our env (its seats
scripted to play the drawn actions) and OpenSpiel's state through the same deal and
the same actions, and asserts the same legal actions at every step, the same end and
the same payoffs.

Where the rules deliberately differ: OpenSpiel's own ``matrix_pd`` pays 5/10/0/1
(both cooperate 5, temptation 10, sucker 0, both defect 1); ``prisoners-dilemma``
pays the classic 3/5/0/1, so it is compared with that matrix built in OpenSpiel. A
forfeit is ours alone (OpenSpiel has no invalid moves): Kuhn's costs the forfeiter
1 chip, the ``openspiel`` env's the game's lowest utility.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from required import needed

pyspiel = needed("pyspiel", "pip install -e '.[test]' (open_spiel; bash .ci/run)")

from taketurns import Agent, Agents, AssistantMessage, Trace  # noqa: E402
from taketurns.env import ModelClient, ModelRequest, ModelResponse  # noqa: E402
from taketurns.envs import kuhn_rules as rules  # noqa: E402
from taketurns.envs.kuhn import SPIEL_ACTIONS, KuhnPoker, spiel_key  # noqa: E402
from taketurns.envs.prisoners_dilemma import (  # noqa: E402
    MOVES,
    PAYOFFS,
    PrisonersDilemma,
    PrisonersDilemmaConfig,
)

DEALS = list(itertools.permutations(range(3), 2))


class Plays(ModelClient):
    """Answers each call with the next of ``moves``, bracketed."""

    def __init__(self, moves: Sequence[str]) -> None:
        self.moves = list(moves)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        return ModelResponse(AssistantMessage(f"[{self.moves.pop(0)}]"))


def played(env: object, task: object, moves: dict[str, list[str]]) -> dict[str, Trace]:
    """``task`` run through ``env.run`` with each seat playing its ``moves``."""
    closed: dict[str, list[Trace]] = {role: [] for role in moves}
    agents = Agents(
        {
            role: Agent(
                role,
                config,
                client=Plays(moves[role]),
                rubric=env.rubric(role),  # type: ignore[attr-defined]
                on_close=closed[role].append,
            )
            for role, config in env.roles.items()  # type: ignore[attr-defined]
        }
    )
    trio.run(env.run, task, agents)  # type: ignore[attr-defined]
    return {role: traces[0] for role, traces in closed.items()}


@settings(max_examples=60, deadline=None)
@given(deal=st.sampled_from(DEALS), picks=st.lists(st.integers(0, 1), min_size=3, max_size=3))
def test_kuhn_poker_agrees_with_openspiel(deal: tuple[int, int], picks: list[int]) -> None:
    cards = (rules.CARDS[deal[0]], rules.CARDS[deal[1]])
    state = pyspiel.load_game("kuhn_poker").new_initial_state()
    state.apply_action(deal[0])
    state.apply_action(deal[1])
    history: list[str] = []
    for pick in picks:
        assert rules.is_over(history) == state.is_terminal()
        if state.is_terminal():
            break
        seat = state.current_player()
        assert rules.to_act(history) == seat
        ours = rules.legal_actions(history)
        theirs = [state.action_to_string(a) for a in state.legal_actions()]
        assert [SPIEL_ACTIONS[a] for a in ours] == theirs
        assert spiel_key(cards[seat], history) == state.information_state_string(seat)
        history.append(ours[pick])
        state.apply_action(state.legal_actions()[pick])
    assert rules.is_over(history)
    assert state.is_terminal()
    assert list(rules.payoffs(cards, history)) == state.returns()
    # the env itself, its seats playing the same actions on the same deal
    env = KuhnPoker()
    task = next(t for t in env.tasks(64) if rules.deal(t.info["seed"]) == cards)
    moves = {"player0": history[0::2], "player1": history[1::2]}
    traces = played(env, task, moves)
    assert traces["player0"].info["history"] == history
    assert [traces[r].info["payoff"] for r in ("player0", "player1")] == state.returns()


def openspiel_pd(rounds: int) -> object:
    """OpenSpiel's matrix game of the classic payoffs (written out here, not read from
    our env), repeated ``rounds`` times: rows are player0's move, columns player1's,
    in the order cooperate, defect."""
    table = [[3.0, 0.0], [5.0, 1.0]]
    column = [[3.0, 5.0], [0.0, 1.0]]
    names = ["Cooperate", "Defect"]
    stage = pyspiel.create_matrix_game("pd_classic", "PD 3/5/0/1", names, names, table, column)
    return pyspiel.create_repeated_game(stage, {"num_repetitions": rounds})


@settings(max_examples=40, deadline=None)
@given(
    rounds=st.integers(1, 4),
    data=st.data(),
)
def test_prisoners_dilemma_agrees_with_openspiel(rounds: int, data: st.DataObject) -> None:
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(MOVES), st.sampled_from(MOVES)),
                               min_size=rounds, max_size=rounds))  # fmt: skip
    state = openspiel_pd(rounds).new_initial_state()  # type: ignore[attr-defined]
    per_round = []
    for a, b in pairs:
        assert not state.is_terminal()
        assert state.is_simultaneous_node()
        for player in (0, 1):
            legal = [state.action_to_string(player, x).lower() for x in state.legal_actions(player)]
            assert legal == list(MOVES)
        state.apply_actions([MOVES.index(a), MOVES.index(b)])
        per_round.append(list(state.rewards()))
    assert state.is_terminal()
    env = PrisonersDilemma(PrisonersDilemmaConfig(rounds=rounds))
    task = env.tasks(1)[0]
    traces = played(env, task, {"player0": [a for a, _ in pairs], "player1": [b for _, b in pairs]})
    for seat, role in enumerate(("player0", "player1")):
        trace = traces[role]
        assert [r.value for r in trace.turn_rewards] == [r[seat] for r in per_round]
        assert trace.turn_reward_total("round") == state.returns()[seat]
        assert trace.info["moves"] == [p[seat] for p in pairs]


def test_openspiels_own_matrix_pd_pays_otherwise() -> None:
    """The documented difference: OpenSpiel's ``matrix_pd`` is 5/10/0/1, ours 3/5/0/1."""
    state = pyspiel.load_game("matrix_pd").new_initial_state()
    state.apply_actions([0, 0])
    assert state.returns() == [5.0, 5.0] != [PAYOFFS[("cooperate", "cooperate")]] * 2
