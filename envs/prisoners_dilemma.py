"""``prisoners-dilemma``: two seats play N rounds of the iterated prisoner's dilemma.

The simultaneous-move reference. Each round both seats are asked at once (two
``turn()`` calls in one nursery) and neither learns the other's move before both
have committed: a round's moves are revealed together, in the next round's message.
A reply counts when it names exactly one of ``[cooperate]`` / ``[defect]``; a seat
that keeps answering badly (more than ``invalid_retries`` re-prompts) or whose run
stops instead of answering (a limit, a timeout) forfeits: the game ends there, the
forfeiter is paid ``FORFEIT`` for the round and its opponent ``TEMPTATION`` (both
forfeiting: both ``FORFEIT``). A seat whose model endpoint or harness failed does not
forfeit: the game ends without a result for the round and the episode is recorded
failed.

Each round pays both seats through per-turn rewards (``Trace.record_turn_reward``,
named ``round``, on the turn that made the move), classic payoffs T > R > P > S:
5 / 3 / 1 / 0. The ``payoff`` reward is their sum (a move made without a model call,
by a harness that answers by itself, is paid nothing).
"""

from __future__ import annotations

import re

import attrs
import trio

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    Task,
    Trace,
    metric,
    reward,
)
from taketurns.env import int_between
from taketurns.envs import reprompts

__all__ = ["MOVES", "PAYOFFS", "PrisonersDilemma", "PrisonersDilemmaConfig", "round_text"]

MOVES = ("cooperate", "defect")
TEMPTATION, REWARD, PUNISHMENT, SUCKER, FORFEIT = 5.0, 3.0, 1.0, 0.0, -1.0
# (my move, their move) -> my payoff
PAYOFFS = {
    ("cooperate", "cooperate"): REWARD,
    ("cooperate", "defect"): SUCKER,
    ("defect", "cooperate"): TEMPTATION,
    ("defect", "defect"): PUNISHMENT,
}
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,40})\]")


@attrs.define
class PrisonersDilemmaConfig(EnvConfig):
    """``rounds``: rounds per game. ``invalid_retries``: how many times a seat is
    re-prompted after a reply that does not count before it forfeits."""

    player0: AgentConfig = attrs.field(factory=AgentConfig)
    player1: AgentConfig = attrs.field(factory=AgentConfig)
    rounds: int = attrs.field(default=5, validator=int_between(1, 1000))
    invalid_retries: int = attrs.field(default=1, validator=int_between(0))


def rules_prompt(seat: int, rounds: int, retries: int, game: int) -> str:
    """The system prompt of ``seat``: the rules and the payoffs, the same for both."""
    return (
        f"You are player{seat} in game #{game} of the iterated prisoner's dilemma: "
        f"{rounds} rounds against one opponent. Each round both players choose at the "
        "same time, without seeing the other's choice, to cooperate or defect; both "
        "choices are revealed at the start of the next round. Points per round: both "
        f"cooperate {REWARD:g} each; both defect {PUNISHMENT:g} each; a defector "
        f"against a cooperator gets {TEMPTATION:g} and the cooperator {SUCKER:g}. "
        "Answer with exactly one of [cooperate] or [defect]. An answer that does not "
        f"name exactly one move is refused: you get {reprompts.retries_text(retries)} "
        f"per round, then a refused answer forfeits the game ({FORFEIT:g} point for the "
        "round)."
    )


def round_text(number: int, rounds: int, last: tuple[str, str] | None, points: float) -> str:
    """What a seat is asked in round ``number`` (from 1): the previous round's two
    moves (``last``: its own, then the opponent's) and its points so far."""
    reveal = ""
    if last is not None:
        mine, theirs = last
        reveal = (
            f"Round {number - 1} result: you played {mine}, your opponent played "
            f"{theirs}; you scored {PAYOFFS[last]:g}. Your points so far: {points:g}. "
        )
    return f"{reveal}Round {number} of {rounds}. Choose: [cooperate] [defect]."


def parse_move(text: str) -> str:
    """The one move ``text`` names in brackets (case-insensitive). Raises
    ``ValueError`` saying why when it names none or more than one."""
    moves = [m for m in (b.strip().lower() for b in _BRACKETED.findall(text)) if m in MOVES]
    if len(moves) != 1:
        what = "no bracketed move" if not moves else f"{len(moves)} bracketed moves"
        raise ValueError(f"your answer has {what}; answer [cooperate] or [defect]")
    return moves[0]


class PrisonersDilemma(Env):
    id = "prisoners-dilemma"
    config_class = PrisonersDilemmaConfig
    config: PrisonersDilemmaConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(idx=i, name=f"pd-{i}", prompt=None) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        cfg = self.config
        seat0, seat1 = (
            attrs.evolve(
                task,
                system_prompt=rules_prompt(seat, cfg.rounds, cfg.invalid_retries, task.idx),
            )
            for seat in (0, 1)
        )
        async with agents.player0.chat(seat0) as s0, agents.player1.chat(seat1) as s1:
            seats = (s0, s1)
            for seat, session in enumerate(seats):
                session.trace.info.update(seat=seat, moves=[], forfeited=False)
            last: tuple[str, str] | None = None
            for number in range(1, cfg.rounds + 1):
                answers = await self._round(seats, number, last)
                if any(a.failed for a in answers):
                    return  # no result: the episode failed (taketurns.is_failure)
                if any(a.forfeited for a in answers):
                    _pay_forfeit(seats, answers)
                    return
                moves = (str(answers[0].value), str(answers[1].value))
                for seat, session in enumerate(seats):
                    mine = (moves[seat], moves[1 - seat])
                    session.trace.info["moves"].append(mine[0])
                    _pay(session.trace, answers[seat].turn, PAYOFFS[mine])
                last = moves

    async def _round(
        self, seats: tuple[ChatSession, ChatSession], number: int, last: tuple[str, str] | None
    ) -> list[reprompts.Answer[str]]:
        """Both seats asked at once; the round ends when both have answered."""
        unanswered: reprompts.Answer[str] = reprompts.Answer(None, failed=True)
        answers = [unanswered, unanswered]

        async def ask(seat: int) -> None:
            trace = seats[seat].trace
            mine = None if last is None else (last[seat], last[1 - seat])
            points = trace.turn_reward_total("round")
            text = round_text(number, self.config.rounds, mine, points)
            answers[seat] = await reprompts.ask(
                seats[seat], text, parse_move, retries=self.config.invalid_retries
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, 0)
            nursery.start_soon(ask, 1)
        return answers

    @reward(weight=1.0)
    def payoff(self, task: Task, trace: Trace) -> float:
        """The seat's points over the rounds played (the sum of its per-round rewards)."""
        return trace.turn_reward_total("round")

    @metric
    def cooperation(self, task: Task, trace: Trace) -> float:
        """The share of the seat's moves that were ``cooperate`` (0.0 with none)."""
        moves = trace.info.get("moves") or []
        return moves.count("cooperate") / len(moves) if moves else 0.0

    @metric
    def forfeit(self, task: Task, trace: Trace) -> float:
        """1.0 when the seat forfeited the game."""
        return 1.0 if trace.info.get("forfeited") else 0.0


def _pay(trace: Trace, turn: int | None, value: float) -> None:
    if turn is not None:
        trace.record_turn_reward(turn, value, name="round")


def _pay_forfeit(
    seats: tuple[ChatSession, ChatSession], answers: list[reprompts.Answer[str]]
) -> None:
    for seat, session in enumerate(seats):
        forfeited = answers[seat].forfeited
        session.trace.info["forfeited"] = forfeited
        _pay(session.trace, answers[seat].turn, FORFEIT if forfeited else TEMPTATION)
