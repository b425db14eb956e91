"""Regression guards that count work instead of timing it (benchmarks/ measures time):
model calls per turn, wire conversions per record, conversation copies, scheduler
steps per turn, cancel scopes per session."""

from __future__ import annotations

import gc

import trio
import trio.abc

import taketurns._output.records
from taketurns import Agent, AgentConfig, Task, UserMessage
from taketurns._eval.episode import Episode
from taketurns._output.records import dumps_episode


class Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


def _agent(**kwargs) -> Agent:
    return Agent("a", AgentConfig(model="builtin/echo"), **kwargs)


async def test_one_model_call_per_turn_and_requests_share_message_objects() -> None:
    agent = _agent()
    async with agent.chat(Task(0, system_prompt="be brief")) as session:
        for i in range(5):
            await session.turn(f"message {i}")
    trace = session.trace
    assert len(trace.turns) == 5
    conversation = trace.messages
    for turn in trace.turns:
        # the request is the conversation so far: the same objects, never copies
        assert all(sent is kept for sent, kept in zip(turn.request, conversation, strict=False))


async def test_scheduler_steps_per_turn_are_bounded() -> None:
    steps = Steps()
    agent = _agent()
    session = agent.chat(Task(0))
    await session.turn("warm up")
    trio.lowlevel.add_instrument(steps)
    try:
        for i in range(100):
            await session.turn(f"again {i}")
    finally:
        trio.lowlevel.remove_instrument(steps)
    await session.close()
    # two schedule points per turn: the session lock's acquire (it always yields, taken
    # or not: issue 23) and the model call
    assert steps.steps <= 100 * 2 + 1


async def test_close_of_a_synchronous_rubric_takes_one_step() -> None:
    steps = Steps()
    sessions = [_agent().chat(Task(i)) for i in range(50)]
    for s in sessions:
        await s.turn("hi")
    trio.lowlevel.add_instrument(steps)
    try:
        for s in sessions:
            await s.close()
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert steps.steps <= 50 + 1


async def test_each_message_is_converted_to_wire_once_per_trace(monkeypatch) -> None:
    calls = []
    real = taketurns._output.records.to_wire

    def counting(message):
        calls.append(message)
        return real(message)

    monkeypatch.setattr(taketurns._output.records, "to_wire", counting)
    episode = Episode("e/0/0", "e", Task(0))
    agent = _agent(on_close=episode.traces.append)
    async with agent.chat(Task(0, system_prompt="sys")) as session:
        for i in range(10):
            await session.turn(UserMessage(f"m{i}"))
    dumps_episode(episode)
    distinct = {id(m) for m in session.trace.messages}
    # 10 turns sent 2+4+...+20 messages; each distinct object is converted once
    assert len(calls) == len(distinct) == 21


async def _cyclic_garbage_after(episodes: int, tmp_path) -> int:
    from taketurns import RunDir, load_eval_config, run_eval
    from taketurns._config.registry import envs

    data = {"env_id": "kuhn-poker", "num_tasks": episodes, "concurrency": 8}
    config = load_eval_config(envs.get("kuhn-poker").config_class, file_data=data)
    tmp_path.mkdir()
    gc.collect()
    gc.disable()
    try:
        await run_eval(config, RunDir(tmp_path), progress=False, report=False)
        return gc.collect()
    finally:
        gc.enable()


async def test_episodes_leave_no_cyclic_garbage(tmp_path) -> None:
    # the CLI collects rarely while episodes run (taketurns._gc.tuned_gc): that is
    # only cheap while an episode's objects are freed by reference counting alone
    few = await _cyclic_garbage_after(20, tmp_path / "few")
    many = await _cyclic_garbage_after(220, tmp_path / "many")
    assert many - few < 100, (few, many)  # cycles per episode would add >= 200
