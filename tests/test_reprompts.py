"""``taketurns.envs.reprompts``: the re-prompt rule shared by the two-player games,
driven through a real chat session with a scripted model (``taketurns.testing``)."""

from __future__ import annotations

import pytest

from taketurns import Agent, AgentConfig, ModelEndpointError, Task, UserMessage
from taketurns.env import ModelClient
from taketurns.envs.reprompts import Answer, ask, feedback, retries_text
from taketurns.harness import text_of
from taketurns.testing import ScriptedModel


def number(text: str) -> int:
    """The reply as a whole number; ``ValueError`` (saying why) otherwise."""
    if not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a number")
    return int(text)


async def asking(client: ModelClient, retries: int) -> tuple[Answer[int], list[str]]:
    """``ask`` one question on a fresh session; the answer and what was sent."""
    agent = Agent("seat", AgentConfig(), client=client)
    async with agent.chat(Task(idx=0, name="t", prompt=None)) as session:
        answer = await ask(session, "How many?", number, retries=retries)
        sent = [text_of(m.content) for m in session.trace.messages if isinstance(m, UserMessage)]
    return answer, sent


async def test_an_answer_that_counts_after_a_reprompt() -> None:
    answer, sent = await asking(ScriptedModel("many", "3"), retries=1)
    assert answer == Answer(3, turn=1)
    assert (answer.forfeited, answer.failed) == (False, False)
    assert sent == [
        "How many?",
        "That answer does not count: 'many' is not a number (1 try left). How many?",
    ]


@pytest.mark.parametrize("retries", [0, 2])
async def test_the_seat_forfeits_past_its_retries(retries: int) -> None:
    answer, sent = await asking(ScriptedModel(*["lots"] * (retries + 1)), retries=retries)
    assert answer == Answer(None, turn=retries)
    assert answer.forfeited
    assert len(sent) == retries + 1
    if retries == 2:
        assert "(2 tries left)" in sent[1]
        assert "(1 try left)" in sent[2]


async def test_a_failed_endpoint_is_no_forfeit() -> None:
    answer, _ = await asking(ScriptedModel(ModelEndpointError("down", status=503)), retries=1)
    assert answer.failed
    assert not answer.forfeited
    assert answer.value is None


def test_the_texts() -> None:
    assert [retries_text(n) for n in (0, 1, 2)] == ["0 retries", "1 retry", "2 retries"]
    assert (
        feedback("no move", 2, "Move?")
        == "That answer does not count: no move (2 tries left). Move?"
    )
