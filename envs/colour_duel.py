"""``colour-duel``: two seats are asked at once to name a colour, and paid for one word.

The game: both seats, ``player0`` and ``player1`` (null harness), are asked the same
question at the same time (two ``turn()`` calls in one nursery, one batch for a
batching client): "Name one colour. Reply with the colour only, one word." Neither sees
the other's reply. A seat is paid (reward ``score``, ``colour_duel_rules.score_of``)
1.0 for a reply that is one colour word alone and not the opponent's colour, 0.75 for
the opponent's colour, 0.25 for a colour among other words, 0 for no colour (a seat
whose run ended instead of answering, a limit or a timeout, names none; a reply cut at
``max_tokens`` is read as it is, mostly a ramble with no colour word). Trace info:
``reply`` (the text), ``colour`` (None: none), ``score``.

Why it exists: a coordination game small enough for a 135M model to learn within
minutes on 2 CPU cores (``examples/grpo_selfplay.py``, GRPO self-play on SmolLM2-135M).
Its prompt is ~45 tokens a seat where the other games' rules prompts are 170-230, so a
training step costs seconds; an untrained small model mostly rambles, so the reward
rises as it learns to name a colour, to answer in one word and to stop; and since both
seats may be one policy, the 0.75 for a shared colour pays it to keep its colours
varied. The other self-play games give such a model no signal to follow: SmolLM2-135M
named a bracketed move in none of 16 first replies of ``prisoners-dilemma``, and Kuhn
poker's zero-sum payoffs cancel in self-play.
"""

from __future__ import annotations

import attrs
import trio

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task, Trace, reward
from taketurns.envs.colour_duel_rules import QUESTION, Reading, colour_of, score_of

__all__ = ["ColourDuel", "ColourDuelConfig"]


@attrs.define
class ColourDuelConfig(EnvConfig):
    """The two seats; the game has no other option."""

    player0: AgentConfig = attrs.field(factory=AgentConfig)
    player1: AgentConfig = attrs.field(factory=AgentConfig)


class ColourDuel(Env):
    """Two seats asked at once to name a colour in one word; each is paid 1.0 for a
    colour alone that is not the opponent's, 0.75 for the opponent's, 0.25 for a colour
    among other words, 0 for none (``colour_duel_rules.score_of``)."""

    id = "colour-duel"
    config_class = ColourDuelConfig
    config: ColourDuelConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(idx=i, name=f"duel-{i}", prompt=None) for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        seat0, seat1 = (
            attrs.evolve(task, system_prompt=f"You are player{seat} in a word game.")
            for seat in (0, 1)
        )
        async with agents.player0.chat(seat0) as s0, agents.player1.chat(seat1) as s1:
            seats = (s0, s1)
            said: list[Reading] = [(None, False), (None, False)]

            async def ask(seat: int) -> None:
                reply = await seats[seat].turn(QUESTION)
                if not reply.stopped:
                    said[seat] = colour_of(reply.text)
                seats[seat].trace.info["reply"] = reply.text

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask, 0)
                nursery.start_soon(ask, 1)
            for seat, session in enumerate(seats):
                score = score_of(said[seat], said[1 - seat])
                session.trace.info.update(colour=said[seat][0], score=score)

    @reward(weight=1.0)
    def score(self, task: Task, trace: Trace) -> float:
        """``score_of`` the seat's reply against its opponent's."""
        return float(trace.info.get("score", 0.0))
