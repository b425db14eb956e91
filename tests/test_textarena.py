"""textarena / wordle: the board in the prompt is the board the real engine plays (alone
and with episodes running concurrently), the engine's reward is the reward, and the
config refuses what it cannot play.

Reference boards come from fresh engines the test makes itself with ``ta.make`` (one
per game, reset per seed) and may peek at their secrets; the env never shows them.
Needs the ``textarena`` extra and the nltk data (``NLTK_DATA``, which ``.ci/run`` sets
when the data lies beside the checkout); without either, or network to download the
data, the module skips.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.parse
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from scripted import ScriptedModel

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    EnvConfig,
    Episode,
    Limits,
    OptionError,
    Trace,
    UserMessage,
)
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, env_registry
from taketurns.harness import text_of
from taketurns.testing import run_episode

REPO = Path(__file__).resolve().parents[1]
SHARED_NLTK_DATA = REPO.parent / "shared" / "nltk_data"
if "NLTK_DATA" not in os.environ and SHARED_NLTK_DATA.is_dir():
    os.environ["NLTK_DATA"] = str(SHARED_NLTK_DATA)


def _missing() -> str | None:
    """What this machine lacks to play TextArena here, in words naming the fix."""
    if importlib.util.find_spec("textarena") is None or importlib.util.find_spec("nltk") is None:
        return "textarena is not installed: pip install -e '.[textarena]'"
    import nltk

    try:
        nltk.data.find("corpora/words")
        nltk.data.find("taggers/averaged_perceptron_tagger_eng")
        return None
    except LookupError:
        pass
    import socket

    host = urllib.parse.urlsplit(nltk.downloader.Downloader().url).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError:
        return "no nltk data (set NLTK_DATA to a folder holding it) and no network to download it"
    return None


MISSING = _missing()
if MISSING is not None:  # never a skip: the suite installs what it needs (bash .ci/run)
    pytest.fail(MISSING, pytrace=False)

from taketurns.envs import textarena_games as games  # noqa: E402 - once TextArena is there
from taketurns.envs.textarena import (  # noqa: E402
    GAMES,
    TextArena,
    TextArenaConfig,
    Wordle,
    WordleConfig,
)

ta = games.load()

SEEDS = (0, 1, 2)


# --- fresh reference engines (the test may peek) ----------------------------------


@attrs.frozen
class Reference:
    board: str
    messages: tuple[str, ...]
    state: dict[str, Any]
    winning_line: tuple[str, ...]


_engines: dict[str, Any] = {}
_refs: dict[tuple[str, int], Reference] = {}


def reference(game: str, seed: int) -> Reference:
    """A fresh engine's board and state for ``game`` dealt with ``seed``."""
    if (game, seed) not in _refs:
        if game not in _engines:
            _engines[game] = ta.make(f"{game}-raw")
        engine = _engines[game]
        engine.reset(num_players=1, seed=seed)
        _, observation = engine.get_observation()
        messages = tuple(text.strip() for _, text, _ in observation if text.strip())
        _refs[game, seed] = Reference(
            games.render(observation),
            messages,
            dict(engine.state.game_state),
            winning_line(game, engine),
        )
    return _refs[game, seed]


def winning_line(game: str, engine: Any) -> tuple[str, ...]:
    state = engine.state.game_state
    if game.startswith("Wordle"):
        return (f"My guess: [{state['secret_word']}]",)
    if game == "Hangman-v0":
        return (f"[{state['target_word']}]",)
    if game == "WordLadder-v0":
        return tuple(
            f"[{word}]" for word in ladder(engine, state["start_word"], state["target_word"])
        )
    moves = []
    for word, (row, col, direction) in engine.placed_words.items():
        end = (row, col + len(word) - 1) if direction == "across" else (row + len(word) - 1, col)
        moves.append(f"[{row} {col} {end[0]} {end[1]}]")
    return tuple(moves)


def ladder(engine: Any, start: str, target: str) -> list[str]:
    """A shortest word ladder from ``start`` to ``target`` (without ``start``)."""
    bucket = [w.lower() for w in engine.word_list if len(w) == len(start)]
    neighbours = engine._build_neighbor_map(bucket)
    paths = {start: [start]}
    queue = deque([start])
    while queue:
        word = queue.popleft()
        for nxt in neighbours[word]:
            if nxt not in paths:
                paths[nxt] = [*paths[word], nxt]
                queue.append(nxt)
    return paths[target][1:]


# --- playing episodes -------------------------------------------------------------


def factory(env: TextArena, client: ScriptedModel, limits: Limits | None = None) -> Callable:
    def make(role: str, config: AgentConfig, info: EpisodeInfo, on_close: Any) -> Agent:
        if limits is not None:
            config = attrs.evolve(config, limits=limits)
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    return make


async def play(
    env: TextArena, task: Any, *replies: str, limits: Limits | None = None
) -> tuple[Episode, Trace, ScriptedModel]:
    model = ScriptedModel(*replies, default="[zzzzzzzzzz] I give up")
    episode = Episode(f"{env.id}/{task.idx}/0", env.id, task)
    await run_episode(env, episode, factory(env, model, limits))
    (trace,) = episode.traces
    return episode, trace, model


def asks(trace: Trace) -> list[str]:
    return [text_of(m.content) for m in trace.messages if isinstance(m, UserMessage)]


# --- the board in the prompt is the board the engine plays ------------------------


@pytest.mark.parametrize("game", GAMES)
def test_each_prompt_is_the_fresh_engine_board_for_its_seed(game: str) -> None:
    tasks = TextArena(TextArenaConfig(game=game)).tasks(len(SEEDS) + 1)
    assert [t.idx for t in tasks] == [*SEEDS, len(SEEDS)]
    for task in tasks:
        ref = reference(game, task.idx)
        assert task.prompt == ref.board
        assert task.info == {"game": game, "seed": task.idx}
        assert task.name == f"{game}-{task.idx}"
        for text in ref.messages:  # nothing of the engine's observation is dropped
            assert text in task.prompt
        state = ref.state
        if game == "WordLadder-v0":
            assert f"Start word:  **{state['start_word']}**" in task.prompt
            assert f"Target word: **{state['target_word']}**" in task.prompt
        elif game == "WordSearch-v0":
            for row in state["board"]:
                assert "   ".join(row) in task.prompt
        elif game == "Hangman-v0":
            columns = len(state["target_word"])
            assert " ".join(f"C{i:02}" for i in range(columns)) + "\n" in task.prompt
            assert f"C{columns:02}" not in task.prompt
        else:
            assert f"A secret {len(state['secret_word'])}-letter word" in task.prompt
    # different seeds deal different games (the secret / layout behind the prompt)
    assert len({repr(reference(game, s).state) for s in SEEDS}) == len(SEEDS)


async def test_concurrent_episodes_each_play_their_own_board(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # every game x seed at once; each plays the winning line of the *fresh* engine for
    # its seed, so a win proves the episode's engine held that board
    envs_by_game = {game: TextArena(TextArenaConfig(game=game)) for game in GAMES}
    jobs = [
        (env, task, reference(game, task.idx))
        for game, env in envs_by_game.items()
        for task in env.tasks(len(SEEDS))
    ]
    results: list[tuple[Any, Trace]] = []

    async def one(env: TextArena, task: Any, ref: Reference) -> None:
        episode, trace, _ = await play(env, task, *ref.winning_line)
        assert episode.ok, episode.errors
        results.append((ref, trace))

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(one, *job)
    assert len(results) == len(GAMES) * len(SEEDS)
    for ref, trace in results:
        assert trace.task.prompt == ref.board
        assert trace.messages[0] == UserMessage(ref.board)
        assert trace.info["finished"] is True, trace.info
        assert trace.rewards == {"game_reward": 1.0}
        assert trace.info["moves"] == len(ref.winning_line)
        assert trace.info["invalid_move"] is False
        assert "Congratulations" in trace.info["reason"]
        assert trace.metrics == {"finished": 1.0, "moves": float(len(ref.winning_line))}
    assert capsys.readouterr().out == ""  # WordSearch's debug prints are swallowed


# --- rewards and outcomes ---------------------------------------------------------


async def test_wordle_win_after_feedback_reaches_the_engine_win_reward() -> None:
    env = Wordle()
    task = env.tasks(3)[2]
    secret = reference("Wordle-v0", 2).state["secret_word"]
    wrong = next(w for w in ("house", "table", "water") if w != secret)
    _, trace, model = await play(env, task, f"[{wrong}]", f"[{secret}]")
    assert trace.info == {
        "game": "Wordle-v0",
        "seed": 2,
        "moves": 2,
        "finished": True,
        "reason": "Congratulations! You guessed the word correctly!",
        "invalid_move": False,
        "game_reward": 1.0,
    }
    assert trace.rewards == {"game_reward": 1.0}
    assert trace.reward == 1.0
    prompt, feedback = asks(trace)
    assert prompt == task.prompt
    assert feedback.startswith(f"You submitted [{wrong}].\nFeedback:\n{' '.join(wrong.upper())}\n")
    assert feedback.endswith("You have 5 guesses left.")
    assert trace.stop_condition == "user_closed"
    for request in model.requests:  # the secret never reaches the model
        assert all(secret not in text_of(m.content).lower() for m in request.messages)


async def test_unfinished_game_scores_zero() -> None:
    env = Wordle()
    task = env.tasks(1)[0]
    secret = reference("Wordle-v0", 0).state["secret_word"]
    wrong = next(w for w in ("house", "table") if w != secret)
    episode, trace, _ = await play(env, task, f"[{wrong}]", limits=Limits(max_turns=1))
    assert episode.ok
    assert trace.stop_condition == "max_turns"
    assert trace.info == {
        "game": "Wordle-v0",
        "seed": 0,
        "moves": 1,
        "finished": False,
        "reason": None,
        "invalid_move": False,
        "game_reward": 0.0,
    }
    assert trace.rewards == {"game_reward": 0.0}
    assert trace.metrics == {"finished": 0.0, "moves": 1.0}
    assert len(asks(trace)) == 2  # the engine's feedback was sent; the run then stopped


async def test_invalid_moves_end_the_game_with_the_engine_reason_and_reward() -> None:
    env = TextArena(TextArenaConfig(game="Hangman-v0"))
    task = env.tasks(2)[1]
    _, trace, _ = await play(env, task, "I am not sure.", "Still not sure.")
    assert trace.info["finished"] is True
    assert trace.info["invalid_move"] is True
    assert trace.info["reason"].startswith("Invalid Move: ")
    assert trace.info["moves"] == 2
    assert trace.rewards == {"game_reward": 0.0}  # the engine's: nothing revealed
    assert asks(trace)[1].startswith("You attempted an invalid move.")


async def test_a_prompt_that_is_not_the_engine_board_fails_the_episode() -> None:
    env = TextArena(TextArenaConfig(game="WordLadder-v0"))
    task = env.tasks(2)[1]
    wrong = attrs.evolve(task, prompt=env.tasks(1)[0].prompt)
    episode, trace, model = await play(env, wrong)
    assert not episode.ok
    assert "dealt a different board for seed 1" in episode.errors[0].message
    assert model.requests == []  # refused before the model saw the wrong board
    assert trace.rewards == {"game_reward": 0.0}


def test_tasks_are_deterministic() -> None:
    env = TextArena(TextArenaConfig(game="WordSearch-v0"))
    assert env.tasks(3) == TextArena(TextArenaConfig(game="WordSearch-v0")).tasks(3)
    assert Wordle().tasks(2) == TextArena().tasks(2)  # wordle is textarena's default game


# --- config, registration, the extra ----------------------------------------------


def test_registered_and_configured() -> None:
    assert env_registry.get("textarena") is TextArena
    assert env_registry.get("wordle") is Wordle
    assert (TextArena.id, Wordle.id) == ("textarena", "wordle")
    assert GAMES == ("Wordle-v0", "Wordle-v0-long", "Hangman-v0", "WordLadder-v0", "WordSearch-v0")
    assert [f.name for f in attrs.fields(TextArenaConfig)] == ["player", "game"]
    assert [f.name for f in attrs.fields(WordleConfig)] == ["player"]
    assert isinstance(TextArenaConfig(), EnvConfig)
    assert TextArenaConfig().game == "Wordle-v0"
    assert list(TextArena().roles) == list(Wordle().roles) == ["player"]
    assert Wordle().game == "Wordle-v0"


@pytest.mark.parametrize("bad", ["Chess-v0", "wordle-v0", "Wordle-v0-hardcore", "", 3])
def test_other_games_are_refused_listing_the_five(bad: object) -> None:
    with pytest.raises(OptionError) as info:
        TextArenaConfig(game=bad)  # type: ignore[arg-type]
    assert info.value.field == "game"
    assert info.value.accepted.startswith(f"a TextArena game: one of {', '.join(GAMES)}")


def test_bad_game_is_refused_before_any_episode(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "textarena", "--env.game=Chess-v0", "-n", "1", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 2
    assert not (out / "episodes.jsonl").exists()
    # wordle's game is pinned: it has no `game` option
    assert main(["eval", "wordle", "--env.game=Hangman-v0", "-o", str(out), "--no-progress"]) == 2


def test_without_the_extra_the_env_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textarena", None)  # `import textarena` fails
    with pytest.raises(ConfigError, match=r"pip install 'taketurns\[textarena\]'"):
        TextArena()
    with pytest.raises(ConfigError, match="textarena extra"):
        Wordle()


def test_importing_the_env_does_not_import_textarena() -> None:
    code = (
        "import sys, taketurns.envs.textarena; assert 'textarena' not in sys.modules; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr


def test_nltk_downloads_are_offline_when_the_data_is_present() -> None:
    import nltk

    assert getattr(nltk.download, "_taketurns_offline", False)
    assert nltk.download("words") is True
    assert nltk.download("averaged_perceptron_tagger_eng", quiet=True) is True


# --- end to end on the built-in model ---------------------------------------------


def _episodes(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _check_run(out: Path, game: str, n: int) -> None:
    episodes = _episodes(out)
    assert sorted(e["task"]["idx"] for e in episodes) == list(range(n))
    for e in episodes:
        assert e["ok"], e["errors"]
        assert e["errors"] == []
        (trace,) = e["traces"]
        assert trace["errors"] == []
        assert trace["agent"]["name"] == "player"
        assert trace["info"]["game"] == game
        assert trace["info"]["finished"] is True  # the built-in model ends every game
        assert 0.0 <= trace["rewards"]["game_reward"] <= 1.0
        assert trace["messages"][0]["content"] == reference(game, e["task"]["idx"]).board


def test_eval_wordle_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "wordle"
    assert main(["eval", "wordle", "-n", "2", "-o", str(out), "--no-progress"]) == 0
    _check_run(out, "Wordle-v0", 2)
    assert json.loads((out / "summary.json").read_text())["episodes"] == 2


@pytest.mark.parametrize("game", GAMES)
def test_eval_textarena_end_to_end(game: str, tmp_path: Path) -> None:
    out = tmp_path / game
    argv = ["eval", "textarena", f"--env.game={game}", "-n", "1", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    _check_run(out, game, 1)
