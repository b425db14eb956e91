"""``kuhn-poker``: two seats play one hand of Kuhn poker; the env is the referee.

The self-play reference. Each seat is a live chat session told the rules and only its
own card (in its system prompt). The host asks the seat to act with the betting so
far and the legal actions as bracketed options; a reply counts when it names exactly
one legal bracketed action. A seat that keeps answering badly (more than
``invalid_retries`` re-prompts) or whose run stops instead of answering (a limit, a
timeout) forfeits. A seat whose model endpoint or harness failed does not forfeit:
the hand ends without a result and the episode is recorded failed.
The payoff is written on both traces before the sessions close, so the ``payoff``
reward scores it. Rules live in ``taketurns.envs.kuhn_rules``. The report adds the
mean payoff by the card held, per seat (``report_figures``). ``taketurns
exploitability kuhn-poker`` asks the seats at each of the game's 12 information
states (``PolicyProbe``) and measures the policy with OpenSpiel's ``kuhn_poker``
(the ``openspiel`` extra), the same game (``tests/test_openspiel_crosscheck.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import attrs

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
from taketurns.env import PolicyProbe, int_between
from taketurns.envs import kuhn_rules as rules
from taketurns.envs import reprompts
from taketurns.report import EpisodeView, Figure, Series, bar_chart, num

__all__ = [
    "SPIEL_ACTIONS",
    "KuhnConfig",
    "KuhnPoker",
    "ask_text",
    "payoff_by_card",
    "rules_prompt",
    "spiel_key",
]


@attrs.define
class KuhnConfig(EnvConfig):
    """``player0`` acts first. ``invalid_retries``: how many times a seat is re-prompted
    after a reply that does not count before it forfeits. ``seed`` varies the deals
    (unset: the run's ``--seed``)."""

    player0: AgentConfig = attrs.field(factory=AgentConfig)
    player1: AgentConfig = attrs.field(factory=AgentConfig)
    invalid_retries: int = attrs.field(default=1, validator=int_between(0))
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0)),
        metadata={"unset": "the run's --seed"},
    )


def rules_prompt(seat: int, card: str, invalid_retries: int, hand: int = 0) -> str:
    """The system prompt of ``seat``: the rules and its own card, nothing else."""
    return (
        f"You are player{seat} in hand #{hand} of Kuhn poker against one opponent. "
        "The deck has three cards, ranked J < Q < K. Each player antes 1 chip and is "
        "dealt one card; the third card is not used. player0 acts first and may check "
        "or bet 1 chip. After a check, player1 may check (showdown) or bet 1 chip. "
        "Facing a bet, a player may fold (losing what they put in) or call 1 chip "
        "(showdown). At showdown the higher card wins the pot. "
        f"Your card: {card}. "
        "When it is your turn you are shown the betting so far and your legal actions; "
        "answer with exactly one of them in square brackets, for example [call]. "
        "An answer that does not name exactly one legal action is refused: you get "
        f"{reprompts.retries_text(invalid_retries)} per turn, then a refused answer "
        "forfeits the hand (you lose 1 chip)."
    )


def _ask_text(history: Sequence[str]) -> str:
    return (
        f"Betting so far: {rules.narrate(history)}. "
        f"Your legal actions: {rules.options(rules.legal_actions(history))}. "
        "Answer with exactly one bracketed action."
    )


# a hand has only four histories at which a seat is asked: their texts, made once
_ASKED = {history: _ask_text(history) for history in rules.OPEN_HISTORIES}


def ask_text(history: Sequence[str]) -> str:
    """What the seat to act is asked."""
    text = _ASKED.get(tuple(history))
    return text if text is not None else _ask_text(history)


# our actions as OpenSpiel's kuhn_poker names them (it has two: Pass and Bet)
SPIEL_ACTIONS = {"check": "Pass", "fold": "Pass", "bet": "Bet", "call": "Bet"}


def spiel_key(card: str, history: Sequence[str]) -> str:
    """OpenSpiel's ``information_state_string`` of the seat holding ``card`` after
    ``history`` (``kuhn_poker``: the card's rank 0-2, then ``p``/``b`` per action)."""
    return str(rules.CARDS.index(card)) + "".join(SPIEL_ACTIONS[a][0].lower() for a in history)


class KuhnPoker(PolicyProbe, Env):
    id = "kuhn-poker"
    config_class = KuhnConfig
    config: KuhnConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        base = self.seed_of(self.config.seed)
        return [
            Task(
                idx=i,
                name=f"kuhn-{i}",
                prompt=None,
                info={"seed": rules.task_seed(base, i)},
            )
            for i in range(num_tasks)
        ]

    async def run(self, task: Task, agents: Agents) -> None:
        if "probe" in task.info:
            await self._probe(task, agents)
            return
        seed = task.info["seed"]
        cards = rules.deal(seed)
        retries = self.config.invalid_retries
        seat0, seat1 = (
            Task(  # the seat's view: its own card only (cheaper than attrs.evolve)
                task.idx,
                task.name,
                None,
                rules_prompt(seat, cards[seat], retries, task.idx),
                task.answer,
                task.info,
            )
            for seat in (0, 1)
        )
        async with agents.player0.chat(seat0) as s0, agents.player1.chat(seat1) as s1:
            seats = (s0, s1)
            for seat, session in enumerate(seats):
                session.trace.info.update(
                    seat=seat, card=cards[seat], history=[], seed=seed, forfeited=False
                )
            history: list[str] = []
            forfeiter = None
            while not rules.is_over(history):
                seat = rules.to_act(history)
                answer = await self._ask(seats[seat], history)
                if answer.failed:
                    return  # no game result: the episode failed (taketurns.is_failure)
                if answer.value is None:
                    forfeiter = seat
                    break
                history.append(answer.value)
                for session in seats:
                    session.trace.info["history"] = list(history)
            if forfeiter is None:
                payoff = rules.payoffs(cards, history)
            else:
                payoff = rules.forfeit_payoffs(forfeiter)
            for seat, session in enumerate(seats):
                session.trace.info.update(forfeited=seat == forfeiter, payoff=payoff[seat])

    async def _ask(self, session: ChatSession, history: Sequence[str]) -> reprompts.Answer[str]:
        """The seat's action, re-prompted while it does not count
        (``taketurns.envs.reprompts``: it may forfeit, or fail)."""
        legal = rules.legal_actions(history)
        return await reprompts.ask(
            session,
            ask_text(history),
            lambda text: rules.parse_action(text, legal),
            retries=self.config.invalid_retries,
        )

    # --- the policy at each information state (``taketurns exploitability``)

    def probe_tasks(self, samples: int) -> list[Task]:
        """``samples`` tasks for each of the 12 information states (a seat, its card,
        the betting so far), keyed as OpenSpiel's ``kuhn_poker`` keys them."""
        states = [
            (rules.to_act(history), card, history)
            for history in rules.OPEN_HISTORIES
            for card in rules.CARDS
        ]
        return [
            Task(
                idx=i * samples + j,
                name=f"kuhn-probe-{i}-{j}",
                prompt=None,
                info={
                    "probe": {
                        "state": spiel_key(card, history),
                        "seat": seat,
                        "card": card,
                        "history": list(history),
                    }
                },
            )
            for i, (seat, card, history) in enumerate(states)
            for j in range(samples)
        ]

    async def _probe(self, task: Task, agents: Agents) -> None:
        """Ask the probe's seat to act once at its state (``PolicyProbe``)."""
        probe = task.info["probe"]
        seat, card, history = probe["seat"], probe["card"], tuple(probe["history"])
        prompt = rules_prompt(seat, card, self.config.invalid_retries, task.idx)
        seat_task = Task(task.idx, task.name, None, prompt, task.answer, task.info)
        async with agents[f"player{seat}"].chat(seat_task) as session:
            session.trace.info.update(seat=seat, card=card, history=list(history))
            answer = await self._ask(session, history)
            action = None if answer.value is None else SPIEL_ACTIONS[answer.value]
            session.trace.info["probe"] = {"state": probe["state"], "action": action}

    def measure_policy(self, policy: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """NashConv and exploitability by OpenSpiel's ``kuhn_poker`` (the
        ``openspiel`` extra): the same game, its states keyed by ``spiel_key``."""
        from taketurns.envs import openspiel_games

        return openspiel_games.nash_conv(openspiel_games.load("kuhn_poker"), policy)

    @reward(weight=1.0)
    def payoff(self, task: Task, trace: Trace) -> float:
        """The seat's chips won (+) or lost (-) in the hand."""
        return float(trace.info.get("payoff", 0.0))

    @metric
    def forfeit(self, task: Task, trace: Trace) -> float:
        """1.0 when the seat forfeited the hand."""
        return 1.0 if trace.info.get("forfeited") else 0.0

    def report_figures(self, episodes: Iterable[EpisodeView]) -> list[Figure]:
        """The mean payoff by the card held, one bar per seat (ok episodes only)."""
        return [payoff_by_card(episodes)]


def payoff_by_card(episodes: Iterable[EpisodeView]) -> Figure:
    """Mean payoff by card and seat, from each trace's ``info`` (``seat``, ``card``)
    and its ``payoff`` reward; a failed episode's hands are no result and left out."""
    payoffs: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    seat_names: dict[int, str] = {}
    for episode in episodes:
        if not episode.ok:
            continue
        for trace in episode.traces:
            seat, card = trace.info.get("seat"), trace.info.get("card")
            payoff = trace.rewards.get("payoff", trace.info.get("payoff"))
            if not isinstance(payoff, int | float) or not isinstance(seat, int) or card is None:
                continue
            sums = payoffs[(seat, str(card))]
            sums[0] += payoff
            sums[1] += 1
            if seat not in seat_names:  # (the stamp is built only for a seat's first hand)
                seat_names[seat] = trace.agent.name
    held = {card for _, card in payoffs}
    cards = [c for c in rules.CARDS if c in held] + sorted(held - set(rules.CARDS))
    series = []
    for seat in sorted(seat_names):
        values, tips = [], []
        for card in cards:
            total, hands = payoffs.get((seat, card), [0.0, 0.0])
            values.append(total / hands if hands else math.nan)
            tips.append(
                f"seat {seat} · {card}: mean payoff {num(values[-1])} over {hands:.0f} hands"
            )
        series.append(Series(f"seat {seat} ({seat_names[seat]})", tuple(values), tuple(tips)))
    svg = bar_chart(
        "plot-kuhn-payoff",
        cards,
        series,
        x_label="card held",
        y_label="mean payoff (chips)",
        values_on_bars=True,
    )
    return Figure("Kuhn poker: mean payoff by card and seat", svg)
