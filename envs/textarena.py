"""``textarena`` and ``wordle``: single-player TextArena word games, refereed by the
real TextArena engine (the ``textarena`` extra).

Task i is the game dealt with seed i; its prompt is the engine's first observation for
that seed (the board), so the player speaks first. The engine steps each reply and
answers with its feedback (the observation text that is new since the last move) as
the next user message, until the game is over or the player's run stops. The
``game_reward`` reward is the engine's final reward for the player, 0.0 when the game
did not finish; the trace's info holds ``game``, ``seed``, ``moves``, ``finished``,
``reason`` (the engine's outcome reason), ``invalid_move`` and ``game_reward``.

``wordle`` is ``textarena`` pinned to Wordle-v0. How the engine is driven (threads, one
lock, the global RNG, nltk) is in ``taketurns.envs.textarena_games``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task, Trace, metric, reward
from taketurns.env import one_of
from taketurns.envs import textarena_games as games

__all__ = ["GAMES", "TextArena", "TextArenaConfig", "Wordle", "WordleConfig"]

GAMES = games.GAMES

# sent when a move produced no new observation text but the game goes on
NO_FEEDBACK = "The game goes on: make your next move."


_a_game = one_of(GAMES, what="a TextArena game")


@attrs.define
class TextArenaConfig(EnvConfig):
    """``player`` plays the game; ``game`` is one of ``GAMES``. The number of tasks is
    the eval's ``-n`` (task i is seed i)."""

    player: AgentConfig = attrs.field(factory=AgentConfig)
    game: str = attrs.field(default="Wordle-v0", validator=_a_game)


@attrs.define
class WordleConfig(EnvConfig):
    """``player`` plays Wordle-v0."""

    player: AgentConfig = attrs.field(factory=AgentConfig)


class GameScores:
    """The rubric of a game the TextArena engine referees, per seat or player: read
    from what the env put on the trace (``finished``, ``game_reward``, ``moves``)."""

    @reward
    def game_reward(self, task: Task, trace: Trace) -> float:
        """The engine's final reward; 0.0 if the game did not finish."""
        if not trace.info.get("finished"):
            return 0.0
        return float(trace.info.get("game_reward", 0.0))

    @metric
    def finished(self, task: Task, trace: Trace) -> float:
        """1.0 when the game reached the engine's verdict (a forfeit included)."""
        return 1.0 if trace.info.get("finished") else 0.0

    @metric
    def moves(self, task: Task, trace: Trace) -> float:
        """How many replies the engine stepped."""
        return float(trace.info.get("moves", 0))


class TextArena(GameScores, Env):
    id = "textarena"
    config_class: ClassVar[type] = TextArenaConfig
    config: Any  # TextArenaConfig, or WordleConfig for the pinned ``wordle``

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        games.load()  # without the extra: ConfigError, before any episode
        self._dealt: dict[tuple[str, int], str] = {}  # fingerprints of the boards in tasks

    @property
    def game(self) -> str:
        """The TextArena game id this env plays."""
        return str(self.config.game)

    def tasks(self, num_tasks: int) -> list[Task]:
        tasks = []
        for seed in range(num_tasks):
            dealt = games.deal(self.game, seed)
            self._dealt[self.game, seed] = dealt.fingerprint
            name = f"{self.game}-{seed}"
            info = {"game": self.game, "seed": seed}
            tasks.append(Task(idx=seed, name=name, prompt=dealt.board, info=info))
        return tasks

    async def run(self, task: Task, agents: Agents) -> None:
        seed = int(task.info.get("seed", task.idx))
        async with agents.player.chat(task) as session:
            info = session.trace.info
            info.update(game=self.game, seed=seed, moves=0, finished=False)
            info.update(reason=None, invalid_move=False, game_reward=0.0)
            game = await games.Game.open(self.game, seed, agents.rng)
            self._check_board(task, seed, game.deal)
            reply = await session.turn()
            while not reply.stopped:
                step = await game.step(reply.text)
                info["moves"] += 1
                if step.outcome is not None:
                    outcome = step.outcome
                    info.update(
                        finished=True,
                        reason=outcome.reason,
                        invalid_move=outcome.invalid_move,
                        game_reward=outcome.reward,
                    )
                    return
                reply = await session.turn(step.feedback or NO_FEEDBACK)

    def _check_board(self, task: Task, seed: int, dealt: games.Deal) -> None:
        """The engine must play the board the prompt shows; a different deal means
        something else drew from Python's global RNG while TextArena dealt."""
        known = self._dealt.get((self.game, seed))
        if dealt.board != task.prompt or (known is not None and known != dealt.fingerprint):
            raise RuntimeError(
                f"{self.game} dealt a different board for seed {seed} than the task's "
                "prompt: another thread drew from Python's global random while TextArena "
                "dealt, or the task comes from another TextArena version; rerun the task"
            )


class Wordle(TextArena):
    id = "wordle"
    config_class = WordleConfig

    @property
    def game(self) -> str:
        return "Wordle-v0"
