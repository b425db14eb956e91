"""``openspiel``: OpenSpiel's games as seats, refereed by OpenSpiel's own state.

Every game here runs on the built-in model through ``run_eval`` and is read back
from ``episodes.jsonl``; OpenSpiel replays each recorded history to the same end.
Seats see only their own information (every request scanned), simultaneous nodes
ask every seat at once, the run's seed reproduces every deal, and bad input is one
line before any episode."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from required import needed

pyspiel = needed("pyspiel", "pip install -e '.[test]' (open_spiel; bash .ci/run)")

from taketurns import (  # noqa: E402 - after the check
    Agent,
    AgentConfig,
    AssistantMessage,
    Episode,
    EvalConfig,
    ModelEndpointError,
    OptionError,
    RunDir,
    Task,
    Trace,
    read_episodes,
    run_eval,
)
from taketurns._cli.main import main  # noqa: E402
from taketurns._output.records import record  # noqa: E402
from taketurns._report.feed import write_report  # noqa: E402
from taketurns.env import (  # noqa: E402
    EpisodeInfo,
    ModelClient,
    ModelRequest,
    ModelResponse,
    env_registry,
)
from taketurns.envs import openspiel_games as games  # noqa: E402
from taketurns.envs.openspiel import OpenSpiel, OpenSpielConfig  # noqa: E402
from taketurns.harness import text_of  # noqa: E402
from taketurns.testing import run_episode  # noqa: E402

GAMES = [
    "kuhn_poker",
    "leduc_poker",
    "liars_dice",
    "goofspiel(num_cards=4)",
    "goofspiel(num_cards=4,imp_info=True)",
    "tic_tac_toe",
    "matrix_pd",
]
GAME_NO = re.compile(r"game #\d+")
OPTION = re.compile(r"\[([^\]]+)\]")


async def played(
    tmp_path: Path, game: str, n: int = 40, seed: int = 0, **kw: object
) -> list[Episode]:
    config = EvalConfig(
        env_id="openspiel", num_tasks=n, seed=seed, env=OpenSpielConfig(game=game, **kw)
    )
    run = await run_eval(config, RunDir(tmp_path), progress=False, report=False)
    assert run.written == n
    return [record.structure(e, Episode) for e in read_episodes(tmp_path / "episodes.jsonl")]


def seats(episode: Episode) -> list[Trace]:
    return sorted(episode.traces, key=lambda t: t.info["seat"])


def replay(game: object, history: Sequence[int]) -> object:
    state = game.new_initial_state()  # type: ignore[attr-defined]
    for action in history:
        if state.is_simultaneous_node():
            raise AssertionError("histories of simultaneous games are replayed by apply_actions")
        state.apply_action(action)
    return state


@pytest.mark.parametrize("game", GAMES)
async def test_games_play_to_openspiels_end_on_the_builtin_model(tmp_path: Path, game: str) -> None:
    loaded = games.load(game)
    episodes = await played(tmp_path, game)
    for episode in episodes:
        assert episode.ok, episode.errors
        traces = seats(episode)
        assert [t.info["seat"] for t in traces] == list(range(loaded.num_players()))
        assert [t.agent.name for t in traces] == [f"player{p}" for p in range(len(traces))]
        history = traces[0].info["history"]
        payoffs = [t.rewards["payoff"] for t in traces]
        for t in traces:
            assert t.info["terminal"] is True
            assert t.info["forfeited"] is False
            assert t.info["history"] == history
            assert t.metrics["invalid"] == 0.0
            assert t.metrics["terminal"] == 1.0
            assert t.info["returns"] == payoffs
            # the per-turn rewards are OpenSpiel's rewards, summing to the return (a
            # seat that only ever had one legal action made no call to pay them on)
            paid = t.turn_reward_total("step")
            assert paid == pytest.approx(t.rewards["payoff"] if t.turns else 0.0)
        if games.is_zero_sum(loaded):
            assert sum(payoffs) == pytest.approx(0.0)
        if not games.is_simultaneous(loaded):
            state = replay(loaded, history)
            assert state.is_terminal()  # type: ignore[attr-defined]
            assert list(state.returns()) == pytest.approx(payoffs)  # type: ignore[attr-defined]
            moves = sum(len(t.info["moves"]) for t in traces)
            chance = sum(1 for _ in range(len(history) - moves))
            assert moves + chance == len(history)


async def test_the_run_seed_reproduces_every_deal(tmp_path: Path) -> None:
    def deals(episodes: list[Episode]) -> list[list[int]]:
        return [seats(e)[0].info["history"] for e in sorted(episodes, key=lambda e: e.task.idx)]

    first = deals(await played(tmp_path / "a", "leduc_poker", seed=3))
    again = deals(await played(tmp_path / "b", "leduc_poker", seed=3))
    other = deals(await played(tmp_path / "c", "leduc_poker", seed=4))
    assert first == again
    assert first != other
    # the deals are OpenSpiel's chance outcomes, every private card drawn
    assert {h[0] for h in first} == set(range(6))


def own_trajectory(game: object, history: Sequence[int], seat: int) -> tuple[str, ...]:
    """What ``seat`` knew at each of its decision points: its information states
    (OpenSpiel records a simultaneous node's joint action as one action a player)."""
    state = game.new_initial_state()  # type: ignore[attr-defined]
    seen, actions = [], list(history)
    while actions:
        if state.is_chance_node():
            state.apply_action(actions.pop(0))
            continue
        if state.is_simultaneous_node() or state.current_player() == seat:
            seen.append(state.information_state_string(seat))
        if state.is_simultaneous_node():
            n = state.num_players()
            state.apply_actions(actions[:n])
            del actions[:n]
        else:
            state.apply_action(actions.pop(0))
    return tuple(seen)


@pytest.mark.parametrize(
    "game", ["kuhn_poker", "leduc_poker", "liars_dice", "goofspiel(num_cards=4,imp_info=True)"]
)
async def test_no_request_holds_another_seats_private_state(tmp_path: Path, game: str) -> None:
    """Every request a seat got is a function of its own information alone: episodes
    where a seat knew the same things (whatever the others held) sent it the same
    requests, word for word."""
    loaded = games.load(game)
    episodes = await played(tmp_path, game, n=300)
    by_knowledge: dict[tuple[int, tuple[str, ...]], set[str]] = defaultdict(set)
    hands: dict[tuple[int, tuple[str, ...]], set[tuple[int, ...]]] = defaultdict(set)
    for episode in episodes:
        for trace in seats(episode):
            seat = trace.info["seat"]
            known = own_trajectory(loaded, trace.info["history"], seat)
            requests = [
                GAME_NO.sub("game #", " | ".join(text_of(m.content) for m in turn.request))
                for turn in trace.turns
            ]
            by_knowledge[(seat, known)].add("\n".join(requests))
            hands[(seat, known)].add(tuple(trace.info["history"]))
            if game == "leduc_poker":  # the other seat's private card, scanned for
                theirs = trace.info["history"][1 - seat]
                assert all(f"(Private: {theirs})" not in r for r in requests)
    shared = [k for k, requests in by_knowledge.items() if len(requests) > 1]
    assert not shared, [by_knowledge[k] for k in shared[:1]]
    # enough collisions that a leak would have shown: the same knowledge, other games
    assert sum(len(h) > 1 for h in hands.values()) >= 10


class Seat(ModelClient):
    """A seat of a simultaneous game: its first call of a round waits for the other
    seat's first call of the same round (asked one after the other, the env would
    deadlock: ``fail_after`` under the autojump clock fails the test), then answers
    the first bracketed option; it records every request's text."""

    def __init__(self, arrived: dict[tuple[int, int], trio.Event], seat: int) -> None:
        self.arrived, self.seat, self.calls, self.texts = arrived, seat, 0, []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        text = text_of(request.messages[-1].content)
        self.texts.append(text)
        self.arrived.setdefault((self.seat, self.calls), trio.Event()).set()
        await self.arrived.setdefault((1 - self.seat, self.calls), trio.Event()).wait()
        self.calls += 1
        return ModelResponse(AssistantMessage(f"[{OPTION.findall(text)[-1]}]"))


async def run_with(env: OpenSpiel, clients: dict[str, ModelClient], idx: int = 0) -> Episode:
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: object) -> Agent:
        return Agent(role, config, client=clients.get(role), episode=info,
                     rubric=env.rubric(role), on_close=on_close)  # type: ignore[arg-type]  # fmt: skip

    episode = Episode(f"openspiel/{idx}/0", "openspiel", env.tasks(idx + 1)[idx])
    await run_episode(env, episode, make)
    return episode


async def test_a_simultaneous_round_asks_every_seat_at_once(autojump_clock: object) -> None:
    env = OpenSpiel(OpenSpielConfig(game="goofspiel(num_cards=4,imp_info=True)"))
    arrived: dict[tuple[int, int], trio.Event] = {}
    clients = {f"player{p}": Seat(arrived, p) for p in (0, 1)}
    with trio.fail_after(10):
        episode = await run_with(env, clients)  # type: ignore[arg-type]
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    # three rounds asked, each seat's request made before either answered (no seat
    # can see the other's bid of the round); OpenSpiel plays the last cards itself
    assert len(t0.turns) == len(t1.turns) == 3
    assert len(t0.info["moves"]) == len(t1.info["moves"]) == 3
    assert t0.info["terminal"]
    # both bid their highest card every round (the last option): every round ties
    assert t0.info["moves"] == ["P0 Bid: 4", "P0 Bid: 3", "P0 Bid: 2"]
    assert t0.rewards["payoff"] == t1.rewards["payoff"] == 0.0


class Scripted(ModelClient):
    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return ModelResponse(AssistantMessage(answer))


async def test_a_refused_reply_is_reprompted_then_forfeits() -> None:
    env = OpenSpiel(OpenSpielConfig(game="kuhn_poker", invalid_retries=1))
    p0 = Scripted("I pass", "[Pass] [Bet]")
    episode = await run_with(env, {"player0": p0, "player1": Scripted()})
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert len(t0.turns) == 2
    assert not t1.turns
    reprompt = text_of(t0.turns[1].request[-1].content)
    assert reprompt.startswith("That answer does not count: your answer has no bracketed legal")
    assert "(1 try left)" in reprompt
    assert "[Pass] [Bet]" in reprompt
    assert t0.info["forfeited"] is True
    assert t0.info["invalid"] == 2
    assert t0.info["terminal"] is False
    assert t0.metrics["terminal"] == 0.0
    assert (t0.rewards["payoff"], t1.rewards["payoff"]) == (-2.0, 2.0)  # kuhn's lowest: -2


async def test_a_reply_that_counts_after_a_reprompt_is_played() -> None:
    env = OpenSpiel(OpenSpielConfig(game="kuhn_poker"))
    episode = await run_with(
        env, {"player0": Scripted("[bet] or [pass]", "[ bet ]"), "player1": Scripted("[Pass]")}
    )
    t0, t1 = seats(episode)
    assert t0.info["moves"] == ["Bet"]
    assert t1.info["moves"] == ["Pass"]
    assert (t0.rewards["payoff"], t1.rewards["payoff"]) == (1.0, -1.0)
    assert t0.info["invalid"] == 1
    assert t0.info["terminal"]


async def test_an_endpoint_failure_is_no_forfeit_and_fails_the_episode() -> None:
    env = OpenSpiel(OpenSpielConfig(game="kuhn_poker"))
    failing = Scripted(ModelEndpointError("down", status=503))
    episode = await run_with(env, {"player0": failing, "player1": Scripted()})
    assert not episode.ok
    t0, _ = seats(episode)
    assert t0.info["forfeited"] is False
    assert "payoff" not in t0.info


def test_action_names_are_bracketable_and_parsed() -> None:
    state = games.load("goofspiel(num_cards=4)").new_initial_state()
    state.apply_action(state.chance_outcomes()[0][0])
    names = games.action_names(state, 1, state.legal_actions(1))
    assert list(names) == ["P1 Bid: 1", "P1 Bid: 2", "P1 Bid: 3", "P1 Bid: 4"]
    assert games.parse_action("I bid [p1  bid: 3].", names) == 2
    for bad, why in [("[P1 Bid: 3] [P1 Bid: 4]", "2 actions"), ("3", "no bracketed")]:
        with pytest.raises(ValueError, match=why):
            games.parse_action(bad, names)
    assert games.shown("[Private: 2][Round 1]") == "(Private: 2)(Round 1)"


def test_forfeit_payoffs_keep_a_zero_sum_game_at_zero() -> None:
    assert games.forfeit_payoffs(games.load("leduc_poker"), [1]) == [13.0, -13.0]
    assert games.forfeit_payoffs(games.load("matrix_pd"), [0]) == [0.0, 10.0]
    assert sum(games.forfeit_payoffs(games.load("goofspiel(players=3)"), [0])) == 0.0


@pytest.mark.parametrize(
    ("game", "needles"),
    [
        ("kuhn_pokr", ["env.game", "did you mean 'kuhn_poker'?"]),
        ("leduc", ["env.game", "leduc_poker"]),
        ("goofspiel(num_crds=4)", ["env.game", "parameters of goofspiel", "num_cards"]),
        ("goofspiel(num_cards=4", ["env.game", "parentheses do not match"]),
        ("goofspiel(players=5)", ["env.game", "at most 4 players", "this game has 5"]),
        ("liars_dice(players=3)", ["env.game", "players from 2 to 2"]),
        ("blackjack", ["env.game", "two or more players", "one seat"]),
    ],
)
def test_bad_games_are_one_line_before_any_episode(
    game: str, needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "openspiel", f"--env.game={game}", "-n", "2"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0] == "error:", err
    assert len(lines) == 2, err
    for needle in needles:
        assert needle in lines[1], err
    assert not (tmp_path / "outputs").exists()


def test_config_refuses_what_opensspiel_would_not_play() -> None:
    with pytest.raises(OptionError, match="game"):
        OpenSpielConfig(game="no_such_game")
    with pytest.raises(OptionError, match="view"):
        OpenSpielConfig(view="everything")
    assert env_registry.get("openspiel") is OpenSpiel


async def test_the_report_shows_the_moves_per_seat(tmp_path: Path) -> None:
    episodes = await played(tmp_path, "tic_tac_toe", n=10)
    page = write_report(tmp_path).read_text()
    assert 'id="openspiel-moves"' in page
    first = seats(episodes[0])[0].info["moves"][0]
    section = page[page.index('id="openspiel-moves"') :]
    assert "player0" in section
    assert "player1" in section
    assert first in section


def test_tasks_name_the_game() -> None:
    tasks = OpenSpiel(OpenSpielConfig(game="goofspiel(num_cards=4)")).tasks(2)
    assert tasks[1] == Task(idx=1, name="goofspiel(num_cards=4)-1", prompt=None)


def test_without_openspiel_the_config_lists_and_the_env_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pyspiel", None)  # as if not installed
    config = OpenSpielConfig(game="leduc_poker")  # `taketurns envs` still lists it
    from taketurns import ConfigError

    with pytest.raises(ConfigError, match=r"pip install 'taketurns\[openspiel\]'"):
        OpenSpiel(config)


async def test_a_game_that_samples_its_own_chance_is_seeded_by_the_episode(
    tmp_path: Path,
) -> None:
    def asked(episodes: list[Episode]) -> list[str]:
        ordered = sorted(episodes, key=lambda e: e.task.idx)
        return [text_of(seats(e)[0].turns[0].request[-1].content) for e in ordered]

    first = asked(await played(tmp_path / "a", "negotiation", n=6, seed=1))
    assert first == asked(await played(tmp_path / "b", "negotiation", n=6, seed=1))
    assert first != asked(await played(tmp_path / "c", "negotiation", n=6, seed=2))
    assert len(set(first)) > 1  # the pools and values differ from game to game
