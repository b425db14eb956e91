"""``colour-duel``: how a reply is read (``colour_of``), the scoring table (``score_of``),
and real evals through the CLI (``taketurns eval colour-duel -n 4``) read back from
``episodes.jsonl``: both seats asked the one question, each paid by the table against
the other's reply."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from taketurns import AssistantMessage, Episode, read_episodes
from taketurns._cli.main import main
from taketurns._output.records import record
from taketurns.env import ModelRequest, env_registry, register_builtin_policy
from taketurns.envs.colour_duel import ColourDuel, ColourDuelConfig
from taketurns.envs.colour_duel_rules import COLOURS, QUESTION, colour_of, score_of
from taketurns.harness import text_of

#: scripted seats, each always giving one reply: served as ``builtin/duel-<name>``
REPLIES = {
    "red": "Red",
    "blue": "blue.",
    "ramble": "I like green a lot",
    "none": "hello there",
}


def _always(text: str) -> Callable[[ModelRequest, int], AssistantMessage]:
    """A built-in policy that always replies ``text``."""

    def policy(request: ModelRequest, seed: int) -> AssistantMessage:
        return AssistantMessage(text)

    return policy


for _name, _text in REPLIES.items():
    register_builtin_policy(f"duel-{_name}", _always(_text))


# --- the rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reading"),
    [
        ("red", ("red", True)),
        ("  Blue. ", ("blue", True)),
        ("**GREY**", ("grey", True)),
        ('"teal"!', ("teal", True)),
        ("Red - Red\nBlue - Blue", ("red", False)),
        ("I like navy and gold", ("navy", False)),
        ("hello", (None, False)),
        ("reddish", (None, False)),
        ("", (None, False)),
    ],
)
def test_colour_of_reads_the_first_colour_and_whether_it_is_alone(
    text: str, reading: tuple[str | None, bool]
) -> None:
    assert colour_of(text) == reading


@pytest.mark.parametrize(
    ("mine", "theirs", "score"),
    [
        (("red", True), ("blue", True), 1.0),
        (("red", True), (None, False), 1.0),
        (("red", True), ("green", False), 1.0),
        (("red", True), ("red", True), 0.75),
        (("red", True), ("red", False), 0.75),  # the opponent's colour, alone or not
        (("red", False), ("blue", True), 0.25),
        (("red", False), ("red", False), 0.25),
        ((None, False), ("red", True), 0.0),
        ((None, False), (None, False), 0.0),
    ],
)
def test_score_of_is_the_table(
    mine: tuple[str | None, bool], theirs: tuple[str | None, bool], score: float
) -> None:
    assert score_of(mine, theirs) == score


def test_the_colours_are_plain_lowercase_words() -> None:
    assert {"red", "blue", "grey", "gray", "navy"} <= COLOURS
    assert all(c == c.lower() and c.isalpha() for c in COLOURS)


def test_registered_with_two_seats() -> None:
    assert env_registry.get("colour-duel") is ColourDuel
    env = ColourDuel(ColourDuelConfig())
    assert set(env.roles) == {"player0", "player1"}
    assert [t.name for t in env.tasks(3)] == ["duel-0", "duel-1", "duel-2"]


# --- real evals, read back -------------------------------------------------------------


def _episodes(out: Path, *args: str) -> list[Episode]:
    assert main(["eval", "colour-duel", "-n", "4", "-o", str(out), "--no-progress", *args]) == 0
    episodes = [record.structure(e, Episode) for e in read_episodes(out / "episodes.jsonl")]
    assert sorted(e.task.idx for e in episodes) == [0, 1, 2, 3]
    return episodes


def _seats(episode: Episode) -> dict[str, tuple[str, float, str | None]]:
    """Per seat: the reply it was recorded giving, its reward, its colour; each seat
    asked exactly the one question, once."""
    assert episode.ok, episode.errors
    seats = {}
    for trace in episode.traces:
        assert len(trace.turns) == 1
        assert text_of(trace.turns[0].request[-1].content) == QUESTION
        reply = text_of(trace.messages[-1].content)
        assert trace.info["reply"] == reply
        assert trace.rewards == {"score": trace.info["score"]}
        seats[trace.agent.name] = (reply, trace.reward, trace.info["colour"])
    assert set(seats) == {"player0", "player1"}
    return seats


def test_the_builtin_model_names_no_colour_and_scores_zero(tmp_path: Path) -> None:
    """``taketurns eval colour-duel -n 4`` as it stands: ``builtin/bracket`` is offered
    no bracketed option and answers a sentence without a colour."""
    for episode in _episodes(tmp_path / "run"):
        for reply, reward, colour in _seats(episode).values():
            assert colour_of(reply) == (None, False)
            assert (reward, colour) == (0.0, None)


@pytest.mark.parametrize(
    ("seat0", "seat1", "paid"),
    [
        ("red", "blue", (1.0, 1.0)),
        ("red", "red", (0.75, 0.75)),
        ("red", "ramble", (1.0, 0.25)),
        ("none", "ramble", (0.0, 0.25)),
    ],
)
def test_each_seat_is_paid_by_the_table_against_the_other(
    tmp_path: Path, seat0: str, seat1: str, paid: tuple[float, float]
) -> None:
    models = [
        f"--env.player0.model=builtin/duel-{seat0}",
        f"--env.player1.model=builtin/duel-{seat1}",
    ]
    for episode in _episodes(tmp_path / "run", *models):
        seats = _seats(episode)
        assert (seats["player0"][0], seats["player1"][0]) == (REPLIES[seat0], REPLIES[seat1])
        assert (seats["player0"][1], seats["player1"][1]) == paid
        assert seats["player0"][2] == colour_of(REPLIES[seat0])[0]
