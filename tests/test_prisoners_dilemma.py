"""``prisoners-dilemma``: simultaneous moves (both seats asked at once, neither prompt
ever holds the other's move of the same round, at any concurrency), payoffs paid per
round through per-turn rewards, Kuhn's retry and failure rules."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taketurns import (
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
from taketurns._output.records import record
from taketurns.env import EpisodeInfo, ModelClient, ModelRequest, ModelResponse, env_registry
from taketurns.envs.prisoners_dilemma import (
    MOVES,
    PAYOFFS,
    PrisonersDilemma,
    PrisonersDilemmaConfig,
    parse_move,
)
from taketurns.harness import messages_to_wire, text_of
from taketurns.testing import run_episode

ROUND = re.compile(r"Round (\d+) of \d+\.")
REVEAL = re.compile(r"Round (\d+) result: you played (\w+), your opponent played (\w+);")


class Seat(ModelClient):
    """One seat's scripted answers, one list per round (refused answers, then the
    move). The first call of a round waits until the other seat's first call of that
    round has arrived too: an env that asked the seats one after the other would
    deadlock here (a ``fail_after`` under the autojump clock turns that into a
    failure)."""

    def __init__(self, script: Sequence[Sequence[str]], arrived: dict[int, trio.Event]) -> None:
        self.script = [list(answers) for answers in script]
        self.arrived = arrived
        self.peer: Seat | None = None
        self.rounds: set[int] = set()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        number = int(ROUND.findall(text_of(request.messages[-1].content))[-1])
        if number not in self.rounds:
            self.rounds.add(number)
            mine = self.arrived.setdefault(id(self) * 1000 + number, trio.Event())
            mine.set()
            assert self.peer is not None
            theirs = self.arrived.setdefault(id(self.peer) * 1000 + number, trio.Event())
            await theirs.wait()
        await trio.lowlevel.checkpoint()
        return ModelResponse(AssistantMessage(self.script[number - 1].pop(0)))


def factory(
    env: PrisonersDilemma, clients: dict[str, ModelClient]
) -> Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]:
    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        return Agent(
            role,
            config,
            client=clients.get(role),
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    return make


def seats(script0: Sequence[Sequence[str]], script1: Sequence[Sequence[str]]) -> dict[str, Seat]:
    arrived: dict[int, trio.Event] = {}
    s0, s1 = Seat(script0, arrived), Seat(script1, arrived)
    s0.peer, s1.peer = s1, s0
    return {"player0": s0, "player1": s1}


async def play(env: PrisonersDilemma, task: Task, clients: dict[str, Seat]) -> Episode:
    episode = Episode(f"prisoners-dilemma/{task.idx}/0", "prisoners-dilemma", task)
    await run_episode(env, episode, factory(env, dict(clients)))
    return episode


def by_seat(episode: Episode) -> dict[int, Trace]:
    return {t.info["seat"]: t for t in episode.traces}


def assert_no_same_round_leak(
    traces: dict[int, Trace], secrets: dict[int, dict[int, list[str]]] | None = None
) -> None:
    """Every model call of every seat, read as the whole wire conversation it sent:
    it is in some round r, reveals exactly the rounds before r (the latest one in its
    last message), each reveal true to both seats' moves, and holds no text the other
    seat wrote in round r or later (``secrets[seat][round]``)."""
    moves = {seat: t.info["moves"] for seat, t in traces.items()}
    for seat, trace in traces.items():
        other = 1 - seat
        for turn in trace.turns:
            wire = json.dumps(messages_to_wire(turn.request))
            number = int(ROUND.findall(wire)[-1])
            revealed = REVEAL.findall(wire)
            assert {int(k) for k, _, _ in revealed} == set(range(1, number))
            for k, mine, theirs in revealed:
                assert (mine, theirs) == (moves[seat][int(k) - 1], moves[other][int(k) - 1])
            last = text_of(turn.request[-1].content)
            if number > 1:
                assert f"Round {number - 1} result:" in last
            for later, texts in (secrets or {}).get(other, {}).items():
                if later >= number:
                    assert not any(text in wire for text in texts), (seat, number, later)


# --- the property: no same-round leak, both seats asked at once ------------------


def scripted_game(moves: Sequence[tuple[str, str, int, int]]) -> tuple[list, list, dict]:
    """Scripts for both seats from (move0, move1, refused0, refused1) per round: each
    answer carries a text unique to its seat and round, so a leak of the raw reply
    would show."""
    scripts: list[list[list[str]]] = [[], []]
    secrets: dict[int, dict[int, list[str]]] = {0: {}, 1: {}}
    for number, (m0, m1, bad0, bad1) in enumerate(moves, 1):
        for seat, move, bad in ((0, m0, bad0), (1, m1, bad1)):
            tag = f"secret-s{seat}-r{number}"
            answers = [f"maybe {tag}-{i}" for i in range(bad)] + [f"[{move}] {tag}"]
            scripts[seat].append(answers)
            secrets[seat][number] = answers
    return scripts[0], scripts[1], secrets


ROUND_PLAN = st.tuples(
    st.sampled_from(MOVES), st.sampled_from(MOVES), st.integers(0, 1), st.integers(0, 1)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    games=st.lists(st.lists(ROUND_PLAN, min_size=1, max_size=6), min_size=1, max_size=8),
    concurrency=st.sampled_from([1, 64]),
)
def test_no_prompt_holds_the_other_seats_move_of_the_same_round(
    games: list[list[tuple[str, str, int, int]]], concurrency: int
) -> None:
    async def main() -> None:
        limiter = trio.CapacityLimiter(concurrency)
        done: list[tuple[Episode, list[tuple[str, str, int, int]], dict]] = []

        async def one(idx: int, plan: list[tuple[str, str, int, int]]) -> None:
            env = PrisonersDilemma(PrisonersDilemmaConfig(rounds=len(plan)))
            script0, script1, secrets = scripted_game(plan)
            async with limiter:
                episode = await play(env, Task(idx, f"pd-{idx}", None), seats(script0, script1))
            done.append((episode, plan, secrets))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for idx, plan in enumerate(games):
                    nursery.start_soon(one, idx, plan)
        assert len(done) == len(games)
        for episode, plan, secrets in done:
            assert episode.ok, episode.errors
            traces = by_seat(episode)
            assert traces[0].info["moves"] == [m0 for m0, _, _, _ in plan]
            assert traces[1].info["moves"] == [m1 for _, m1, _, _ in plan]
            assert_no_same_round_leak(traces, secrets)
            for seat, trace in traces.items():
                paid = [PAYOFFS[(p[seat], p[1 - seat])] for p in plan]
                assert [r.value for r in trace.turn_rewards] == paid
                assert trace.reward == sum(paid)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("concurrency", [1, 64])
async def test_eval_at_any_concurrency_leaks_no_same_round_move(
    tmp_path: Path, concurrency: int
) -> None:
    """The built-in model through ``run_eval``, read back from ``episodes.jsonl``."""
    config = EvalConfig(
        env_id="prisoners-dilemma",
        num_tasks=64,
        concurrency=concurrency,
        env=PrisonersDilemmaConfig(rounds=4),
    )
    run = await run_eval(config, RunDir(tmp_path), progress=False, report=False)
    assert run.written == 64
    episodes = [record.structure(e, Episode) for e in read_episodes(tmp_path / "episodes.jsonl")]
    assert len(episodes) == 64
    for episode in episodes:
        assert episode.ok, episode.errors
        traces = by_seat(episode)
        assert [len(t.turns) for t in traces.values()] == [4, 4]
        assert_no_same_round_leak(traces)
        for trace in traces.values():
            assert [r.turn for r in trace.turn_rewards] == [0, 1, 2, 3]
            assert trace.rewards == {"payoff": trace.turn_reward_total("round")}


async def test_the_seats_move_at_the_same_time(autojump_clock: trio.abc.Clock) -> None:
    slow = AgentConfig(model="builtin/bracket?latency_ms=100")
    env = PrisonersDilemma(PrisonersDilemmaConfig(player0=slow, player1=slow, rounds=5))
    start = trio.current_time()
    episode = Episode("prisoners-dilemma/0/0", "prisoners-dilemma", env.tasks(1)[0])
    await run_episode(env, episode, factory(env, {}))
    assert episode.ok
    assert trio.current_time() - start == pytest.approx(0.5)  # 5 rounds, not 10 calls


# --- payoffs, retries, forfeits, failures ------------------------------------------


@pytest.mark.parametrize(("m0", "m1"), [(a, b) for a in MOVES for b in MOVES])
async def test_each_round_pays_both_seats_on_the_turn_that_moved(m0: str, m1: str) -> None:
    env = PrisonersDilemma(PrisonersDilemmaConfig(rounds=2))
    episode = await play(
        env,
        Task(0, "pd-0", None),
        seats([[f"[{m0}]"], ["[cooperate]"]], [[f"[{m1}]"], ["x", "[defect]"]]),
    )
    t0, t1 = (by_seat(episode)[seat] for seat in (0, 1))
    assert [(r.turn, r.value, r.name) for r in t0.turn_rewards] == [
        (0, PAYOFFS[(m0, m1)], "round"),
        (1, 0.0, "round"),
    ]
    # seat 1 was refused once in round 2: its move is its third turn
    assert [(r.turn, r.value) for r in t1.turn_rewards] == [(0, PAYOFFS[(m1, m0)]), (2, 5.0)]
    assert (t0.reward, t1.reward) == (PAYOFFS[(m0, m1)], PAYOFFS[(m1, m0)] + 5.0)
    assert (t0.metrics["cooperation"], t1.metrics["cooperation"]) == (
        (m0 == "cooperate") / 2 + 0.5,
        (m1 == "cooperate") / 2,
    )
    assert "That answer does not count" in text_of(t1.turns[2].request[-1].content)


async def test_forfeit_after_the_last_retry_ends_the_game() -> None:
    env = PrisonersDilemma(PrisonersDilemmaConfig(rounds=3, invalid_retries=1))
    episode = await play(
        env,
        Task(0, "pd-0", None),
        seats([["[cooperate]"], ["[defect]"]], [["[cooperate]"], ["no", "[cooperate] [defect]"]]),
    )
    assert episode.ok
    t0, t1 = (by_seat(episode)[seat] for seat in (0, 1))
    assert (t0.info["forfeited"], t1.info["forfeited"]) == (False, True)
    assert (t0.metrics["forfeit"], t1.metrics["forfeit"]) == (0.0, 1.0)
    assert [r.value for r in t0.turn_rewards] == [3.0, 5.0]
    assert [(r.turn, r.value) for r in t1.turn_rewards] == [(0, 3.0), (2, -1.0)]
    assert (t0.reward, t1.reward) == (8.0, 2.0)
    assert len(t0.turns) == 2  # round 3 was never asked


async def test_model_error_is_no_forfeit_and_fails_the_episode() -> None:
    class Down(ModelClient):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            raise ModelEndpointError("down", status=503)

    env = PrisonersDilemma(PrisonersDilemmaConfig(rounds=3, invalid_retries=3))
    episode = Episode("prisoners-dilemma/0/0", "prisoners-dilemma", Task(0, "pd-0", None))
    await run_episode(env, episode, factory(env, {"player1": Down()}))
    t0, t1 = (by_seat(episode)[seat] for seat in (0, 1))
    assert (episode.ok, episode.cause) == (False, "model")
    assert (t1.stop_condition, len(t1.turns)) == ("model_error", 1)
    assert (t0.info["forfeited"], t1.info["forfeited"]) == (False, False)
    assert (t0.turn_rewards, t1.turn_rewards) == ([], [])
    assert (t0.reward, t1.reward) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("[defect]", "defect"),
        ("I will [Cooperate].", "cooperate"),
        ("[ defect ] [maybe]", "defect"),
    ],
)
def test_parse_accepts_one_move(text: str, move: str) -> None:
    assert parse_move(text) == move


@pytest.mark.parametrize("text", ["defect", "[cooperate] or [defect]", "[defect][defect]", ""])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"\[cooperate\] or \[defect\]"):
        parse_move(text)


# --- registration and config ---------------------------------------------------------


def test_registered_with_its_config() -> None:
    env_cls = env_registry.get("prisoners-dilemma")
    assert env_cls is PrisonersDilemma
    config = PrisonersDilemmaConfig()
    assert (config.rounds, config.invalid_retries) == (5, 1)
    assert set(PrisonersDilemma(config).roles) == {"player0", "player1"}
    tasks = PrisonersDilemma(config).tasks(3)
    assert [t.name for t in tasks] == ["pd-0", "pd-1", "pd-2"]
    assert attrs.evolve(config, rounds=2).rounds == 2


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.5, True])
def test_rounds_is_validated(bad: object) -> None:
    with pytest.raises(OptionError, match="rounds"):
        PrisonersDilemmaConfig(rounds=bad)  # type: ignore[arg-type]
