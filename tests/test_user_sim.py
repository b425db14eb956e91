"""``user-sim``: the persona, the relay between a modeled user and the assistant,
masking, the done marker, stops, scoring and the config; driven through
``run_episode`` with scripted models and end to end through ``taketurns eval``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted import ScriptedModel

from taketurns import (
    Agent,
    AgentConfig,
    ConfigError,
    Episode,
    Limits,
    Message,
    ModelEndpointError,
    Resources,
    Task,
    Taskset,
    ToolMessage,
    Trace,
    reward,
)
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient, env_registry
from taketurns.envs.user_sim import (
    DEFAULT_PERSONA,
    GREETING,
    UserAgentConfig,
    UserSim,
    UserSimConfig,
    render_persona,
)
from taketurns.harness import text_of
from taketurns.testing import run_episode

DONE = "###DONE###"
SCENARIO = "You want to know the capital of France; you live in {scenario} street, say {done}."
SYSTEM = "You are a geography helper."


def jsonl(path: Path, *rows: dict[str, Any]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture
def qa(tmp_path: Path) -> str:
    """A jsonl file whose first task's scenario holds both placeholders literally."""
    return jsonl(
        tmp_path / "qa.jsonl",
        {"prompt": SCENARIO, "system_prompt": SYSTEM, "answer": "Paris"},
        {"prompt": [{"role": "user", "content": "You need a refund."}], "answer": "refund"},
        {"prompt": "You want a joke.", "name": "joke"},
    )


def user_sim(path: str, **options: Any) -> UserSim:
    return UserSim(UserSimConfig(taskset={"id": "jsonl", "path": path}, **options))


Factory = Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]


def factory(env: UserSim, clients: dict[str, ModelClient]) -> Factory:
    """Agents as the eval runner builds them (the env picks the harnesses); a role
    without a client runs on its configured built-in model."""

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        config = attrs.evolve(config, harness=config.harness or env.default_harness(role))
        return Agent(
            role,
            config,
            client=clients.get(role),
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    return make


async def play(env: UserSim, task: Task, **clients: ModelClient) -> tuple[Trace, Trace, Episode]:
    """One episode; the (assistant, user) traces and the episode."""
    episode = Episode(f"user-sim/{task.idx}/0", "user-sim", task)
    await run_episode(env, episode, factory(env, clients))
    by_role = {t.agent.name: t for t in episode.traces}
    assert sorted(by_role) == ["assistant", "user"]
    return by_role["assistant"], by_role["user"], episode


def texts(messages: Sequence[Message]) -> list[tuple[str, str]]:
    return [(m.role, text_of(m.content)) for m in messages]


def requested(trace: Trace) -> str:
    """Every text the model of ``trace`` was ever sent."""
    return "\n".join(text_of(m.content) for turn in trace.turns for m in turn.request)


# --- the persona ------------------------------------------------------------------


def test_persona_fills_both_placeholders() -> None:
    assert render_persona("Goal: {scenario}. End: {done}.", scenario="buy milk", done="XX") == (
        "Goal: buy milk. End: XX."
    )


def test_persona_never_rewrites_scenario_text() -> None:
    rendered = render_persona("[{scenario}] then {done}", scenario=SCENARIO, done=DONE)
    assert rendered == f"[{SCENARIO}] then {DONE}"
    marker = "{scenario}!{done}"
    assert render_persona("{done}|{scenario}", scenario="{done}", done=marker) == (
        "{scenario}!{done}|{done}"
    )


def test_persona_leaves_other_braces_alone() -> None:
    template = "{name} {{scenario}} { done } {scenario}{done} {0} {}"
    assert render_persona(template, scenario="S", done="D") == "{name} {S} { done } SD {0} {}"


@given(
    scenario=st.text(alphabet=st.sampled_from("{}scenariodone x\\$0"), max_size=40),
    done=st.text(alphabet=st.sampled_from("{}scenariodone#\\1"), min_size=1, max_size=12),
)
def test_persona_substitution_is_one_pass(scenario: str, done: str) -> None:
    template = "A {scenario} B {done} C {scenario}"
    assert render_persona(template, scenario=scenario, done=done) == (
        f"A {scenario} B {done} C {scenario}"
    )


def test_default_persona_says_how_to_play() -> None:
    persona = render_persona(DEFAULT_PERSONA, scenario="You want a refund.", done=DONE)
    assert "You want a refund." in persona
    assert "role-playing a user (a customer)" in persona
    assert "Do not do the assistant's work yourself" in persona
    assert f"reply with exactly {DONE} and nothing else" in persona
    assert "{" not in persona


def test_user_view_holds_only_the_persona(qa: str) -> None:
    env = user_sim(qa)
    task = env.tasks(1)[0]
    view = env.user_view(task)
    assert view.prompt is None
    assert (view.idx, view.name, view.answer, view.info) == (task.idx, task.name, None, {})
    assert view.system_prompt == render_persona(DEFAULT_PERSONA, scenario=SCENARIO, done=DONE)


# --- the relay --------------------------------------------------------------------


async def test_done_marker_ends_at_once_and_is_not_relayed(qa: str) -> None:
    env = user_sim(qa)
    task = env.tasks(1)[0]
    user = ScriptedModel("What is the capital of France?", f"  {DONE}\n")
    assistant = ScriptedModel("Paris")
    a, u, episode = await play(env, task, user=user, assistant=assistant)
    assert episode.ok, episode.errors
    persona = env.user_view(task).system_prompt
    assert texts(u.messages) == [
        ("system", persona),
        ("user", GREETING),
        ("assistant", "What is the capital of France?"),
        ("user", "Paris"),
        ("assistant", f"  {DONE}\n"),
    ]
    assert texts(a.messages) == [
        ("system", SYSTEM),
        ("user", "What is the capital of France?"),
        ("assistant", "Paris"),
    ]
    assert (len(user.requests), len(assistant.requests)) == (2, 1)
    assert DONE not in requested(a)
    assert (a.stop_condition, u.stop_condition) == ("user_closed", "user_closed")
    assert a.info == {"user_turns": 1, "ended_by": "done"}
    assert u.info == {"ended_by": "done"}


async def test_relay_order_over_several_rounds(qa: str) -> None:
    env = user_sim(qa)
    task = env.tasks(3)[2]
    user = ScriptedModel("u1", "u2", "u3", DONE)
    assistant = ScriptedModel("a1", "a2", "a3")
    a, u, _ = await play(env, task, user=user, assistant=assistant)
    assert texts(u.messages)[1:] == [
        ("user", GREETING),
        ("assistant", "u1"),
        ("user", "a1"),
        ("assistant", "u2"),
        ("user", "a2"),
        ("assistant", "u3"),
        ("user", "a3"),
        ("assistant", DONE),
    ]
    assert texts(a.messages) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u2"),
        ("assistant", "a2"),
        ("user", "u3"),
        ("assistant", "a3"),
    ]
    # each side's k-th request ends with what the other side said last
    assert [texts(r.messages)[-1] for r in user.requests] == [
        ("user", GREETING),
        ("user", "a1"),
        ("user", "a2"),
        ("user", "a3"),
    ]
    assert [texts(r.messages)[-1] for r in assistant.requests] == [
        ("user", "u1"),
        ("user", "u2"),
        ("user", "u3"),
    ]
    assert a.metrics["user_turns"] == 3.0


async def test_a_reply_that_only_contains_the_marker_is_relayed(qa: str) -> None:
    env = user_sim(qa)
    user = ScriptedModel(f"Thanks! {DONE}", DONE)
    a, _, _ = await play(env, env.tasks(3)[2], user=user, assistant=ScriptedModel("bye"))
    assert texts(a.messages) == [("user", f"Thanks! {DONE}"), ("assistant", "bye")]
    assert a.info["ended_by"] == "done"


async def test_custom_marker_greeting_and_persona(qa: str) -> None:
    env = user_sim(qa, done_marker="<end>", greeting="Hi there.", persona="Be: {scenario} / {done}")
    task = env.tasks(3)[2]
    user = ScriptedModel("a joke please", "<end>")
    _, u, _ = await play(env, task, user=user, assistant=ScriptedModel("knock knock"))
    assert texts(u.messages)[:2] == [
        ("system", "Be: You want a joke. / <end>"),
        ("user", "Hi there."),
    ]
    assert u.info["ended_by"] == "done"


# --- masking and scoring ----------------------------------------------------------


async def test_the_scenario_never_reaches_the_assistant(qa: str) -> None:
    env = user_sim(qa)
    task = env.tasks(1)[0]
    a, u, _ = await play(
        env, task, user=ScriptedModel("Capital of France?", DONE), assistant=ScriptedModel("Paris")
    )
    assert SCENARIO in requested(u)
    wire = requested(a)
    assert SCENARIO not in wire
    assert "capital of France;" not in wire
    assert a.masked
    assert a.task.prompt is None
    assert (a.task.idx, a.task.system_prompt) == (task.idx, SYSTEM)
    # ... while the rubric scored the real row (its answer)
    assert a.rewards == {"exact_match": 1.0}
    assert a.metrics == {"contains": 1.0, "user_turns": 1.0, "user_done": 1.0}
    assert a.reward == 1.0


async def test_a_messages_prompt_is_the_scenario_as_text(qa: str) -> None:
    env = user_sim(qa)
    task = env.tasks(2)[1]
    a, u, _ = await play(
        env, task, user=ScriptedModel("Money back, please", DONE), assistant=ScriptedModel("ok")
    )
    assert "You need a refund." in text_of(u.messages[0].content)
    assert "You need a refund." not in requested(a)
    assert a.rewards == {"exact_match": 0.0}


async def test_the_user_gets_no_rewards_and_is_not_trainable(qa: str) -> None:
    env = user_sim(qa)
    _, u, _ = await play(env, env.tasks(1)[0], user=ScriptedModel(DONE))
    assert (u.rewards, u.metrics, u.reward) == ({}, {}, 0.0)
    assert u.agent.trainable is False
    assert u.agent.harness == "null"


class Lamps(Taskset):
    """Task i: turn on lamp i with a ``switch_on`` tool over a per-rollout store."""

    harness = "tools"

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, prompt=f"You want lamp {i} on.", answer=i) for i in range(num_tasks)]

    def resources(self, task: Task) -> Resources:
        lit: set[int] = set()

        def switch_on(lamp: int) -> str:
            """Turn one lamp on."""
            lit.add(lamp)
            return f"lamp {lamp} is on"

        return Resources(tools=(switch_on,), state={"lit": lit})

    @reward
    def lit_right(self, task: Task, trace: Trace) -> float:
        return float(trace.state["lit"] == {task.answer})


async def test_assistant_uses_the_tasksets_tools_mid_conversation() -> None:
    env = UserSim(UserSimConfig(taskset=Lamps(), assistant=AgentConfig(model="builtin/tools")))
    task = env.tasks(3)[2]
    user = ScriptedModel("Please turn on lamp 2.", DONE)
    a, u, episode = await play(env, task, user=user)
    assert episode.ok, episode.errors
    assert a.agent.harness == "tools"
    assert a.state["lit"] == {2}
    assert any(isinstance(m, ToolMessage) for m in a.messages)
    assert texts(u.messages)[3] == ("user", "The tool said: lamp 2 is on")
    assert a.rewards == {"lit_right": 1.0}
    assert a.metrics == {"user_turns": 1.0, "user_done": 1.0}


# --- stops ------------------------------------------------------------------------


async def test_assistant_stopped_by_max_turns_ends_the_episode_cleanly(qa: str) -> None:
    env = user_sim(qa, assistant=AgentConfig(limits=Limits(max_turns=1)))
    user = ScriptedModel("u1", "u2", "u3")
    a, u, episode = await play(env, env.tasks(3)[2], user=user, assistant=ScriptedModel("a1"))
    assert episode.ok
    assert episode.errors == []
    assert texts(a.messages) == [("user", "u1"), ("assistant", "a1"), ("user", "u2")]
    assert texts(u.messages)[-1] == ("assistant", "u2")  # nothing relayed after the stop
    assert len(user.requests) == 2
    assert (a.stop_condition, u.stop_condition) == ("max_turns", "user_closed")
    assert a.info == {"user_turns": 2, "ended_by": "assistant_stopped"}
    assert a.metrics["user_done"] == 0.0
    assert a.errors == u.errors == []


async def test_assistant_model_error_ends_the_conversation(qa: str) -> None:
    env = user_sim(qa)
    assistant = ScriptedModel(ModelEndpointError("down"))
    a, u, episode = await play(
        env, env.tasks(1)[0], user=ScriptedModel("hi", "hello?"), assistant=assistant
    )
    assert (episode.ok, episode.cause) == (False, "model")  # not the model's behaviour
    assert a.stop_condition == "model_error"
    assert u.info["ended_by"] == "assistant_stopped"
    assert len(u.turns) == 1


async def test_user_failing_at_once_leaves_an_empty_scored_assistant_trace(qa: str) -> None:
    env = user_sim(qa)
    user = ScriptedModel(ModelEndpointError("down"))
    assistant = ScriptedModel()
    a, u, episode = await play(env, env.tasks(1)[0], user=user, assistant=assistant)
    assert (episode.ok, episode.cause) == (False, "model")  # the user's endpoint failed
    assert u.stop_condition == "model_error"
    assert assistant.requests == []
    assert a.turns == []
    assert a.info == {"user_turns": 0, "ended_by": "user_stopped"}
    assert a.rewards == {"exact_match": 0.0}
    assert a.metrics == {"contains": 0.0, "user_turns": 0.0, "user_done": 0.0}


async def test_builtin_user_runs_to_the_cap_and_ends_cleanly(qa: str) -> None:
    env = user_sim(qa)
    a, u, episode = await play(env, env.tasks(1)[0])
    assert episode.ok
    assert episode.errors == []
    assert (len(u.turns), len(a.turns)) == (8, 8)
    assert u.stop_condition == "max_turns"
    assert a.stop_condition == "user_closed"
    assert a.info == {"user_turns": 8, "ended_by": "user_stopped"}
    assert a.errors == u.errors == []


async def test_user_max_turns_is_the_conversation_cap(qa: str) -> None:
    env = user_sim(
        qa, user=UserAgentConfig(limits=attrs.evolve(UserAgentConfig().limits, max_turns=3))
    )
    a, u, _ = await play(env, env.tasks(1)[0])
    assert (len(u.turns), len(a.turns)) == (3, 3)


async def test_a_prompt_less_task_fails_its_episode_clearly() -> None:
    class Blank(Taskset):
        def tasks(self, num_tasks: int) -> list[Task]:
            return [Task(0)]

    env = UserSim(UserSimConfig(taskset=Blank()))
    episode = await run_episode(env, Episode("user-sim/0/0", "user-sim", Task(0)), factory(env, {}))
    assert not episode.ok
    assert episode.traces == []  # refused before any session opened
    assert "user-sim needs a prompted task" in episode.errors[0].message


# --- config -----------------------------------------------------------------------


def test_config_defaults(qa: str) -> None:
    config = UserSimConfig()
    assert [f.name for f in attrs.fields(UserSimConfig)] == [
        "taskset",
        "assistant",
        "user",
        "persona",
        "done_marker",
        "greeting",
        "judge",
    ]
    assert config.user.trainable is False
    assert config.user.limits.max_turns == 8
    assert config.assistant == AgentConfig()
    assert (config.persona, config.done_marker, config.greeting) == (
        DEFAULT_PERSONA,
        DONE,
        GREETING,
    )
    env = user_sim(qa)
    assert list(env.roles) == ["assistant", "user"]
    assert (env.default_harness("assistant"), env.default_harness("user")) == ("null", "null")
    assert UserSim(UserSimConfig(taskset=Lamps())).default_harness("assistant") == "tools"
    assert env_registry.get("user-sim") is UserSim


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("done_marker", "", "a non-empty string"),
        ("done_marker", " \n", "a non-empty string"),
        ("greeting", "", "a non-empty string"),
        ("persona", "You want: {scenario}", "a template containing {scenario}"),
        ("persona", "Say {done}", "a template containing {scenario}"),
    ],
)
def test_bad_options_are_refused_in_python(option: str, value: str, accepted: str) -> None:
    with pytest.raises(ValueError, match=option) as info:
        UserSimConfig(**{option: value})
    assert accepted in str(info.value)


def test_missing_taskset_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"env.taskset: name a taskset"):
        UserSim()


# --- end to end -------------------------------------------------------------------


def episodes(out: Path) -> list[dict[str, Any]]:
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda e: e["task"]["idx"])


def eval_user_sim(qa: str, out: Path, *args: str) -> int:
    base = ["eval", "user-sim", "--env.taskset=jsonl", "--env.taskset.path", qa, "-o", str(out)]
    return main([*base, *args, "--no-progress"])


def test_eval_user_sim_over_jsonl(qa: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert eval_user_sim(qa, out, "-n", "3") == 0
    found = episodes(out)
    assert [e["task"]["idx"] for e in found] == [0, 1, 2]
    for e in found:
        assert e["ok"]
        assert e["errors"] == []
        assert e["env"] == "user-sim"
        a, u = e["traces"]
        assert (a["agent"]["name"], u["agent"]["name"]) == ("assistant", "user")
        assert (a["agent"]["trainable"], u["agent"]["trainable"]) == (True, False)
        assert a["rewards"] == {"exact_match": 0.0}
        assert a["metrics"] == {"contains": 0.0, "user_turns": 8.0, "user_done": 0.0}
        assert (u["rewards"], u["metrics"]) == ({}, {})
        assert (a["stop_condition"], u["stop_condition"]) == ("user_closed", "max_turns")
        assert a["task"]["prompt"] is None
        assert len(u["turns"]) == 8
        wire = json.dumps([turn["request"] for turn in a["turns"]])
        assert "capital of France" not in wire
        assert "refund" not in wire
        assert "joke" not in wire
        assert a["errors"] == u["errors"] == []


def test_partial_user_override_keeps_the_user_defaults(qa: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert eval_user_sim(qa, out, "-n", "1", "--env.user.model=builtin/echo") == 0
    (e,) = episodes(out)
    _, u = e["traces"]
    assert u["agent"] == {
        "name": "user",
        "model": "builtin/echo",
        "harness": "null",
        "trainable": False,
    }
    assert len(u["turns"]) == 8


def test_user_max_turns_option(qa: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert eval_user_sim(qa, out, "-n", "1", "--env.user.limits.max_turns=2") == 0
    (e,) = episodes(out)
    assert [len(t["turns"]) for t in e["traces"]] == [2, 2]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env.done_marker="], "env.done_marker = '': expected a non-empty string"),
        (["--env.done_marker", "  "], "env.done_marker = '  ': expected a non-empty string"),
        (["--env.greeting="], "env.greeting = '': expected a non-empty string"),
        (["--env.persona=Hi {scenario}"], "env.persona = 'Hi {scenario}': expected a template"),
        (["--env.user.limits.max_turns=0"], "env.user.limits.max_turns = 0: expected"),
        (["--env.taskset.path=missing.jsonl"], "env.taskset.path = 'missing.jsonl'"),
        (["--env.taskset=nope"], "env.taskset.id: unknown taskset 'nope'"),
        (["--env.mood=grumpy"], "env.mood: unknown option"),
    ],
)
def test_bad_options_are_refused_before_any_episode(
    qa: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    assert eval_user_sim(qa, out, "-n", "1", *args) == 2
    # compared with whitespace runs collapsed: the console wraps long lines
    assert " ".join(needle.split()) in " ".join(capsys.readouterr().err.split())
    assert not out.exists()


def test_user_sim_without_a_taskset_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["eval", "user-sim", "-o", str(out), "--no-progress"]) == 2
    assert "env.taskset: name a taskset" in " ".join(capsys.readouterr().err.split())
