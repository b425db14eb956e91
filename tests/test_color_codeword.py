"""color-codeword: the PNGs, the parser, the scores, the turn loop, and image parts
travelling intact through the wire format, the trace, the JSONL record and a real
OpenAI-client request body. A perfect player decodes the PNGs it is sent."""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from scripted import ScriptedModel

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    AssistantMessage,
    EnvConfig,
    Episode,
    Limits,
    Message,
    ModelEndpointError,
    SystemMessage,
    Task,
    Trace,
    UserMessage,
)
from taketurns._cli.main import main
from taketurns._output.records import dumps_episode, loads_episode
from taketurns.env import EpisodeInfo, ModelClient, ModelRequest, ModelResponse, env_registry
from taketurns.envs import color_codeword_rules as rules
from taketurns.envs.color_codeword import ColorCodeword, ColorCodewordConfig
from taketurns.harness import ImagePart, TextPart, messages_to_wire, text_of
from taketurns.http import OpenAIClient
from taketurns.testing import run_episode

PREFIX = "data:image/png;base64,"


def decode_png(data: bytes) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the set of pixel colours of an 8-bit RGB PNG (filter 0),
    checking the signature, every chunk's CRC and the scanline layout."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        chunks.append((kind, body))
        pos += 12 + length
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, *rest = struct.unpack(">IIBBBBB", chunks[0][1])
    assert rest == [8, 2, 0, 0, 0]  # 8-bit RGB, deflate, adaptive filtering, no interlace
    raw = zlib.decompress(chunks[1][1])
    stride = 1 + 3 * width
    assert len(raw) == height * stride
    colours = set()
    for y in range(height):
        row = raw[y * stride : (y + 1) * stride]
        assert row[0] == 0
        colours |= {tuple(row[1 + 3 * x : 4 + 3 * x]) for x in range(width)}
    return width, height, colours


def letter_of(url: str) -> str:
    """The palette letter whose colour is nearest the square's (one colour only)."""
    assert url.startswith(PREFIX)
    _, _, colours = decode_png(base64.b64decode(url.removeprefix(PREFIX)))
    (colour,) = colours
    return min(
        rules.PALETTE,
        key=lambda k: sum((a - b) ** 2 for a, b in zip(rules.PALETTE[k][1], colour, strict=True)),
    )


def images_in(messages: Iterable[Message]) -> list[str]:
    return [
        part.url
        for m in messages
        if isinstance(m, UserMessage) and not isinstance(m.content, str)
        for part in m.content
        if isinstance(part, ImagePart)
    ]


class DecodingPlayer(ModelClient):
    """Answers perfectly by reading every square it was sent, in order."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        word = "".join(letter_of(url) for url in images_in(request.messages))
        return ModelResponse(AssistantMessage(f"The squares spell it out.\nCODEWORD: {word}"))


async def play(env: ColorCodeword, task: Task, client: ModelClient | None = None) -> Trace:
    """Run ``task`` through ``env.run`` with one player; its closed, scored trace."""
    closed: list[Trace] = []
    agent = Agent(
        "player",
        env.config.player,
        client=client,
        rubric=env.rubric("player"),
        on_close=closed.append,
    )
    await env.run(task, Agents({"player": agent}))
    (trace,) = closed
    return trace


async def episode(env: ColorCodeword, task: Task, client: ModelClient) -> Episode:
    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    ep = Episode(f"color-codeword/{task.idx}/0", "color-codeword", task)
    await run_episode(env, ep, make)
    assert ep.ok, ep.errors
    return ep


def fixed(**options: object) -> ColorCodeword:
    """An env whose tasks all have 3 turns of 1 square."""
    defaults: dict[str, object] = {"min_turns": 3, "max_turns": 3, "max_squares": 1}
    return ColorCodeword(ColorCodewordConfig(**(defaults | options)))  # type: ignore[arg-type]


# --- the squares --------------------------------------------------------------------


@pytest.mark.parametrize("letter", list(rules.LETTERS))
@pytest.mark.parametrize("size", [1, 7, 32])
def test_png_is_a_valid_solid_square(letter: str, size: int) -> None:
    rgb = rules.PALETTE[letter][1]
    png = rules.png_square(rgb, size)
    assert decode_png(png) == (size, size, {rgb})
    url = rules.data_url(png)
    assert url.startswith(PREFIX)
    assert letter_of(url) == letter


def test_palette_is_nine_distinct_letters_and_colours() -> None:
    assert rules.LETTERS == "ABCDEFGHI"
    assert len({name for name, _ in rules.PALETTE.values()}) == 9
    assert len({rgb for _, rgb in rules.PALETTE.values()}) == 9
    prompt = rules.system_prompt()
    for letter, (name, _) in rules.PALETTE.items():
        assert f"{letter} = {name} (#" in prompt
    assert "CODEWORD: <letters>" in prompt


def test_turn_message_is_text_then_one_image_per_square_without_colour_names() -> None:
    squares = ["AB", "I", "CGE"]
    for turn, letters in enumerate(squares):
        message = rules.turn_message(squares, turn, 16)
        assert isinstance(message.content, tuple)
        text, *images = message.content
        assert isinstance(text, TextPart)
        assert text.text.startswith(f"Turn {turn + 1} of 3. ")
        assert "CODEWORD: <letters>" in text.text
        for name, _ in rules.PALETTE.values():
            assert not re.search(rf"\b{name}\b", text.text, re.IGNORECASE)
        assert all(isinstance(p, ImagePart) for p in images)
        assert "".join(letter_of(p.url) for p in images) == letters  # type: ignore[union-attr]


# --- the parser and the scores --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("CODEWORD: ABE", "ABE"),
        ("codeword:abe", "ABE"),
        ("I see red.\n**CODEWORD:** ABE\n", "ABE"),
        ("Codeword =   `HI`", "HI"),
        ("CODEWORD: AB\nwait, no.\nCODEWORD: ABC", "ABC"),
        ("CODEWORD: ABE.", "ABE"),
        ("The codeword is ABE", None),
        ("CODEWORD:", None),
        ("", None),
    ],
)
def test_parse_codeword(text: str, word: str | None) -> None:
    assert rules.parse_codeword(text) == word


@pytest.mark.parametrize(
    ("answer", "expected", "score"),
    [
        ("ABE", "ABE", 1.0),
        (None, "ABE", 0.0),
        ("", "ABE", 0.0),
        ("ABD", "ABE", 2 / 3),
        ("AB", "ABE", 2 / 3),
        ("ABEX", "ABE", 3 / 4),
        ("EBA", "ABE", 1 / 3),
        ("BE", "ABE", 0.0),  # a dropped first letter shifts every position
    ],
)
def test_position_score(answer: str | None, expected: str, score: float) -> None:
    assert rules.position_score(answer, expected) == pytest.approx(score)


# --- seeding --------------------------------------------------------------------------


def test_tasks_are_deterministic_and_independent_of_count() -> None:
    assert ColorCodeword().tasks(20) == ColorCodeword().tasks(20)
    assert ColorCodeword().tasks(20)[:5] == ColorCodeword().tasks(5)


def test_different_seeds_give_different_tasks() -> None:
    a = ColorCodeword(ColorCodewordConfig(seed=0)).tasks(10)
    b = ColorCodeword(ColorCodewordConfig(seed=1)).tasks(10)
    assert [t.answer for t in a] != [t.answer for t in b]
    assert len({t.answer for t in a}) > 5


def test_generated_tasks_respect_the_config() -> None:
    tasks = ColorCodeword().tasks(200)
    assert {len(t.info["squares"]) for t in tasks} == {2, 3, 4}
    assert {len(s) for t in tasks for s in t.info["squares"]} == {1, 2}
    assert set("".join(t.answer for t in tasks)) == set(rules.LETTERS)
    for task in tasks:
        assert task.answer == "".join(task.info["squares"])
        (opening,) = task.prompt  # type: ignore[misc]
        assert opening == rules.turn_message(task.info["squares"], 0, 32)
        assert task.system_prompt == rules.system_prompt()
    big = ColorCodeword(ColorCodewordConfig(square_size=5)).tasks(1)[0]
    assert decode_png(base64.b64decode(images_in(big.prompt)[0].removeprefix(PREFIX)))[0] == 5  # type: ignore[arg-type]


# --- the turn loop and the rewards ----------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 11])
async def test_perfect_player_scores_one(seed: int) -> None:
    env = ColorCodeword(ColorCodewordConfig(seed=seed, max_squares=3))
    for task in env.tasks(5):
        trace = await play(env, task, DecodingPlayer())
        squares = task.info["squares"]
        assert trace.rewards == {"exact_match": 1.0}
        assert trace.metrics == {"partial_match": 1.0}
        assert trace.info["answers"] == ["".join(squares[: t + 1]) for t in range(len(squares))]
        assert trace.info["stopped_at"] is None
        assert trace.stop_condition == "user_closed"
        assert trace.errors == []


async def test_each_request_carries_every_square_so_far() -> None:
    env = fixed(max_squares=2, min_squares=2)
    task = env.tasks(1)[0]
    trace = await play(env, task, DecodingPlayer())
    for turn, model_turn in enumerate(trace.turns):
        assert len(images_in(model_turn.request)) == 2 * (turn + 1)
        assert isinstance(model_turn.request[0], SystemMessage)
    asks = [m for m in trace.messages if isinstance(m, UserMessage)]
    assert asks == [rules.turn_message(task.info["squares"], t, 32) for t in range(3)]


async def test_partial_answers() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    word = task.answer
    wrong = "A" if word[2] != "A" else "B"
    trace = await play(
        env, task, ScriptedModel(f"CODEWORD: {word[0]}", "no idea", f"CODEWORD: {word[:2]}{wrong}")
    )
    assert trace.info["answers"] == [word[0], None, word[:2] + wrong]
    assert trace.rewards == {"exact_match": 0.0}
    assert trace.metrics["partial_match"] == pytest.approx((1 + 0 + 2 / 3) / 3)


async def test_only_the_final_answer_decides_exact_match() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    wrong = "".join("A" if c != "A" else "B" for c in task.answer)
    client = ScriptedModel(f"CODEWORD: {wrong[0]}", "CODEWORD: ", f"CODEWORD: {task.answer}")
    trace = await play(env, task, client)
    assert trace.info["answers"] == [wrong[0], None, task.answer]
    assert trace.rewards == {"exact_match": 1.0}
    assert trace.metrics["partial_match"] == pytest.approx(1 / 3)


async def test_a_stopped_reply_ends_the_episode() -> None:
    env = fixed(player=AgentConfig(limits=Limits(max_turns=2)))
    task = env.tasks(1)[0]
    trace = await play(env, task, DecodingPlayer())
    assert trace.stop_condition == "max_turns"
    assert trace.info["stopped_at"] == 2
    assert trace.info["position_scores"] == [1.0, 1.0]
    assert trace.rewards == {"exact_match": 0.0}
    assert trace.metrics["partial_match"] == pytest.approx(2 / 3)


async def test_a_failing_model_forfeits() -> None:
    env = fixed()
    task = env.tasks(1)[0]
    client = ScriptedModel(f"CODEWORD: {task.answer[0]}", ModelEndpointError("gone", status=500))
    trace = await play(env, task, client)
    assert trace.stop_condition == "model_error"
    assert trace.info["stopped_at"] == 1
    assert trace.rewards == {"exact_match": 0.0}
    assert trace.metrics["partial_match"] == pytest.approx(1 / 3)


# --- images through the wire, the trace and the JSONL ---------------------------------


async def test_images_round_trip_through_the_jsonl_record() -> None:
    env = ColorCodeword(ColorCodewordConfig(min_turns=3, max_squares=3))
    task = env.tasks(1)[0]
    ep = await episode(env, task, DecodingPlayer())
    (trace,) = ep.traces
    assert len(images_in(trace.messages)) == len(task.answer)
    back = loads_episode(dumps_episode(ep))
    (again,) = back.traces
    assert back.task == ep.task
    assert again.task == trace.task
    assert again.messages == trace.messages
    assert [t.request for t in again.turns] == [t.request for t in trace.turns]
    assert again.info == trace.info
    assert again.rewards == {"exact_match": 1.0}
    assert "".join(letter_of(url) for url in images_in(again.messages)) == task.answer


async def test_wire_messages_carry_image_url_parts() -> None:
    env = fixed(min_squares=2, max_squares=2)
    task = env.tasks(1)[0]
    trace = await play(env, task, DecodingPlayer())
    wire = messages_to_wire(trace.turns[-1].request)
    parts = [p for m in wire if isinstance(m["content"], list) for p in m["content"]]
    images = [p for p in parts if p["type"] == "image_url"]
    assert [p["image_url"] for p in images] == [{"url": u} for u in images_in(trace.messages)]
    assert all(p["image_url"]["url"].startswith(PREFIX) for p in images)
    assert [p["type"] for p in wire[1]["content"]] == ["text", "image_url", "image_url"]


async def test_openai_request_bodies_carry_the_images() -> None:
    bodies: list[dict[str, Any]] = []

    def endpoint(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        bodies.append(body)
        urls = [
            part["image_url"]["url"]
            for m in body["messages"]
            if isinstance(m["content"], list)
            for part in m["content"]
            if part["type"] == "image_url"
        ]
        word = "".join(letter_of(url) for url in urls)
        message = {"role": "assistant", "content": f"CODEWORD: {word}"}
        return httpx2.Response(
            200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )

    env = ColorCodeword()
    task = env.tasks(1)[0]
    async with OpenAIClient(
        "http://model.test/v1", transport=httpx2.MockTransport(endpoint)
    ) as client:
        trace = await play(env, task, client)
    assert trace.rewards == {"exact_match": 1.0}
    assert len(bodies) == len(task.info["squares"])
    assert bodies[-1]["messages"] == messages_to_wire(trace.turns[-1].request)


# --- config, registration, end to end --------------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"min_turns": 0}, "min_turns = 0"),
        ({"max_turns": 21}, "max_turns = 21"),
        ({"min_turns": 5}, "min_turns = 5 is not accepted; expected at most max_turns (4)"),
        ({"min_squares": 3}, "min_squares = 3 is not accepted; expected at most max_squares"),
        ({"max_squares": 10}, "max_squares = 10"),
        ({"square_size": 0}, "square_size = 0"),
        ({"square_size": 1.5}, "square_size = 1.5"),
        ({"seed": True}, "seed = True"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match="is not accepted") as info:
        ColorCodewordConfig(**options)  # type: ignore[arg-type]
    assert str(info.value).startswith(needle)


def test_config_fields_and_defaults() -> None:
    config = ColorCodewordConfig()
    assert isinstance(config, EnvConfig)
    assert [f.name for f in attrs.fields(ColorCodewordConfig)] == [
        "player",
        "min_turns",
        "max_turns",
        "min_squares",
        "max_squares",
        "square_size",
        "seed",
    ]
    assert (config.min_turns, config.max_turns, config.min_squares, config.max_squares) == (
        2,
        4,
        1,
        2,
    )
    assert list(ColorCodeword(config).roles) == ["player"]


def test_registered_as_color_codeword() -> None:
    assert env_registry.get("color-codeword") is ColorCodeword
    assert ColorCodeword.id == "color-codeword"


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("--env.min_squares=3", "env.min_squares = 3: expected at most max_squares (2)"),
        ("--env.square_size=0", "env.square_size = 0: expected an integer from 1 to 512"),
        ("--env.max_turns=x", "env.max_turns = 'x': expected an integer"),
    ],
)
def test_cli_refuses_bad_env_options_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, needle: str
) -> None:
    out = tmp_path / "run"
    assert main(["eval", "color-codeword", "-n", "3", "-o", str(out), option]) == 2
    assert needle in capsys.readouterr().err
    assert not (out / "episodes.jsonl").exists()


def test_eval_on_the_builtin_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["eval", "color-codeword", "-n", "3", "-o", str(out), "--no-progress"]) == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 3
    for line in lines:
        episode = json.loads(line)
        assert episode["ok"] is True
        assert episode["errors"] == []
        (trace,) = episode["traces"]
        assert trace["errors"] == []
        assert trace["stop_condition"] == "user_closed"
        assert set(trace["rewards"]) == {"exact_match"}
        assert set(trace["metrics"]) == {"partial_match"}
        squares = episode["task"]["info"]["squares"]
        assert len(trace["turns"]) == len(squares)
        # the images are in the record, as wire image_url parts
        restored = loads_episode(line)
        assert len(images_in(restored.traces[0].messages)) == len("".join(squares))
        assert text_of(restored.traces[0].messages[0].content) == rules.system_prompt()
