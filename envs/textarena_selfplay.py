"""``textarena-selfplay``: TextArena's two-player games as self-play (``textarena`` extra).

Refereed by the real TextArena engine.

Two seats, ``player0`` and ``player1`` (TextArena's Player 0 and Player 1), are live
chat sessions of the run's model unless overridden per seat. Task *i* is the game dealt
with seed ``seed + i`` on a fresh engine. The engine says whose move it is; that seat
is told only its own observation (everything new for it since it last moved: the
rules on its first turn, the other seat's moves as ``[Player N] move``, the board) and
its reply is stepped as its move. Invalid moves are the engine's business: it re-asks
or ends the game as the game's rules say. The engine's final rewards are the seats'
``game_reward`` (zero-sum where the game is).

A seat whose run stops instead of moving (a limit, a timeout, a ``@stop``) forfeits:
the engine ends the game as a win for the other seat. A seat whose run *fails* (the
model endpoint or the harness failing) fails the episode instead (``SeatFailed``):
an infrastructure failure is never scored as a forfeit. Each trace's info holds
``game``, ``seed``, ``seat``, ``moves``, ``finished``, ``reason``, ``invalid_move``,
``forfeited`` and ``game_reward``. How the engine is driven (threads, one lock, the
RNG, nltk) is in ``taketurns.envs.textarena_games``.
"""

from __future__ import annotations

import attrs

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    TaketurnsError,
    Task,
    Trace,
    metric,
)
from taketurns.env import int_between, one_of
from taketurns.envs import textarena_games as games
from taketurns.envs.textarena import GameScores

__all__ = ["GAMES", "SeatFailed", "TextArenaSelfPlay", "TextArenaSelfPlayConfig"]

GAMES = games.SELFPLAY_GAMES
# stop conditions that mean the infrastructure failed, not the model's play
FAILURES = ("model_error", "harness_error")


class SeatFailed(TaketurnsError):
    """A seat's run failed (its model endpoint or harness): the episode fails."""

    def __init__(self, seat: str, condition: str | None) -> None:
        self.seat, self.condition = seat, condition
        super().__init__(
            f"{seat}'s run failed ({condition}) before it moved; the episode fails "
            "instead of scoring a forfeit (see the trace's errors)"
        )


_a_game = one_of(GAMES, what="a two-player game")


@attrs.define
class TextArenaSelfPlayConfig(EnvConfig):
    """``player0``, ``player1``: the seats; ``game``: one of ``GAMES``; ``seed``:
    task i plays seed ``seed + i``."""

    player0: AgentConfig = attrs.field(factory=AgentConfig)
    player1: AgentConfig = attrs.field(factory=AgentConfig)
    game: str = attrs.field(
        default="TicTacToe-v0", validator=_a_game, metadata={"choices": ", ".join(GAMES)}
    )
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0, 2**31)),
        metadata={"unset": "the run's --seed"},
    )


class TextArenaSelfPlay(GameScores, Env):
    id = "textarena-selfplay"
    config_class = TextArenaSelfPlayConfig
    config: TextArenaSelfPlayConfig

    def __init__(self, config: TextArenaSelfPlayConfig | None = None) -> None:
        super().__init__(config)
        games.load()  # without the extra: ConfigError, before any episode

    def tasks(self, num_tasks: int) -> list[Task]:
        game = self.config.game
        base = self.seed_of(self.config.seed)
        return [
            Task(
                idx=i,
                name=f"{game}-{base + i}",
                info={"game": game, "seed": base + i},
            )
            for i in range(num_tasks)
        ]

    async def run(self, task: Task, agents: Agents) -> None:
        seed = int(task.info.get("seed", self.seed_of(self.config.seed) + task.idx))
        async with agents.player0.chat(task) as s0, agents.player1.chat(task) as s1:
            seats = (s0, s1)
            for seat, session in enumerate(seats):
                session.trace.info.update(
                    game=self.config.game, seed=seed, seat=seat, moves=0, finished=False
                )
                session.trace.info.update(
                    reason=None, invalid_move=False, forfeited=False, game_reward=0.0
                )
            match, position = await games.Match.open(self.config.game, seed, agents.rng)
            verdict = await self._play(match, position, seats)
            for seat, session in enumerate(seats):
                session.trace.info.update(
                    finished=True,
                    reason=verdict.reason,
                    invalid_move=verdict.invalid_move[seat],
                    game_reward=verdict.rewards[seat],
                )

    async def _play(
        self, match: games.Match, position: games.Position, seats: tuple[ChatSession, ...]
    ) -> games.Verdict:
        """Step the seat to move until the engine's verdict (or a forfeit)."""
        while position.verdict is None:
            session = seats[position.seat]
            reply = await session.turn(position.observation)
            if reply.stopped:
                name = f"player{position.seat}"
                if reply.stop_condition in FAILURES:
                    raise SeatFailed(name, reply.stop_condition)
                session.trace.info["forfeited"] = True
                why = f"Player {position.seat} stopped instead of moving ({reply.stop_condition})."
                return await match.forfeit(position.seat, why)
            session.trace.info["moves"] += 1
            position = await match.move(reply.text)
        return position.verdict

    @metric
    def forfeit(self, task: Task, trace: Trace) -> float:
        """1.0 when the seat's run stopped instead of moving."""
        return 1.0 if trace.info.get("forfeited") else 0.0
