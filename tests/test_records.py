"""The JSONL record: its hand-written trace writer stays in step with ``Trace``."""

from __future__ import annotations

from pathlib import Path

import attrs
import orjson

from taketurns import Agent, AgentConfig, Task, Trace, UserMessage, read_episodes
from taketurns._eval.episode import Episode, EpisodeTiming
from taketurns._exchange.outcome import record_cause
from taketurns._output.records import (
    FORMAT,
    dumps_episode,
    episode_line,
    loads_episode,
    parse_record,
    record,
)
from taketurns.harness import ImagePart, TextPart, to_wire


async def _episode() -> Episode:
    episode = Episode("e/0/0", "e", Task(0, prompt="hi", info={"k": 1}))
    agent = Agent("a", AgentConfig(model="builtin/echo"), on_close=episode.traces.append)
    async with agent.chat(episode.task) as session:
        await session.turn()
        await session.turn(UserMessage((TextPart("look"), ImagePart("data:image/png;base64,AA"))))
        session.trace.info["note"] = "x"
        session.trace.state["live"] = object()  # never written
    return episode


async def test_trace_record_has_every_persisted_field_in_order() -> None:
    episode = await _episode()
    out = record.unstructure(episode.traces[0])
    assert list(out) == [f.name for f in attrs.fields(Trace) if f.name != "state"]


async def test_episode_record_has_every_field_in_order() -> None:
    episode = await _episode()
    out = record.unstructure(episode)
    assert out["format"] == FORMAT == 3  # the record's format version, then every field
    assert [k for k in out if k != "format"] == [f.name for f in attrs.fields(Episode)]
    assert list(out["timing"]) == [f.name for f in attrs.fields(EpisodeTiming)]


async def test_episode_round_trips_through_a_jsonl_line() -> None:
    episode = await _episode()
    again = loads_episode(dumps_episode(episode))
    (trace,), (back,) = episode.traces, again.traces
    assert back.messages == trace.messages
    assert back.turns == trace.turns
    assert (back.agent, back.episode, back.task) == (trace.agent, trace.episode, trace.task)
    assert (back.rewards, back.metrics, back.info) == (trace.rewards, trace.metrics, trace.info)
    assert back.timing == trace.timing
    assert back.usage == trace.usage
    assert back.state == {}
    assert dumps_episode(again) == dumps_episode(episode)


async def test_keys_that_are_not_strings_are_written_as_strings() -> None:
    episode = await _episode()
    episode.traces[0].info.update({(1, 2): "pair", 3: [{None: 1}], "o": object()})
    info = orjson.loads(dumps_episode(episode))["traces"][0]["info"]
    assert info["(1, 2)"] == "pair"
    assert info["3"] == [{"None": 1}]
    assert info["o"].startswith("<object object")


# -- storage linear in the conversation (format 3) ------------------------------------------


async def _chat_episode(turns: int, size: int = 1000) -> Episode:
    episode = Episode("e/0/0", "e", Task(0, system_prompt="be brief"))
    agent = Agent("a", AgentConfig(model="builtin/echo"), on_close=episode.traces.append)
    async with agent.chat(episode.task) as session:
        for i in range(turns):
            await session.turn(f"{i:04d} " + "x" * size)
    return episode


async def test_a_turn_stores_only_what_is_new_and_readers_rebuild_it_exactly(
    tmp_path: Path,
) -> None:
    episode = await _chat_episode(30)
    line = episode_line(episode)
    raw = orjson.loads(line)
    turns = raw["traces"][0]["turns"]
    assert [t["request_prefix"] for t in turns] == [0] + [2 * i + 1 for i in range(1, 30)]
    assert all(len(t["request"]) == (2 if t["index"] == 0 else 1) for t in turns)
    # every reader rebuilds each turn's full request, exactly as it was sent
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(line + b"\n")
    (back,) = read_episodes(path)
    (trace,) = episode.traces
    for turn, stored in zip(trace.turns, back["traces"][0]["turns"], strict=True):
        assert stored["request"] == [to_wire(m) for m in turn.request]
        assert "request_prefix" not in stored
    assert loads_episode(line).traces[0].turns == trace.turns


async def test_a_30_turn_record_grows_linearly_with_the_conversation() -> None:
    sizes = {n: len(episode_line(await _chat_episode(n))) for n in (15, 30, 60)}
    conversation = len(
        orjson.dumps([to_wire(m) for m in (await _chat_episode(30)).traces[0].messages])
    )
    # each message is stored about twice (the conversation, and once in a turn)
    assert sizes[30] < 2.5 * conversation
    assert 1.8 < sizes[60] / sizes[30] < 2.2  # linear, not quadratic (4x)
    assert 1.8 < sizes[30] / sizes[15] < 2.2


async def test_older_formats_are_still_read(tmp_path: Path) -> None:
    """A format-1 line (full requests, no ``format``, ``cause`` or ``attempts``) reads
    back the same, and its cause is worked out by the outcome rule."""
    episode = await _chat_episode(3, size=10)
    new = orjson.loads(episode_line(episode))
    old = orjson.loads(episode_line(episode))
    for key in ("format", "cause", "attempts"):
        del old[key]
    for turn in old["traces"][0]["turns"]:
        del turn["request_prefix"]
    trace = episode.traces[0]
    for turn, stored in zip(trace.turns, old["traces"][0]["turns"], strict=True):
        stored["request"] = [to_wire(m) for m in turn.request]
    path = tmp_path / "episodes.jsonl"
    path.write_bytes(orjson.dumps(old) + b"\n" + orjson.dumps(new) + b"\n")
    first, second = read_episodes(path)
    assert first["traces"][0]["turns"] == second["traces"][0]["turns"]
    assert record_cause(first) is None
    again = loads_episode(orjson.dumps(old))
    assert again.traces[0].turns == trace.turns
    assert (again.ok, again.cause, again.attempts) == (True, None, 1)
    old["ok"], old["stop"] = False, "episode_timeout"  # format 1 called a timeout not ok
    assert loads_episode(orjson.dumps(old)).ok  # the rule: a timeout is an outcome


def test_a_prefix_pointing_past_the_turn_before_is_a_damaged_line() -> None:
    bad = {"task": {"idx": 0}, "rollout": 0, "traces": [{"turns": [{"request_prefix": 3}]}]}
    assert parse_record(orjson.dumps(bad)) is None


def test_each_checked_field_takes_the_json_types_its_table_names() -> None:
    # parse_record compares exact types (what orjson gives); the answer must be the
    # table's isinstance rule for every JSON value, bool as an int included
    from taketurns._output.records import _EPISODE_TYPES, _TRACE_TYPES

    values = [{}, [], "s", 3, 1.5, True, None]
    for where, types in (("episode", _EPISODE_TYPES), ("trace", _TRACE_TYPES)):
        for key, kinds in types.items():
            for value in values:
                line: dict[str, object] = {"task": {"idx": 0}, "rollout": 0}
                if where == "episode":
                    line[key] = value
                else:
                    line["traces"] = [{key: value}]
                found = parse_record(orjson.dumps(line))
                assert (found is not None) == isinstance(value, kinds), (where, key, value)
    assert parse_record(orjson.dumps({"task": {"idx": 0}, "rollout": 0, "errors": [1]})) is None
