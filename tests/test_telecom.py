"""``telecom-lite``: the shared world keeps its invariants under any tool calls of
both seats, both seats' calls land interleaved in one attributed log kept on both
traces, the reward is read from the final world, and ``taketurns eval`` runs it
with no flags on the built-in model."""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_report import APT_INSTALL, Doc, _browse, _chromium, _png_rgb

from taketurns import Agent, AgentConfig, Episode, OptionError, Trace, read_episodes
from taketurns._cli.main import main
from taketurns._config.settings import load_eval_config
from taketurns._eval.plan import make_env, resolve_role
from taketurns.env import env_registry
from taketurns.envs.telecom import KINDS, TelecomConfig, TelecomLite, make_world
from taketurns.envs.telecom_world import BackOffice, Device, World
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
        model = models.get(role, config.model or env.default_model(role))
        config = attrs.evolve(config, model=model, harness="tools")
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


@pytest.fixture(scope="module")
def telecom_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("telecom") / "run"
    assert main(["eval", "telecom-lite", "-n", "20", "-o", str(out), "--no-progress"]) == 0
    return out


def test_eval_runs_with_no_flags_and_shows_the_log(telecom_run: Path) -> None:
    summary = json.loads((telecom_run / "summary.json").read_text())
    assert summary["ok"] == 20
    assert summary["agents"]["assistant"]["rewards"]["resolved"] > 0
    episodes = {e["id"]: e for e in read_episodes(telecom_run / "episodes.jsonl")}
    doc = Doc((telecom_run / "report.html").read_text())
    section = doc.by_id("action-log")
    boxes = doc.select("details", cls="env-box", within=section)
    assert len(boxes) == 20
    assert "open" in boxes[0].attrs
    assert not any("open" in b.attrs for b in boxes[1:])
    for box in boxes:
        episode_id = doc.select("summary", within=box)[0].text.split(" · ")[0]
        log = episodes[episode_id]["traces"][0]["info"]["log"]
        rows = [
            [td.text for td in doc.select("td", within=tr)]
            for tr in doc.select("tr", within=box)[1:]
        ]
        # every action of both seats, in the order it ran, attributed to its seat
        assert rows == [
            [str(n), e["seat"], e["tool"], json.dumps(e["arguments"], sort_keys=True), e["result"]]
            for n, e in enumerate(log, 1)
        ]
        assert {r[1] for r in rows} == {"assistant", "user"}
    # the episodes by task: telecom-lite/0/0 first
    first = doc.select("summary", within=boxes[0])[0].text
    assert first.startswith("telecom-lite/0/0 · 14 actions (7 by the assistant, 7 by the user)")
    plot = doc.by_id("plot-telecom-actions")
    assert doc.by_id("plots") in plot.ancestors
    tips = [t.text for t in doc.select("title", within=plot)]
    assert tips == ["assistant · 7: 20", "user · 7: 20"]


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 800])
def test_the_action_log_renders_in_headless_chromium(
    telecom_run: Path, tmp_path: Path, width: int
) -> None:
    binary = _chromium()
    if binary is None:
        pytest.fail(f"no chromium binary on PATH; install it with: {APT_INSTALL}")
    url = (telecom_run / "report.html").resolve().as_uri()
    dumped = _browse(binary, tmp_path / "dom", "--dump-dom", f"--window-size={width},3000", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Doc(dumped.stdout)
    assert len(dom.select("tr", within=dom.by_id("action-log"))) == 20 + 20 * 14
    shot = tmp_path / "shot.png"
    size = f"--window-size={width},4400"
    taken = _browse(binary, tmp_path / "shot", f"--screenshot={shot}", size, url)
    assert taken.returncode == 0, taken.stderr[-2000:]
    w, h, rows = _png_rgb(shot.read_bytes())
    assert (w, h) == (width, 4400)
    pixels = Counter(px for row in rows for px in row)
    # the first episode's log is open: both seats' tags are drawn, in their colours
    assert pixels[(0xDB, 0xEA, 0xFE)] > 2000  # assistant
    assert pixels[(0xFD, 0xEC, 0xC8)] > 2000  # user
    # nothing runs off the right edge: the rightmost column of pixels is page background
    assert {row[-1] for row in rows} <= {(0xF7, 0xF8, 0xFA)}


# --- which model a seat runs: the role's own, else --model, else the env's default ---


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], ("builtin/tools", "builtin/tools")),
        ([("model", "builtin/echo")], ("builtin/echo", "builtin/echo")),
        (
            [("model", "builtin/echo"), ("env.user.model", "builtin/tools")],
            ("builtin/echo", "builtin/tools"),
        ),
        ([("env.assistant.model", "builtin/bracket")], ("builtin/bracket", "builtin/tools")),
    ],
)
def test_the_model_a_seat_runs(overrides: list[tuple[str, str]], expected: tuple[str, str]) -> None:
    config = load_eval_config(
        TelecomConfig, file_data={"env_id": "telecom-lite"}, overrides=overrides
    )
    env = make_env(config)
    roles = {r: resolve_role(config, env, r, a) for r, a in env.roles.items()}
    assert (roles["assistant"].model, roles["user"].model) == expected
    assert {a.harness for a in roles.values()} == {"tools"}


def test_model_alone_reaches_both_seats(tmp_path: Path) -> None:
    """``--model`` with no per-seat flag: both seats run it (an echo assistant fixes
    nothing: reward 0); the run directory is named after it."""
    out = tmp_path / "run"
    argv = ["eval", "telecom-lite", "-n", "3", "--model", "builtin/echo", "--no-progress"]
    assert main([*argv, "-o", str(out)]) == 0
    episodes = list(read_episodes(out / "episodes.jsonl"))
    assert {t["agent"]["model"] for e in episodes for t in e["traces"]} == {"builtin/echo"}
    assert {t["reward"] for e in episodes for t in e["traces"]} == {0.0}


def test_no_flags_run_both_seats_on_the_envs_default(telecom_run: Path) -> None:
    episodes = list(read_episodes(telecom_run / "episodes.jsonl"))
    models = {(t["agent"]["name"], t["agent"]["model"]) for e in episodes for t in e["traces"]}
    assert models == {("assistant", "builtin/tools"), ("user", "builtin/tools")}
    assert "model" not in tomllib.loads((telecom_run / "config.toml").read_text())


def test_the_default_run_directory_is_named_after_the_seats_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "telecom-lite", "-n", "1", "--no-progress"]) == 0
    [run] = (tmp_path / "outputs").iterdir()
    assert run.name.startswith("telecom-lite--builtin_tools--")


def test_the_runs_seed_deals_the_numbers_unless_the_env_pins_its_own() -> None:
    def numbers(env: TelecomLite) -> list[object]:
        return [task.info for task in env.tasks(6)]

    default, other = TelecomLite(), TelecomLite()
    other.seed = 7  # what the eval sets from --seed 7
    assert numbers(default) != numbers(other)
    pinned = TelecomLite(TelecomConfig(seed=0))
    pinned.seed = 7
    assert numbers(pinned) == numbers(default)
