"""alphabet-sort: the generator, the parser, the scores and the turn loop, driven
through the public API with real agents (the built-in model, scripted clients and a
perfect player that sorts what the conversation asks for)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
from scripted import ScriptedModel

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    AssistantMessage,
    EnvConfig,
    Limits,
    ModelEndpointError,
    Task,
    Trace,
    UserMessage,
)
from taketurns._cli.main import main
from taketurns.env import ModelClient, ModelRequest, ModelResponse, env_registry
from taketurns.envs import alphabet_sort_rules as rules
from taketurns.envs.alphabet_sort import SYSTEM_PROMPT, AlphabetSort, AlphabetSortConfig
from taketurns.harness import text_of

MARK = "// new name!"


class SortingPlayer(ModelClient):
    """Answers every turn perfectly, from the conversation alone: it reads the names
    and the sort key out of the user messages and sorts them itself."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        asks = [text_of(m.content) for m in request.messages if isinstance(m, UserMessage)]
        turns = [ask.split("\n\n")[0].splitlines()[1:] for ask in asks]
        by = re.search(r"by (first|last) name", asks[0])
        assert by is not None
        lines = sort_names([n for names in turns for n in names], by.group(1))
        if len(turns) == 1:
            body, tag = lines, "alphabetical_sorted"
        else:
            body = [f"{n} {MARK}" if n in turns[-1] else n for n in lines]
            tag = "combined_alphabetical_sorted"
        text = "Sure.\n<{0}>\n{1}\n</{0}>".format(tag, "\n".join(body))
        return ModelResponse(AssistantMessage(text))


def sort_names(names: Sequence[str], by: str) -> list[str]:
    index = 0 if by == "first" else 1
    return sorted(names, key=lambda n: (n.split()[index], n.split()[1 - index]))


def answer(lines: Sequence[str], tag: str = "alphabetical_sorted") -> str:
    return f"<{tag}>\n" + "\n".join(lines) + f"\n</{tag}>"


async def play(env: AlphabetSort, task: Task, client: ModelClient | None = None) -> Trace:
    """Run ``task`` through ``env.run`` with one player; its closed, scored trace."""
    closed: list[Trace] = []
    config = env.config.player
    agent = Agent(
        "player", config, client=client, rubric=env.rubric("player"), on_close=closed.append
    )
    await env.run(task, Agents({"player": agent}))
    (trace,) = closed
    return trace


def fixed(**options: object) -> AlphabetSort:
    """An env whose tasks all have 2 turns of 2 names, sorted by first name."""
    defaults: dict[str, object] = {
        "min_turns": 2,
        "max_turns": 2,
        "min_names_per_turn": 2,
        "max_names_per_turn": 2,
        "sort_by": "first",
    }
    return AlphabetSort(AlphabetSortConfig(**(defaults | options)))  # type: ignore[arg-type]


# --- the parser -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Ada Zhou\nMei Chen",
        "<alphabetical_sorted>Ada Zhou",  # never closed
        "<combined_alphabetical_sorted>\nAda Zhou\n</combined_alphabetical_sorted>",
        "<alphabetical-sorted>\nAda Zhou\n</alphabetical-sorted>",
        "",
    ],
)
def test_missing_tag_parses_as_none(text: str) -> None:
    assert rules.parse_lines(text, "alphabetical_sorted") is None


def test_parser_normalises_whitespace_bullets_and_blank_lines() -> None:
    text = (
        "Here you go:\n<alphabetical_sorted>\n\n   Ada    Zhou  \n- Mei Chen\n"
        "2. Omar  Park\n\t\n* Rosa Vogel\n</alphabetical_sorted>\nDone."
    )
    assert rules.parse_lines(text, "alphabetical_sorted") == [
        "Ada Zhou",
        "Mei Chen",
        "Omar Park",
        "Rosa Vogel",
    ]


def test_parser_takes_the_last_tag_case_insensitively() -> None:
    text = f"{answer(['Draft One'])}\nbetter:\n<ALPHABETICAL_SORTED>Ada Zhou</ALPHABETICAL_SORTED>"
    assert rules.parse_lines(text, "alphabetical_sorted") == ["Ada Zhou"]
    assert rules.parse_lines(answer([], "alphabetical_sorted"), "alphabetical_sorted") == []


@pytest.mark.parametrize(
    "line",
    [
        "Mei Chen // new name!",
        "Mei Chen//new name!",
        "Mei  Chen   //   New Name!",
        "Mei Chen // new name",
        "- Mei Chen // NEW NAME!  ",
    ],
)
def test_new_name_marker_is_normalised(line: str) -> None:
    text = answer(["Ada Zhou", line], "combined_alphabetical_sorted")
    parsed = rules.parse_lines(text, "combined_alphabetical_sorted")
    assert parsed == ["Ada Zhou", f"Mei Chen {MARK}"]


# --- expected answers and scores ----------------------------------------------------

TURNS = [["Zara Abara", "Ada Zhou"], ["Mei Chen"], ["Omar Park", "Bruno Young"]]


def test_expected_lines_by_first_and_last_name_with_markers() -> None:
    assert rules.expected_lines(TURNS, 0, "first") == ["Ada Zhou", "Zara Abara"]
    assert rules.expected_lines(TURNS, 0, "last") == ["Zara Abara", "Ada Zhou"]
    assert rules.expected_lines(TURNS, 1, "first") == [
        "Ada Zhou",
        f"Mei Chen {MARK}",
        "Zara Abara",
    ]
    assert rules.expected_lines(TURNS, 2, "last") == [
        "Zara Abara",
        "Mei Chen",
        f"Omar Park {MARK}",
        f"Bruno Young {MARK}",
        "Ada Zhou",
    ]


def test_similarity_known_cases() -> None:
    expected = ["Ada Zhou", "Mei Chen", "Zara Abara"]
    assert rules.similarity(expected, expected) == 1.0
    assert rules.similarity(None, expected) == 0.0
    assert rules.similarity([], expected) == 0.0
    swapped = ["Mei Chen", "Ada Zhou", "Zara Abara"]  # 2 of 3 lines in a matching order
    assert rules.similarity(swapped, expected) == pytest.approx(2 * 2 / 6)
    unmarked = ["Ada Zhou", "Mei Chen"]
    assert rules.similarity(unmarked, ["Ada Zhou", f"Mei Chen {MARK}"]) == pytest.approx(0.5)
    assert rules.similarity([*expected, "Extra Name"], expected) == pytest.approx(6 / 7)


def test_turn_messages_ask_for_the_right_tag() -> None:
    first = rules.turn_message(TURNS, 0, "last")
    assert first.startswith(
        "Sort these names alphabetically by last name:\nZara Abara\nAda Zhou\n\n"
    )
    assert "<alphabetical_sorted></alphabetical_sorted>" in first
    later = rules.turn_message(TURNS, 1, "last")
    assert later.startswith("Here is 1 more name:\nMei Chen\n\n")
    assert "<combined_alphabetical_sorted></combined_alphabetical_sorted>" in later
    assert MARK in later
    assert rules.turn_message(TURNS, 2, "first").startswith("Here are 2 more names:\n")


# --- seeding ------------------------------------------------------------------------


def test_tasks_are_deterministic_and_independent_of_count() -> None:
    assert AlphabetSort().tasks(20) == AlphabetSort().tasks(20)
    assert AlphabetSort().tasks(20)[:5] == AlphabetSort().tasks(5)


def test_different_seeds_give_different_tasks() -> None:
    a = AlphabetSort(AlphabetSortConfig(seed=0)).tasks(10)
    b = AlphabetSort(AlphabetSortConfig(seed=1)).tasks(10)
    assert [t.info for t in a] != [t.info for t in b]
    assert len({t.prompt for t in a}) == 10  # tasks within one run differ too


def test_generated_tasks_respect_the_config() -> None:
    env = AlphabetSort()
    tasks = env.tasks(200)
    assert {len(t.info["turns"]) for t in tasks} == {1, 2, 3}
    assert {t.info["sort_by"] for t in tasks} == {"first", "last"}
    counts = {len(names) for t in tasks for names in t.info["turns"]}
    assert counts == {1, 2, 3, 4, 5}
    for task in tasks:
        names = [n for names in task.info["turns"] for n in names]
        assert len({n.split()[0] for n in names}) == len(names)  # no first name twice
        assert len({n.split()[1] for n in names}) == len(names)  # no last name twice
        assert all(n.split()[0] in rules.FIRST_NAMES for n in names)
        assert task.prompt == rules.turn_message(task.info["turns"], 0, task.info["sort_by"])
        assert task.system_prompt == SYSTEM_PROMPT
        assert len(task.answer) == len(task.info["turns"])
    assert {t.info["sort_by"] for t in fixed().tasks(10)} == {"first"}


# --- the turn loop and the rewards -----------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7])
async def test_perfect_player_scores_one(seed: int) -> None:
    env = AlphabetSort(AlphabetSortConfig(seed=seed))
    for task in env.tasks(6):
        trace = await play(env, task, SortingPlayer())
        turns = len(task.info["turns"])
        assert trace.rewards == {"sort_score": 1.0}
        assert trace.metrics == {"perfect_turns": 1.0}
        assert trace.info["turn_scores"] == [1.0] * turns
        assert trace.info["stopped_at"] is None
        assert len(trace.turns) == turns
        assert trace.stop_condition == "user_closed"
        assert trace.errors == []


async def test_the_user_sends_each_turn_in_order() -> None:
    env = AlphabetSort(AlphabetSortConfig(min_turns=3))
    task = env.tasks(1)[0]
    trace = await play(env, task, SortingPlayer())
    turns, by = task.info["turns"], task.info["sort_by"]
    asks = [text_of(m.content) for m in trace.messages if isinstance(m, UserMessage)]
    assert asks == [rules.turn_message(turns, t, by) for t in range(3)]
    last_request = trace.turns[-1].request
    assert [m.role for m in last_request] == ["system", *["user", "assistant"] * 2, "user"]


async def test_partial_answers_score_similarity_to_the_power() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    first = task.answer[0]
    wrong_order = answer(list(reversed(first)))  # similarity 0.5
    no_tag = "\n".join(task.answer[1])  # the right lines, but not in the tag: 0
    trace = await play(env, task, ScriptedModel(wrong_order, no_tag))
    assert trace.info["similarities"] == [0.5, 0.0]
    assert trace.info["turn_scores"] == [0.5**4, 0.0]
    assert trace.reward == pytest.approx(0.5**4 / 2)
    assert trace.metrics == {"perfect_turns": 0.0}


@pytest.mark.parametrize("power", [1, 2.5, 8])
async def test_power_is_configurable(power: float) -> None:
    env = fixed(power=power)
    task = env.tasks(1)[0]
    right = answer(task.answer[1], "combined_alphabetical_sorted")
    trace = await play(env, task, ScriptedModel(answer(list(reversed(task.answer[0]))), right))
    assert trace.reward == pytest.approx((0.5**power + 1.0) / 2)
    assert trace.metrics == {"perfect_turns": 0.5}


async def test_wrong_tag_on_a_later_turn_scores_zero() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    trace = await play(env, task, ScriptedModel(answer(task.answer[0]), answer(task.answer[1])))
    assert trace.info["similarities"] == [1.0, 0.0]
    assert trace.reward == pytest.approx(0.5)


async def test_a_stopped_reply_ends_the_episode_and_the_rest_score_zero() -> None:
    env = fixed(min_turns=3, max_turns=3, player=AgentConfig(limits=Limits(max_turns=1)))
    task = env.tasks(1)[0]
    trace = await play(env, task, SortingPlayer())
    assert trace.stop_condition == "max_turns"
    assert trace.info["stopped_at"] == 1
    assert trace.info["turn_scores"] == [1.0]
    assert trace.reward == pytest.approx(1 / 3)
    assert len([m for m in trace.messages if isinstance(m, UserMessage)]) == 2


async def test_a_failing_model_forfeits_from_the_first_turn() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    trace = await play(env, task, ScriptedModel(ModelEndpointError("down", status=503)))
    assert trace.stop_condition == "model_error"
    assert trace.info["stopped_at"] == 0
    assert trace.info["turn_scores"] == []
    assert trace.rewards == {"sort_score": 0.0}
    assert trace.metrics == {"perfect_turns": 0.0}


async def test_builtin_model_is_scored_without_errors() -> None:
    env = AlphabetSort()
    for task in env.tasks(5):
        trace = await play(env, task)
        assert trace.errors == []
        assert trace.reward == 0.0  # the built-in model cannot sort
        assert len(trace.info["turn_scores"]) == len(task.info["turns"])


# --- config, registration, end to end ----------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"min_turns": 0}, "min_turns = 0"),
        ({"max_turns": 11}, "max_turns = 11"),
        ({"min_turns": 3, "max_turns": 2}, "min_turns = 3 is not accepted; expected at most max"),
        ({"min_names_per_turn": 4, "max_names_per_turn": 3}, "min_names_per_turn = 4"),
        ({"max_turns": 10, "max_names_per_turn": 7}, "max_names_per_turn = 7"),
        ({"power": 0}, "power = 0"),
        ({"power": True}, "power = True"),
        ({"sort_by": "middle"}, "sort_by = 'middle'"),
        ({"seed": -1}, "seed = -1"),
        ({"seed": "0"}, "seed = '0'"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match="is not accepted") as info:
        AlphabetSortConfig(**options)  # type: ignore[arg-type]
    assert str(info.value).startswith(needle)


def test_config_fields_and_defaults() -> None:
    config = AlphabetSortConfig()
    assert isinstance(config, EnvConfig)
    assert [f.name for f in attrs.fields(AlphabetSortConfig)] == [
        "player",
        "min_turns",
        "max_turns",
        "min_names_per_turn",
        "max_names_per_turn",
        "power",
        "sort_by",
        "seed",
    ]
    assert (config.min_turns, config.max_turns, config.power, config.sort_by) == (
        1,
        3,
        4.0,
        "random",
    )
    assert list(AlphabetSort(config).roles) == ["player"]


def test_registered_as_alphabet_sort() -> None:
    assert env_registry.get("alphabet-sort") is AlphabetSort
    assert AlphabetSort.id == "alphabet-sort"


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("--env.min_turns=4", "env.min_turns = 4: expected at most max_turns (3)"),
        ("--env.power=0", "env.power = 0.0: expected a number > 0"),
        ("--env.sort_by=middle", "env.sort_by = 'middle'"),
        ("--env.max_names_per_turn=x", "env.max_names_per_turn = 'x': expected an integer"),
        ("--env.colour=red", "env.colour: unknown option"),
    ],
)
def test_cli_refuses_bad_env_options_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, needle: str
) -> None:
    out = tmp_path / "run"
    assert main(["eval", "alphabet-sort", "-n", "3", "-o", str(out), option]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "episodes.jsonl").exists()


def test_eval_on_the_builtin_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["eval", "alphabet-sort", "-n", "3", "-o", str(out), "--no-progress"]) == 0
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["task"]["idx"] for e in episodes) == [0, 1, 2]
    for episode in episodes:
        assert episode["ok"] is True
        assert episode["errors"] == []
        (trace,) = episode["traces"]
        assert trace["errors"] == []
        assert trace["stop_condition"] == "user_closed"
        assert set(trace["rewards"]) == {"sort_score"}
        assert len(trace["info"]["turn_scores"]) == len(episode["task"]["info"]["turns"])
