"""textarena-selfplay: two seats play the real TextArena two-player engines; each seat
is told only its own observation, the engine rules on every move (invalid ones too),
its final result is the reward; a stopped seat forfeits, a failed seat fails the
episode; seeds replay exactly; unsupported games are refused before any episode.

Needs the ``textarena`` extra and the nltk data (``NLTK_DATA``, which ``.ci/run`` sets
when the data lies beside the checkout): without them the module fails, naming them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from taketurns import Agent, AgentConfig, Episode, Limits, ModelEndpointError, OptionError, Trace
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient, env_registry
from taketurns.envs import textarena_games as games
from taketurns.envs.textarena_selfplay import GAMES, TextArenaSelfPlay, TextArenaSelfPlayConfig
from taketurns.harness import text_of
from taketurns.testing import BuiltinModel, ScriptedModel, run_episode

REPO = Path(__file__).resolve().parents[1]
SHARED_NLTK_DATA = REPO.parent / "shared" / "nltk_data"
if "NLTK_DATA" not in os.environ and SHARED_NLTK_DATA.is_dir():
    os.environ["NLTK_DATA"] = str(SHARED_NLTK_DATA)

try:
    import nltk
    import textarena  # noqa: F401
except ImportError as exc:  # a missing dependency fails, naming it (never a skip)
    raise ImportError(f"needs the textarena extra: pip install -e '.[textarena]' ({exc})") from exc
try:
    nltk.data.find("corpora/words")
    nltk.data.find("taggers/averaged_perceptron_tagger_eng")
except LookupError as exc:
    raise LookupError(
        "needs the nltk data 'words' and 'averaged_perceptron_tagger_eng': set NLTK_DATA"
    ) from exc


def env_of(game: str = "TicTacToe-v0", **options: Any) -> TextArenaSelfPlay:
    return TextArenaSelfPlay(TextArenaSelfPlayConfig(game=game, **options))


async def play(
    env: TextArenaSelfPlay,
    idx: int = 0,
    clients: Mapping[str, ModelClient] | None = None,
    configs: Mapping[str, AgentConfig] | None = None,
) -> Episode:
    """One episode as the eval runner plays it, each seat on its own client (default:
    the built-in bracket model)."""
    task = env.tasks(idx + 1)[idx]

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        config = (configs or {}).get(role, config)
        client = (clients or {}).get(role) or BuiltinModel("bracket")
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    episode = Episode(f"textarena-selfplay/{idx}/0", "textarena-selfplay", task)
    return await run_episode(env, episode, make)


def seats(episode: Episode) -> tuple[Trace, Trace]:
    by_name = {trace.agent.name: trace for trace in episode.traces}
    return by_name["player0"], by_name["player1"]


def user_texts(model: ScriptedModel) -> list[str]:
    return [text_of(request.messages[-1].content) for request in model.requests]


# --- the games --------------------------------------------------------------------


def test_registered_with_two_seats_and_the_supported_games() -> None:
    assert env_registry.get("textarena-selfplay") is TextArenaSelfPlay
    assert list(env_of().roles) == ["player0", "player1"]
    assert {"TicTacToe-v0", "WordChains-v0", "SimpleNegotiation-v0", "KuhnPoker-v0"} <= set(GAMES)


async def test_tictactoe_each_seat_sees_only_its_own_observation_and_the_engine_scores() -> None:
    p0 = ScriptedModel("[0]", "[1]", "[2]")
    p1 = ScriptedModel("[4]", "[8]")
    episode = await play(env_of(), clients={"player0": p0, "player1": p1})
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert (t0.rewards, t1.rewards) == ({"game_reward": 1.0}, {"game_reward": -1.0})
    assert t0.info["moves"] == 3
    assert t1.info["moves"] == 2
    assert t0.info["finished"]
    assert t1.info["finished"]
    assert t0.info["reason"] == t1.info["reason"] == "Player 0 has won!"
    first0, first1 = user_texts(p0)[0], user_texts(p1)[0]
    assert "You are Player 0" in first0
    assert "You are Player 1" not in first0
    assert "You are Player 1" in first1
    assert "You are Player 0" not in first1
    assert "[Player 0] [0]" in first1  # the other seat's move, not the seat's own echo
    assert "[Player 0]" not in "".join(user_texts(p0))
    assert len(episode.traces) == 2
    for trace in episode.traces:
        assert trace.episode.id == "textarena-selfplay/0/0"
        assert trace.stop_condition == "user_closed"


async def test_invalid_moves_are_ruled_by_the_engine() -> None:
    # player1 answers an occupied cell twice: re-asked once, then it loses
    p0 = ScriptedModel("[4]")
    p1 = ScriptedModel("[4]", "[4]")
    episode = await play(env_of(), clients={"player0": p0, "player1": p1})
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert (t0.rewards, t1.rewards) == ({"game_reward": 1.0}, {"game_reward": -1.0})
    assert (t0.info["invalid_move"], t1.info["invalid_move"]) == (False, True)
    assert t1.info["moves"] == 2
    assert "attempted an invalid move" in user_texts(p1)[1]


async def test_wordchains_a_legal_word_is_played_and_a_bad_one_loses() -> None:
    env = env_of("WordChains-v0", seed=5)
    opening = ScriptedModel("[x]")
    await play(env, clients={"player0": opening, "player1": ScriptedModel()})
    board = user_texts(opening)[0]
    start = board.split("The starting word is [")[1].split("]")[0]
    from nltk.corpus import words

    dictionary = games.load().envs.utils.word_lists.EnglishDictionary(
        keep_proper_nouns=False, include_nltk=True
    )
    word = next(
        w.lower()
        for w in sorted(words.words())
        if len(w) == len(start) + 1
        and w.lower().startswith(start[-1])
        and w.isalpha()
        and dictionary.is_english_word(w.lower())
    )
    p0, p1 = ScriptedModel(f"[{word}]"), ScriptedModel("[zz]", "[zz]")
    episode = await play(env, clients={"player0": p0, "player1": p1})
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert t0.info["moves"] == 1
    assert t1.info["moves"] == 2
    assert (t0.rewards, t1.rewards) == ({"game_reward": 1.0}, {"game_reward": -1.0})
    assert t1.info["invalid_move"]
    assert f"[Player 0] [{word}]" in user_texts(p1)[0]


@pytest.mark.parametrize("game", ["SimpleNegotiation-v0", "KuhnPoker-v0", "ConnectFour-v0"])
async def test_more_games_play_to_the_engines_verdict(game: str) -> None:
    episode = await play(env_of(game))
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert t0.info["finished"]
    assert t1.info["finished"]
    assert t0.info["moves"] + t1.info["moves"] >= 2
    if game != "SimpleNegotiation-v0":  # zero-sum games
        assert t0.reward == -t1.reward


async def test_a_seed_replays_exactly_even_with_rng_drawn_during_play() -> None:
    # KuhnPoker-v0 deals every round inside step(): the match keeps its own RNG
    async def transcript(seed: int) -> list[list[str]]:
        clients = {"player0": ScriptedModel(default="[call]"), "player1": ScriptedModel()}
        clients["player1"].default = "[bet]"
        episode = await play(env_of("KuhnPoker-v0", seed=seed), clients=clients)
        assert episode.ok, episode.errors
        return [user_texts(clients[seat]) for seat in ("player0", "player1")]

    first = await transcript(3)
    async with trio.open_nursery() as nursery:  # concurrent episodes do not disturb it
        nursery.start_soon(transcript, 4)
        again = await transcript(3)
    assert again == first
    assert await transcript(4) != first


async def test_a_stopped_seat_forfeits_through_the_engine() -> None:
    configs = {"player1": AgentConfig(limits=Limits(max_turns=1))}
    p0, p1 = ScriptedModel("[0]", "[1]"), ScriptedModel("[4]", "[5]")
    episode = await play(env_of(), clients={"player0": p0, "player1": p1}, configs=configs)
    assert episode.ok, episode.errors
    t0, t1 = seats(episode)
    assert (t0.rewards, t1.rewards) == ({"game_reward": 1.0}, {"game_reward": -1.0})
    assert (t0.metrics["forfeit"], t1.metrics["forfeit"]) == (0.0, 1.0)
    assert "stopped instead of moving" in t1.info["reason"]


async def test_a_failed_seat_fails_the_episode_instead_of_forfeiting() -> None:
    p1 = ScriptedModel(ModelEndpointError("endpoint down", status=503))
    episode = await play(env_of(), clients={"player0": ScriptedModel("[0]"), "player1": p1})
    assert not episode.ok
    assert episode.stop == "env_error"
    assert "player1's run failed (model_error)" in episode.errors[0].message
    t0, t1 = seats(episode)
    assert t1.stop_condition == "model_error"
    assert not t0.info["forfeited"]
    assert not t1.info["forfeited"]
    assert not t0.info["finished"]


def test_unsupported_games_are_refused() -> None:
    with pytest.raises(OptionError, match="a two-player game"):
        TextArenaSelfPlayConfig(game="Wordle-v0")


# --- the command line -------------------------------------------------------------


@pytest.mark.parametrize(("game", "n"), [("TicTacToe-v0", 4), ("WordChains-v0", 2)])
def test_eval_writes_two_stamped_traces_per_episode(tmp_path: Path, game: str, n: int) -> None:
    out = tmp_path / "run"
    argv = ["eval", "textarena-selfplay", f"--env.game={game}", "-n", str(n), "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == n
    for line in lines:
        episode = json.loads(line)
        assert episode["ok"], episode["errors"]
        names = sorted(trace["agent"]["name"] for trace in episode["traces"])
        assert names == ["player0", "player1"]
        for trace in episode["traces"]:
            assert trace["episode"]["id"] == episode["id"]
            assert trace["info"]["game"] == game
            assert trace["info"]["finished"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env.game=Chess-v0"], "env.game = 'Chess-v0': expected a two-player game"),
        (["--env.seed=-1"], "env.seed"),
        (["--env.player2.model=x"], "env.player2: unknown option"),
    ],
)
def test_bad_options_are_refused_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    assert main(["eval", "textarena-selfplay", *args, "-o", str(out), "--no-progress"]) == 2
    assert needle in " ".join(capsys.readouterr().err.split())
    assert not out.exists()


def test_per_seat_overrides_reach_each_seat(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "textarena-selfplay", "-n", "1", "-o", str(out), "--no-progress"]
    assert main([*argv, "--env.player1.model=builtin/echo"]) == 0
    (episode,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    models = {t["agent"]["name"]: t["agent"]["model"] for t in episode["traces"]}
    assert models == {"player0": "builtin/bracket", "player1": "builtin/echo"}
    assert attrs.has(TextArenaSelfPlayConfig)


async def test_every_match_is_a_fresh_engine() -> None:
    # WordChains-v0 copies a pristine template (ta.make costs seconds); the others are
    # made new: after matches the template was never reset and its word list is whole
    env = env_of("WordChains-v0")
    await play(env)
    template = games._templates["WordChains-v0"]
    words_before = list(template.word_list)
    await play(env, idx=1)
    assert not hasattr(template, "state")
    assert template.word_list == words_before
    _, first = await games.Match.open("KuhnPoker-v0", 9)
    _, again = await games.Match.open("KuhnPoker-v0", 9)
    assert first == again
