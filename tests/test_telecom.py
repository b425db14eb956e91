"""``telecom-lite``: the shared world keeps its invariants under any tool calls of
both seats, both seats' calls land interleaved in one attributed log kept on both
traces, the reward is read from the final world, and ``taketurns eval`` runs it
with no flags on the built-in model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from taketurns import Agent, AgentConfig, Episode, OptionError, Trace
from taketurns._cli.main import main
from taketurns.envs.telecom import KINDS, TelecomConfig, TelecomLite, make_world
from taketurns.envs.telecom_world import BackOffice, Device, World
from taketurns.harness import env_registry
from taketurns.testing import run_episode

NUMBER = "555-0101"
CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("assistant"), st.sampled_from(["look_up_line", "resume_line"])).map(
            lambda c: (*c, {"phone_number": NUMBER})
        ),
        st.tuples(
            st.just("assistant"),
            st.just("change_plan"),
            st.fixed_dictionaries(
                {
                    "phone_number": st.sampled_from([NUMBER, "555-9999"]),
                    "plan": st.sampled_from(["basic", "unlimited", "gold"]),
                }
            ),
        ),
        st.tuples(st.just("assistant"), st.just("reset_line"), st.just({"phone_number": NUMBER})),
        st.tuples(
            st.just("user"),
            st.sampled_from(
                ["read_status_bar", "toggle_airplane_mode", "toggle_mobile_data", "restart_device"]
            ),
            st.just({}),
        ),
    ),
    max_size=30,
)


@given(kind=st.sampled_from(KINDS), calls=CALLS)
def test_any_calls_of_both_seats_keep_the_invariants_and_are_logged_in_order(
    kind: str, calls: list[tuple[str, str, dict[str, Any]]]
) -> None:
    world = make_world(kind, NUMBER)
    world.check()
    sides = {"assistant": BackOffice(world), "user": Device(world)}
    for seat, tool, args in calls:
        getattr(sides[seat], tool)(**args)
        world.check()
    assert [(e["seat"], e["tool"]) for e in world.log] == [(s, t) for s, t, _ in calls]


def test_a_bad_argument_changes_nothing() -> None:
    world = make_world("data", NUMBER)
    before = attrs.asdict(world, filter=lambda a, v: a.name != "log")
    assert BackOffice(world).change_plan(NUMBER, "gold").startswith("Error: no plan 'gold'")
    assert BackOffice(world).reset_line("555-9999").startswith("Error: no line")
    assert attrs.asdict(world, filter=lambda a, v: a.name != "log") == before


@pytest.mark.parametrize(
    "break_it",
    [
        lambda w: setattr(w.line, "plan", "gold"),
        lambda w: setattr(w.line, "status", "lost"),
        lambda w: setattr(w.line, "data_used_gb", -1.0),
        lambda w: (setattr(w.line, "provisioned", False), setattr(w.device, "needs_restart", True)),
    ],
)
def test_check_refuses_a_broken_world(break_it: Any) -> None:
    world = make_world("suspended", NUMBER)
    break_it(world)
    with pytest.raises(AssertionError):
        world.check()


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_needs_both_sides(kind: str) -> None:
    """Neither seat's tools alone restore service; the back office's step, then the
    device's, does."""
    for seat in ("assistant", "user"):
        world = make_world(kind, NUMBER)
        side = BackOffice(world) if seat == "assistant" else Device(world)
        for tool in side.all():
            args = {"phone_number": NUMBER} if seat == "assistant" else {}
            if tool.__name__ == "change_plan":
                args["plan"] = "unlimited"
            tool(**args)
            assert not world.data_works(), (kind, seat, tool.__name__)


def factory(env: TelecomLite, models: dict[str, str]) -> Any:
    def make(role: str, config: AgentConfig, info: Any, on_close: Any) -> Agent:
        config = attrs.evolve(config, model=models.get(role, config.model), harness="tools")
        return Agent(role, config, episode=info, rubric=env.rubric(role), on_close=on_close)

    return make


async def play(kind: str, models: dict[str, str] | None = None) -> Episode:
    env = TelecomLite(TelecomConfig(kinds=kind))
    task = env.tasks(1)[0]
    episode = Episode(f"telecom-lite/{task.idx}/0", "telecom-lite", task)
    await run_episode(env, episode, factory(env, models or {}))
    return episode


def trace_of(episode: Episode, role: str) -> Trace:
    return next(t for t in episode.traces if t.agent.name == role)


@pytest.mark.parametrize("kind", KINDS)
async def test_both_seats_calls_interleave_in_one_attributed_log(kind: str) -> None:
    episode = await play(kind)
    assert episode.ok, episode.errors
    user, assistant = (trace_of(episode, r) for r in ("user", "assistant"))
    log = user.info["log"]
    assert log is assistant.info["log"]
    seats = [e["seat"] for e in log]
    # the user reads the bar, the back office looks up and fixes, the user acts
    assert seats[:4] == ["user", "assistant", "assistant", "user"]
    called = {
        seat: [c.name for m in t.messages for c in getattr(m, "tool_calls", ())]
        for seat, t in (("user", user), ("assistant", assistant))
    }
    for seat in ("user", "assistant"):
        assert [e["tool"] for e in log if e["seat"] == seat] == called[seat]
    assert assistant.rewards == user.rewards == {"resolved": 1.0}


async def test_the_reward_is_read_from_the_final_world() -> None:
    """An assistant that never calls a tool leaves the line broken: 0.0; the same
    trace scored against a world fixed afterwards: 1.0."""
    episode = await play("suspended", {"assistant": "builtin/echo"})
    assert episode.ok, episode.errors
    assistant = trace_of(episode, "assistant")
    assert assistant.rewards == {"resolved": 0.0}
    assert assistant.info["final"]["line"]["status"] == "suspended"
    world: World = assistant.state["world"]
    world.line.status, world.device.airplane_mode = "active", False
    env = TelecomLite()
    assert env.resolved(episode.task, assistant) == 1.0


def test_registered() -> None:
    assert env_registry.get("telecom-lite") is TelecomLite
    assert set(TelecomLite().roles) == {"assistant", "user"}
    with pytest.raises(OptionError, match="kinds"):
        TelecomConfig(kinds="suspended,roaming")


def test_eval_runs_with_no_flags_and_shows_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "telecom-lite", "-n", "20", "-o", "run"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ok"] == 20
    assert summary["agents"]["assistant"]["rewards"]["resolved"] > 0
    report = (tmp_path / "run" / "report.html").read_text()
    assert "toggle_airplane_mode" in report
    assert "&quot;seat&quot;: &quot;user&quot;" in report or '"seat": "user"' in report
