"""kuhn-poker: the rules, the referee and the scoring, driven through the public API
with real agents (the built-in model, or a scripted ``ModelClient``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import attrs
import pytest
import trio

from taketurns import (
    Agent,
    AgentConfig,
    Agents,
    AssistantMessage,
    EnvConfig,
    Episode,
    Limits,
    ModelEndpointError,
    SystemMessage,
    Task,
    Trace,
    UserMessage,
)
from taketurns.env import EpisodeInfo, ModelClient, ModelRequest, ModelResponse, env_registry
from taketurns.envs import kuhn_rules as rules
from taketurns.envs.kuhn import KuhnConfig, KuhnPoker, ask_text
from taketurns.harness import text_of
from taketurns.testing import run_episode

PAIRS = list(itertools.permutations(rules.CARDS, 2))


class Scripted(ModelClient):
    """Answers with the given texts in order; an answer that is an exception (say a
    ``ModelEndpointError``) is raised instead."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return ModelResponse(AssistantMessage(answer))


def task_for(env: KuhnPoker, cards: tuple[str, str]) -> Task:
    """The first of ``env``'s tasks dealing ``cards``."""
    return next(t for t in env.tasks(64) if rules.deal(t.info["seed"]) == cards)


async def play(
    env: KuhnPoker,
    task: Task,
    *,
    p0: ModelClient | None = None,
    p1: ModelClient | None = None,
) -> tuple[Trace, Trace]:
    """Run ``task`` through ``env.run`` directly; the two seats' closed traces."""
    clients = {"player0": p0, "player1": p1}
    closed: dict[str, list[Trace]] = {"player0": [], "player1": []}
    agents = Agents(
        {
            role: Agent(
                role,
                config,
                client=clients[role],
                rubric=env.rubric(role),
                on_close=closed[role].append,
            )
            for role, config in env.roles.items()
        }
    )
    await env.run(task, agents)
    (t0,), (t1,) = closed["player0"], closed["player1"]
    return t0, t1


def factory(
    env: KuhnPoker, clients: dict[str, ModelClient] | None = None
) -> Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]:
    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        client = (clients or {}).get(role)
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    return make


async def episode(env: KuhnPoker, task: Task, **clients: ModelClient) -> dict[int, Trace]:
    ep = Episode(f"kuhn-poker/{task.idx}/0", "kuhn-poker", task)
    await run_episode(env, ep, factory(env, clients))
    assert ep.ok, ep.errors
    assert len(ep.traces) == 2
    return {t.info["seat"]: t for t in ep.traces}


def asks(trace: Trace) -> list[str]:
    return [text_of(m.content) for m in trace.messages if isinstance(m, UserMessage)]


def expected_p0(history: Sequence[str], cards: tuple[str, str]) -> int:
    if history[-1] == "fold":
        return -1 if len(history) == 3 else 1  # check-bet-fold: player0 folded
    stake = 1 if list(history) == ["check", "check"] else 2
    p0_wins = rules.CARDS.index(cards[0]) > rules.CARDS.index(cards[1])
    return stake if p0_wins else -stake


# --- every history, every deal ---------------------------------------------------

HISTORIES = [
    ["check", "check"],
    ["check", "bet", "fold"],
    ["check", "bet", "call"],
    ["bet", "fold"],
    ["bet", "call"],
]


@pytest.mark.parametrize("cards", PAIRS, ids="".join)
@pytest.mark.parametrize("history", HISTORIES, ids=lambda h: "".join(a[0] for a in h))
async def test_every_history_pays_for_every_deal(
    history: list[str], cards: tuple[str, str]
) -> None:
    env = KuhnPoker()
    task = task_for(env, cards)
    p0 = Scripted(*(f"[{a}]" for a in history[0::2]))
    p1 = Scripted(*(f"[{a}]" for a in history[1::2]))
    t0, t1 = await play(env, task, p0=p0, p1=p1)
    payoff = expected_p0(history, cards)
    assert (t0.info["payoff"], t1.info["payoff"]) == (payoff, -payoff)
    assert (t0.reward, t1.reward) == (payoff, -payoff)
    assert t0.rewards == {"payoff": payoff}
    for seat, trace in enumerate((t0, t1)):
        assert trace.info == {
            "seat": seat,
            "card": cards[seat],
            "history": history,
            "seed": task.info["seed"],
            "forfeited": False,
            "payoff": payoff if seat == 0 else -payoff,
        }
        assert trace.metrics == {"forfeit": 0.0}
        assert len(trace.turns) == len(history[seat::2])
        assert trace.stop_condition == "user_closed"


def test_payoffs_by_rule() -> None:
    assert rules.payoffs("KJ", ["check", "check"]) == (1, -1)
    assert rules.payoffs("JK", ["bet", "call"]) == (-2, 2)
    assert rules.payoffs("JK", ["bet", "fold"]) == (1, -1)
    assert rules.payoffs("KJ", ["check", "bet", "fold"]) == (-1, 1)
    assert rules.payoffs("QK", ["check", "bet", "call"]) == (-2, 2)
    assert rules.forfeit_payoffs(1) == (1, -1)
    with pytest.raises(ValueError, match="not over"):
        rules.payoffs("KJ", ["check"])


async def test_asks_list_the_betting_and_the_legal_actions() -> None:
    env = KuhnPoker()
    task = task_for(env, ("J", "K"))
    t0, t1 = await play(env, task, p0=Scripted("[check]", "[fold]"), p1=Scripted("[bet]"))
    assert asks(t0) == [
        "Betting so far: none. Your legal actions: [check] [bet]. "
        "Answer with exactly one bracketed action.",
        "Betting so far: player0 checks, player1 bets. Your legal actions: [fold] [call]. "
        "Answer with exactly one bracketed action.",
    ]
    assert asks(t1) == [
        "Betting so far: player0 checks. Your legal actions: [check] [bet]. "
        "Answer with exactly one bracketed action."
    ]


# --- reading an answer ------------------------------------------------------------

LEGAL_OPEN = ("check", "bet")


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("[bet]", "bet"),
        ("I will [ChEcK].", "check"),
        ("[thinking: a Q is weak] so [check] [gg]", "check"),
        ("[ check ]", "check"),
    ],
)
def test_parse_accepts_one_action(text: str, action: str) -> None:
    assert rules.parse_action(text, LEGAL_OPEN) == action


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("check", "no bracketed action"),
        ("[raise]", "no bracketed action"),
        ("[check] [bet]", "2 different actions"),
        ("[check] or [bet]", "2 different actions"),
        ("[Check] then [BET] then [check]", "2 different actions"),
        ("[BET] because [bet] is strong", r"\[bet\] 2 times; name exactly one"),
        ("[bet] [bet]", r"\[bet\] 2 times"),
        ("[check] [gg] [check] [check]", r"\[check\] 3 times"),
        ("[call]", "call is not a legal action now"),
    ],
)
def test_parse_refuses(text: str, problem: str) -> None:
    with pytest.raises(rules.InvalidAnswer, match=problem):
        rules.parse_action(text, LEGAL_OPEN)


async def test_mixed_case_and_other_brackets_count_in_play() -> None:
    env = KuhnPoker()
    t0, t1 = await play(
        env,
        task_for(env, ("K", "Q")),
        p0=Scripted("[plan] I [Bet]"),
        p1=Scripted("[sigh] [FOLD]"),
    )
    assert t0.info["history"] == ["bet", "fold"]
    assert (t0.info["payoff"], t1.info["payoff"]) == (1, -1)


# --- re-prompts and forfeits ------------------------------------------------------


async def test_invalid_reply_is_reprompted_with_feedback() -> None:
    env = KuhnPoker()  # invalid_retries=1
    t0, t1 = await play(
        env, task_for(env, ("Q", "J")), p0=Scripted("[call]", "[check]"), p1=Scripted("[check]")
    )
    assert asks(t0)[1] == (
        "That answer does not count: call is not a legal action now (1 try left). "
        "Betting so far: none. Your legal actions: [check] [bet]. "
        "Answer with exactly one bracketed action."
    )
    assert t0.info["history"] == ["check", "check"]
    assert (t0.info["payoff"], t1.info["payoff"]) == (1, -1)
    assert t0.metrics == {"forfeit": 0.0}


async def test_a_repeated_action_is_invalid_and_consumes_a_retry() -> None:
    env = KuhnPoker()  # invalid_retries=1
    t0, t1 = await play(
        env, task_for(env, ("K", "J")), p0=Scripted("[bet] [bet]", "[bet]"), p1=Scripted("[fold]")
    )
    assert len(t0.turns) == 2  # the repeat was refused and asked again
    assert asks(t0)[1].startswith(
        "That answer does not count: your answer names [bet] 2 times; name exactly one "
        "bracketed action (1 try left). "
    )
    assert t0.info["history"] == ["bet", "fold"]
    assert (t0.info["payoff"], t1.info["payoff"]) == (1, -1)


async def test_no_retries_forfeits_at_the_first_invalid_reply() -> None:
    env = KuhnPoker(KuhnConfig(invalid_retries=0))
    t0, t1 = await play(env, task_for(env, ("K", "J")), p0=Scripted("I check."))
    assert len(t0.turns) == 1
    assert t1.turns == []  # player1 was never asked
    assert t0.info["history"] == t1.info["history"] == []
    assert (t0.info["forfeited"], t1.info["forfeited"]) == (True, False)
    assert (t0.reward, t1.reward) == (-1.0, 1.0)
    assert (t0.metrics, t1.metrics) == ({"forfeit": 1.0}, {"forfeit": 0.0})


async def test_forfeit_after_the_last_retry() -> None:
    env = KuhnPoker(KuhnConfig(invalid_retries=2))
    p1 = Scripted("[nope]", "[check] or [bet]", "[fold]")
    t0, t1 = await play(env, task_for(env, ("J", "K")), p0=Scripted("[check]"), p1=p1)
    assert len(t1.turns) == 3
    first, second, third = asks(t1)
    assert first == ask_text(["check"])
    assert second.startswith(
        "That answer does not count: your answer has no bracketed action (2 tries left). "
    )
    assert third.startswith(
        "That answer does not count: your answer names 2 different actions (check, bet); "
        "name exactly one bracketed action (1 try left). "
    )
    assert second.endswith(ask_text(["check"]))
    assert third.endswith(ask_text(["check"]))
    assert t1.info["history"] == ["check"]
    assert (t0.info["payoff"], t1.info["payoff"]) == (1, -1)
    assert (t0.info["forfeited"], t1.info["forfeited"]) == (False, True)


async def test_stopped_reply_forfeits() -> None:
    limited = KuhnConfig(player0=AgentConfig(limits=Limits(max_turns=1)))
    env = KuhnPoker(limited)
    t0, t1 = await play(
        env, task_for(env, ("K", "Q")), p0=Scripted("[check]"), p1=Scripted("[bet]")
    )
    assert t0.stop_condition == "max_turns"
    assert t0.info["history"] == ["check", "bet"]
    assert (t0.info["payoff"], t1.info["payoff"]) == (-1, 1)
    assert (t0.metrics, t1.metrics) == ({"forfeit": 1.0}, {"forfeit": 0.0})


async def test_model_error_is_no_forfeit_and_fails_the_episode() -> None:
    """A seat whose endpoint failed did not lose: the hand ends without a result (no
    payoff, no forfeit, no re-prompt) and the episode is recorded failed."""
    env = KuhnPoker(KuhnConfig(invalid_retries=3))
    task = task_for(env, ("J", "Q"))
    t0, t1 = await play(env, task, p0=Scripted(ModelEndpointError("down", status=503)))
    assert t0.stop_condition == "model_error"
    assert len(t0.turns) == 1
    assert "payoff" not in t0.info
    assert "payoff" not in t1.info
    assert (t0.info["forfeited"], t1.info["forfeited"]) == (False, False)
    assert (t0.metrics, t1.metrics) == ({"forfeit": 0.0}, {"forfeit": 0.0})
    assert (t0.reward, t1.reward) == (0.0, 0.0)
    episode = Episode("kuhn-poker/0/0", "kuhn-poker", task)
    episode.traces += [t0, t1]
    episode.settle()
    assert (episode.ok, episode.cause) == (False, "model")


# --- deals --------------------------------------------------------------------------


def test_tasks_are_seeded_and_deterministic() -> None:
    tasks = KuhnPoker().tasks(50)
    assert tasks == KuhnPoker().tasks(50)
    assert tasks[3] == Task(idx=3, name="kuhn-3", prompt=None, info=tasks[3].info)
    assert {rules.deal(t.info["seed"]) for t in tasks} == set(PAIRS)
    other = KuhnPoker(KuhnConfig(seed=7)).tasks(50)
    assert [t.info["seed"] for t in other] != [t.info["seed"] for t in tasks]
    assert len({t.info["seed"] for t in tasks}) == 50


async def test_episodes_are_deterministic_with_the_builtin_model() -> None:
    env = KuhnPoker()
    task = env.tasks(5)[4]
    first, second = await episode(env, task), await episode(env, task)
    assert [t.info for t in first.values()] == [t.info for t in second.values()]
    assert [t.messages for t in first.values()] == [t.messages for t in second.values()]


async def test_200_builtin_episodes_are_zero_sum() -> None:
    env = KuhnPoker()
    histories = set()
    for task in env.tasks(200):
        traces = await episode(env, task)
        assert traces[0].reward + traces[1].reward == 0
        assert traces[0].info["payoff"] + traces[1].info["payoff"] == 0
        assert not traces[0].info["forfeited"]
        assert not traces[1].info["forfeited"]
        assert traces[0].episode == traces[1].episode
        histories.add(tuple(traces[0].info["history"]))
    assert histories <= {tuple(h) for h in HISTORIES}


async def test_seats_alternate_in_virtual_time(autojump_clock: trio.abc.Clock) -> None:
    slow = AgentConfig(model="builtin/bracket?latency_ms=100")
    env = KuhnPoker(KuhnConfig(player0=slow, player1=slow))
    start = trio.current_time()
    traces = await episode(env, env.tasks(1)[0])
    turns = len(traces[0].turns) + len(traces[1].turns)
    assert turns == len(traces[0].info["history"])
    assert trio.current_time() - start == pytest.approx(0.1 * turns)


async def test_per_seat_model_override() -> None:
    # player1 echoes the ask, which names two actions: refused, then forfeit
    env = KuhnPoker(KuhnConfig(player1=AgentConfig(model="builtin/echo")))
    traces = await episode(env, env.tasks(1)[0])
    assert len(traces[0].info["history"]) == 1
    assert traces[1].agent.model == "builtin/echo"
    assert traces[1].info["forfeited"] is True
    assert len(traces[1].turns) == 2
    assert traces[1].reward == -1.0


# --- what each seat sees ----------------------------------------------------------


def system_prompts(trace: Trace) -> set[str]:
    return {
        text_of(m.content)
        for turn in trace.turns
        for m in turn.request
        if isinstance(m, SystemMessage)
    }


@pytest.mark.parametrize("cards", PAIRS, ids="".join)
async def test_each_seat_sees_only_its_own_card(cards: tuple[str, str]) -> None:
    env = KuhnPoker()
    t0, t1 = await play(env, task_for(env, cards), p0=Scripted("[check]"), p1=Scripted("[check]"))
    for seat, trace in enumerate((t0, t1)):
        (prompt,) = system_prompts(trace)
        assert trace.turns[0].request[0] == SystemMessage(prompt)
        assert f"Your card: {cards[seat]}." in prompt
        assert f"Your card: {cards[1 - seat]}" not in prompt
        assert trace.task.prompt is None
        for turn in trace.turns:
            for m in turn.request:
                if not isinstance(m, SystemMessage):
                    assert "card" not in text_of(m.content or "").lower()


async def test_system_prompt_does_not_depend_on_the_other_card() -> None:
    # same seat, same own card, different opponent card: the same prompt
    env = KuhnPoker()
    seen: dict[tuple[int, str], set[str]] = {}
    for cards in PAIRS:
        task = attrs.evolve(task_for(env, cards), idx=7)  # same hand number throughout
        traces = await play(env, task, p0=Scripted("[check]"), p1=Scripted("[check]"))
        for seat, trace in enumerate(traces):
            seen.setdefault((seat, cards[seat]), set()).update(system_prompts(trace))
    assert len(seen) == 6
    assert all(len(prompts) == 1 for prompts in seen.values())


# --- config and registration ------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, True, "x", 1.5, None])
def test_invalid_retries_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid_retries") as info:
        KuhnConfig(invalid_retries=bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)
    assert "an integer >= 0" in str(info.value)


def test_config_fields_and_defaults() -> None:
    config = KuhnConfig()
    assert isinstance(config, EnvConfig)
    assert [f.name for f in attrs.fields(KuhnConfig)] == [
        "player0",
        "player1",
        "invalid_retries",
        "seed",
    ]
    assert config.player0 == config.player1 == AgentConfig()
    assert (config.invalid_retries, config.seed) == (1, None)  # None: the run's --seed
    assert list(KuhnPoker(config).roles) == ["player0", "player1"]
    with pytest.raises(ValueError, match="invalid_retries"):
        attrs.evolve(config, invalid_retries=-2)
    with pytest.raises(ValueError, match="seed"):
        KuhnConfig(seed="0")  # type: ignore[arg-type]


def test_registered_as_kuhn_poker() -> None:
    assert env_registry.get("kuhn-poker") is KuhnPoker
    assert KuhnPoker.id == "kuhn-poker"
