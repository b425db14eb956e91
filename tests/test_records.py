"""The JSONL record: its hand-written trace writer stays in step with ``Trace``."""

from __future__ import annotations

import attrs
import orjson

from taketurns import Agent, AgentConfig, ImagePart, Task, TextPart, Trace, UserMessage
from taketurns._eval.episode import Episode, EpisodeTiming
from taketurns._output.records import FORMAT, dumps_episode, loads_episode, record


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
    assert out["format"] == FORMAT == 2  # the record's format version, then every field
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
