"""``openspiel``: any OpenSpiel game as seats, refereed by OpenSpiel's own state
(``openspiel`` extra: ``pip install 'taketurns[openspiel]'``).

``--env.game=NAME`` or a game string with parameters (``goofspiel(num_cards=4)``);
one seat per player, ``player0`` .. ``player3`` (one model in self-play, or a model
per seat, any harness). Chance outcomes are drawn from the episode's RNG
(``agents.rng``: the run's ``--seed`` reproduces every deal; a game that samples
its own, ``negotiation``, gets its ``rng_seed`` from the episode's seed). A seat to
act is shown only what OpenSpiel says it knows (``openspiel_games.view_of``: its own
``information_state_string`` and/or ``observation_string``, brackets as parentheses)
and its legal actions as bracketed names; a reply counts when it names exactly one of
them. A reply that does not count is re-prompted and then forfeited by the rules
``kuhn-poker`` plays by (``taketurns.envs.reprompts``): a forfeit ends the game with
``openspiel_games.forfeit_payoffs``; a seat whose model endpoint or harness failed
does not forfeit: the game has no result and the episode is recorded failed. A seat
with a single legal action is not asked. At a simultaneous-move node every seat is
asked at once and the node is applied when all have answered, so no seat sees
another's choice of the same round.

Rewards: OpenSpiel's rewards after each move are paid per turn (``step``, on each
seat's latest model call; at the end, whatever of its return they did not pay, for a
game whose rewards do not add up to it); the ``payoff`` reward is the seat's return at the end
(zero-sum checked where the game says so: a game that breaks it fails the episode).
On each trace: ``seat``, ``game``, ``history`` (OpenSpiel's actions, chance
included), ``moves`` (the seat's own, by name), ``invalid`` (its replies that did not
count), ``forfeited``, ``terminal``, ``returns``; metrics ``forfeit``, ``invalid``,
``moves``, ``terminal``. The report shows the moves per seat.

``taketurns exploitability openspiel --env.game=kuhn_poker`` (``PolicyProbe``) asks
the seats at every information state of a small sequential game; ``builtin/cfr``
(``openspiel_cfr``) is a solver's policy to measure against.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    OptionError,
    Task,
    Trace,
    metric,
    reward,
)
from taketurns.env import PolicyProbe, int_between, one_of
from taketurns.envs import openspiel_cfr, reprompts
from taketurns.envs import openspiel_games as games
from taketurns.report import EpisodeView, Section, table

__all__ = ["OpenSpiel", "OpenSpielConfig", "ask_text", "rules_prompt"]

SEATS = 4


def _a_game(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise OptionError(attribute.name, value, "an OpenSpiel game name or game string")
    if games.installed():  # else the env refuses to be built (``OpenSpiel.__init__``)
        games.load(value, field=attribute.name)


@attrs.define
class OpenSpielConfig(EnvConfig):
    """``game``: an OpenSpiel game name or game string (``goofspiel(num_cards=4)``);
    ``player0`` .. ``player3``: the seats (a game uses the first as many as it has
    players); ``view``: what a seat is shown (``both``, ``information_state``,
    ``observation``: each as far as the game provides it); ``invalid_retries``: the
    re-prompts after a reply that does not count before the seat forfeits."""

    game: str = attrs.field(default="kuhn_poker", validator=_a_game)
    player0: AgentConfig = attrs.field(factory=AgentConfig)
    player1: AgentConfig = attrs.field(factory=AgentConfig)
    player2: AgentConfig = attrs.field(factory=AgentConfig)
    player3: AgentConfig = attrs.field(factory=AgentConfig)
    view: str = attrs.field(default="both", validator=one_of(games.VIEWS, what="a view"))
    invalid_retries: int = attrs.field(default=1, validator=int_between(0))

    def __attrs_post_init__(self) -> None:
        if not games.installed():
            return
        players = games.load(self.game).num_players()
        if players > SEATS:
            raise OptionError(
                "game",
                self.game,
                f"a game of at most {SEATS} players: the env has seats player0..player"
                f"{SEATS - 1} (this game has {players})",
            )


def rules_prompt(game: Any, seat: int, retries: int, number: int) -> str:
    """The system prompt of ``seat``: the game, how to answer, nothing private."""
    kind = game.get_type()
    at_once = (
        " All players choose at the same time: no one sees the others' choices of a "
        "round before choosing."
        if games.is_simultaneous(game)
        else ""
    )
    return (
        f"You are player{seat} in game #{number} of {kind.long_name} (OpenSpiel's "
        f"{game}), {game.num_players()} players, refereed by OpenSpiel.{at_once} "
        "When it is your turn you are shown what you know of the game, as OpenSpiel "
        "writes it, and your legal actions; answer with exactly one of them in square "
        "brackets. An answer that does not name exactly one legal action is refused: "
        f"you get {reprompts.retries_text(retries)} per turn, then a refused answer "
        "forfeits the game."
    )


def ask_text(state: Any, seat: int, names: Iterable[str], view: str) -> str:
    """What ``seat`` is asked at ``state``: what it knows and its legal actions."""
    options = " ".join(f"[{n}]" for n in names)
    return (
        f"{games.view_of(state, seat, view)}\nYour legal actions: {options}\n"
        "Answer with exactly one bracketed action."
    )


def _name_of(state: Any, player: int, action: int) -> str:
    names = games.action_names(state, player, state.legal_actions(player))
    return next(n for n, a in names.items() if a == action)


@attrs.define
class _Seats:
    """The seats' sessions and what the game recorded of each."""

    sessions: list[ChatSession]
    last_turn: list[int | None]
    moves: list[list[str]]
    invalid: list[int]
    paid: list[float] = attrs.field(factory=list)


class OpenSpiel(PolicyProbe, Env):
    id = "openspiel"
    config_class = OpenSpielConfig
    config: OpenSpielConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.game = games.load(self.config.game)  # without the extra: ConfigError

    def tasks(self, num_tasks: int) -> list[Task]:
        name = str(self.game)
        return [Task(idx=i, name=f"{name}-{i}", prompt=None) for i in range(num_tasks)]

    def _seat_task(self, task: Task, seat: int) -> Task:
        prompt = rules_prompt(self.game, seat, self.config.invalid_retries, task.idx)
        return attrs.evolve(task, system_prompt=prompt)

    async def run(self, task: Task, agents: Agents) -> None:
        if "probe" in task.info:
            await self._probe(task, agents)
            return
        n = self.game.num_players()
        async with contextlib.AsyncExitStack() as stack:
            sessions = [
                await stack.enter_async_context(agents[f"player{p}"].chat(self._seat_task(task, p)))
                for p in range(n)
            ]
            seats = _Seats(sessions, [None] * n, [[] for _ in range(n)], [0] * n, [0.0] * n)
            for p, session in enumerate(sessions):
                session.trace.info.update(
                    seat=p, game=str(self.game), history=[], moves=[], invalid=0,
                    forfeited=False, terminal=False,
                )  # fmt: skip
            await self._play(seats, agents)

    async def _play(self, seats: _Seats, agents: Agents) -> None:
        """Play the game to its end, a forfeit or a failure (module docstring)."""
        state = games.seeded(self.game, agents.seed).new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(games.chance_draw(state, agents.rng))
                continue
            simultaneous = state.is_simultaneous_node()
            players = range(self.game.num_players()) if simultaneous else [state.current_player()]
            answers = await self._ask_all(seats, state, players)
            if any(a.failed for a in answers.values()):
                self._record(seats, state)
                return  # no result: the episode failed (taketurns.is_failure)
            forfeiters = [p for p, a in answers.items() if a.forfeited]
            if forfeiters:
                self._record(seats, state)
                self._settle(seats, games.forfeit_payoffs(self.game, forfeiters), forfeiters)
                return
            actions = {p: int(a.value) for p, a in answers.items() if a.value is not None}
            for p, action in actions.items():
                seats.moves[p].append(_name_of(state, p, action))
            if simultaneous:
                state.apply_actions([actions[p] for p in players])
            else:
                state.apply_action(actions[players[0]])
            self._pay_step(seats, state.rewards())
        self._record(seats, state)
        returns = [float(r) for r in state.returns()]
        if games.is_zero_sum(self.game) and not math.isclose(sum(returns), 0.0, abs_tol=1e-9):
            raise RuntimeError(f"{self.game} is zero-sum but returned {returns}")
        # a game whose rewards do not add up to its returns (liars_dice pays none):
        # the rest on each seat's last model call
        self._pay_step(seats, [r - paid for r, paid in zip(returns, seats.paid, strict=True)])
        self._settle(seats, returns, [])

    async def _ask_all(
        self, seats: _Seats, state: Any, players: Iterable[int]
    ) -> dict[int, reprompts.Answer[int]]:
        """Each of ``players`` with a choice asked at once (one with a single legal
        action is not asked); the answers when all have answered. Every question is
        made before any seat answers: none can hold another's choice."""
        answers: dict[int, reprompts.Answer[int]] = {}
        questions: dict[int, tuple[dict[str, int], str]] = {}
        for p in players:
            legal = state.legal_actions(p)
            if len(legal) == 1:
                answers[p] = reprompts.Answer(int(legal[0]))
            elif legal:
                names = games.action_names(state, p, legal)
                questions[p] = (names, ask_text(state, p, names, self.config.view))

        async def ask(p: int, names: dict[str, int], text: str) -> None:
            answers[p] = await self._ask(seats, p, names, text)

        async with trio.open_nursery() as nursery:
            for p, (names, text) in questions.items():
                nursery.start_soon(ask, p, names, text)
        return dict(sorted(answers.items()))

    async def _ask(
        self, seats: _Seats, p: int, names: Mapping[str, int], text: str
    ) -> reprompts.Answer[int]:
        """Seat ``p``'s action, re-prompted while its reply does not count."""
        refused = 0

        def parse(reply: str) -> int:
            nonlocal refused
            try:
                return games.parse_action(reply, names)
            except ValueError:
                refused += 1
                raise

        answer = await reprompts.ask(
            seats.sessions[p], text, parse, retries=self.config.invalid_retries
        )
        seats.invalid[p] += refused
        if answer.turn is not None:
            seats.last_turn[p] = answer.turn
        return answer

    def _pay_step(self, seats: _Seats, rewards: Sequence[float]) -> None:
        """OpenSpiel's rewards of the last move, each on its seat's latest model call."""
        for p, value in enumerate(rewards):
            turn = seats.last_turn[p]
            if value and turn is not None:
                seats.sessions[p].trace.record_turn_reward(turn, float(value), name="step")
                seats.paid[p] += float(value)

    def _record(self, seats: _Seats, state: Any) -> None:
        history = [int(a) for a in state.history()]
        for p, session in enumerate(seats.sessions):
            session.trace.info.update(
                history=history,
                moves=list(seats.moves[p]),
                invalid=seats.invalid[p],
                terminal=bool(state.is_terminal()),
            )

    def _settle(self, seats: _Seats, payoffs: Sequence[float], forfeiters: Sequence[int]) -> None:
        for p, session in enumerate(seats.sessions):
            session.trace.info.update(
                payoff=float(payoffs[p]), returns=list(payoffs), forfeited=p in forfeiters
            )

    # --- probing the policy at each information state (``taketurns exploitability``)

    def probe_tasks(self, samples: int) -> list[Task]:
        states = list(games.information_states(self.game))
        name = str(self.game)
        return [
            Task(
                idx=i * samples + j,
                name=f"{name}-probe-{i}-{j}",
                prompt=None,
                info={"probe": {"state": key, "seat": seat, "history": history}},
            )
            for i, (key, seat, history) in enumerate(states)
            for j in range(samples)
        ]

    async def _probe(self, task: Task, agents: Agents) -> None:
        """Ask the probe task's seat to act at its state once (``PolicyProbe``)."""
        probe = task.info["probe"]
        seat = int(probe["seat"])
        state = self.game.new_initial_state()
        for action in probe["history"]:
            state.apply_action(int(action))
        names = games.action_names(state, seat, state.legal_actions(seat))
        by_action = {a: n for n, a in names.items()}
        async with agents[f"player{seat}"].chat(self._seat_task(task, seat)) as session:
            seats = _Seats([session], [None], [[]], [0], [0.0])
            session.trace.info.update(seat=seat, game=str(self.game))
            text = ask_text(state, seat, names, self.config.view)
            answer = await self._ask(seats, 0, names, text)
            action = None if answer.value is None else by_action[answer.value]
            session.trace.info.update(
                probe={"state": probe["state"], "action": action}, invalid=seats.invalid[0]
            )

    def measure_policy(self, policy: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        return games.nash_conv(self.game, policy)

    # --- scoring and the report

    @reward(weight=1.0)
    def payoff(self, task: Task, trace: Trace) -> float:
        """The seat's return at the end of the game (OpenSpiel's ``returns``)."""
        return float(trace.info.get("payoff", 0.0))

    @metric
    def forfeit(self, task: Task, trace: Trace) -> float:
        """1.0 when the seat forfeited the game."""
        return 1.0 if trace.info.get("forfeited") else 0.0

    @metric
    def invalid(self, task: Task, trace: Trace) -> float:
        """The seat's replies that did not count (re-prompted or forfeited)."""
        return float(trace.info.get("invalid", 0))

    @metric
    def moves(self, task: Task, trace: Trace) -> float:
        """The moves the seat made (its single-action turns included)."""
        return float(len(trace.info.get("moves") or ()))

    @metric
    def terminal(self, task: Task, trace: Trace) -> float:
        """1.0 when the game reached its end (not a forfeit)."""
        return 1.0 if trace.info.get("terminal") else 0.0

    def report_sections(self, episodes: Iterable[EpisodeView]) -> list[Section]:
        """The moves per seat (how often each seat made each move) and, for a probe
        run (``taketurns exploitability``), the empirical policy by information state
        (ok episodes only)."""
        counts: dict[int, Counter[str]] = defaultdict(Counter)
        policy: dict[tuple[int, str], Counter[str]] = defaultdict(Counter)
        for episode in episodes:
            if not episode.ok:
                continue
            for trace in episode.traces:
                seat, probe = trace.info.get("seat"), trace.info.get("probe")
                if not isinstance(seat, int):
                    continue
                made = [probe.get("action")] if isinstance(probe, dict) else ()
                counts[seat].update(str(m) for m in (trace.info.get("moves") or made) if m)
                if isinstance(probe, dict):
                    policy[(seat, str(probe.get("state")))][str(probe.get("action"))] += 1
        rows = [
            (f"player{seat}", move, n, f"{n / sum(counts[seat].values()):.1%}")
            for seat in sorted(counts)
            for move, n in counts[seat].most_common()
        ]
        if not rows:
            return []
        body = table(["seat", "move", "times", "share of the seat's moves"], rows, tag_column=0)
        found = [Section(f"{self.game}: moves per seat", body, id="openspiel-moves")]
        if policy:
            found.append(_policy_section(str(self.game), policy))
        return found


def _policy_section(game: str, policy: Mapping[tuple[int, str], Counter[str]]) -> Section:
    """The empirical policy of a probe run: each state's answers (``None``: did not
    count), at most ``MAX_POLICY_ROWS`` states."""
    rows = [
        (f"player{seat}", games.shown(state), ", ".join(
            f"{a} {n / sum(answers.values()):.0%}" for a, n in answers.most_common()
        ), sum(answers.values()))
        for (seat, state), answers in sorted(policy.items())[:MAX_POLICY_ROWS]
    ]  # fmt: skip
    body = table(["seat", "information state", "answers", "asked"], rows, tag_column=0, mono=[1])
    return Section(
        f"{game}: the empirical policy by information state", body, id="openspiel-policy"
    )


MAX_POLICY_ROWS = 1_000


openspiel_cfr.register()
