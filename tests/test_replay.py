"""``taketurns replay`` (issue 26, item 2): a run's recorded episodes re-driven with
every seat's recorded replies; a call the record does not hold is a named
divergence; each replayed record is compared with the recorded one. Real runs on
the built-in model, in temporary run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rundirs import steady

import taketurns
import taketurns.testing
from taketurns import read_episodes
from taketurns._cli.main import main
from taketurns.env import ModelRequest
from taketurns.envs import kuhn, kuhn_rules
from taketurns.errors import ReplayDiverged
from taketurns.testing import BuiltinModel


def _eval(out: Path, env: str, *args: str) -> Path:
    assert main(["eval", env, *args, "-o", str(out), "--no-progress"]) == 0
    return out


def _records(run: Path) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in read_episodes(run / "episodes.jsonl")}


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def _same_but_ids_and_timing(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Equal records but for clock fields, where Python put an error's frames (a
    recorded endpoint failure is raised again by the replay model) and the replay's
    own note."""
    after = dict(after, info=dict(after["info"]))
    after["info"].pop("replayed")
    assert _frameless(steady(after)) == _frameless(steady(before))


def _frameless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _frameless(v) for k, v in value.items() if k not in ("where", "traceback")}
    if isinstance(value, list):
        return [_frameless(v) for v in value]
    return value


@pytest.fixture(autouse=True)
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed after the fixtures' evals ran: from here on, any call of the built-in
    model fails the test (a replay calls none)."""

    async def called(self: BuiltinModel, request: ModelRequest) -> Any:
        raise AssertionError("a replay called the model")

    monkeypatch.setattr(BuiltinModel, "complete", called)


@pytest.fixture(scope="module")
def kuhn200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _eval(tmp_path_factory.mktemp("replay") / "kuhn", "kuhn-poker", "-n", "200")


@pytest.fixture(scope="module")
def telecom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _eval(tmp_path_factory.mktemp("replay") / "telecom", "telecom-lite", "-n", "3")


@pytest.fixture(scope="module")
def usersim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "usersim"
    return _eval(out, "user-sim", "--env.taskset=retail-lite", "-n", "3")


def test_a_200_episode_kuhn_run_replays_every_record(kuhn200: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["replay", str(kuhn200), "-o", str(out)]) == 0
    old, new = _records(kuhn200), _records(out)
    assert len(new) == len(old) == 200
    for id_, before in old.items():
        after = new[id_]
        assert after["info"]["replayed"] == {
            "from": str(kuhn200.resolve()),
            "episode": id_,
            "status": "reproduced",
            "divergence": None,
            "differences": [],
            "failure": None,
        }
        _same_but_ids_and_timing(before, after)
    source = _summary(out)["replayed_from"]
    assert source["run"] == str(kuhn200.resolve())
    assert (source["reproduced"], source["diverged"], source["failed"]) == (200, 0, 0)
    assert source["not_reproduced"] == []


def test_a_changed_prompt_is_a_divergence_naming_episode_seat_and_turn(
    kuhn200: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--env.invalid_retries=2`` changes the rules text of each seat's system prompt."""
    out = tmp_path / "changed"
    assert main(["replay", str(kuhn200), "--env.invalid_retries=2", "-o", str(out)]) == 1
    new = _records(out)
    assert len(new) == 200
    for id_, record in new.items():
        replayed = record["info"]["replayed"]
        assert replayed["status"] == "diverged"
        assert replayed["divergence"]["episode"] == id_
        assert replayed["divergence"]["seat"] == "player0"
        assert replayed["divergence"]["turn"] == 0
        what = replayed["divergence"]["what"]
        assert "message 0 (system)" in what
        assert "recorded '…is refused: you get 1 retry per turn" in what
        assert "replayed '…is refused: you get 2 retries per turn" in what
    assert _summary(out)["replayed_from"]["diverged"] == 200
    # one vocabulary: a divergence is its own cause, never an endpoint failure
    assert _summary(out)["failed_by_cause"] == {"divergence": 200}
    assert {r["cause"] for r in new.values()} == {"divergence"}
    err = capsys.readouterr().err
    assert "0 reproduced, 200 diverged, 0 failed" in err
    assert "diverged: episode kuhn-poker/0/0, seat player0, turn 0: the request differs" in err


def test_one_call_more_than_recorded_names_the_turn(
    kuhn200: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A referee that refuses every answer asks the seat again: a call the record
    does not hold (each seat made one call in the recorded run)."""

    def refuse(text: str, legal: Any) -> str:
        raise kuhn_rules.InvalidAnswer("refused by the changed rule")

    monkeypatch.setattr(kuhn_rules, "parse_action", refuse)
    result = taketurns.testing.replay_episode(kuhn200, "kuhn-poker/7/0")
    assert result.status == "diverged"
    divergence = result.divergence
    assert divergence is not None
    where = (divergence.episode, divergence.seat, divergence.turn)
    assert where == ("kuhn-poker/7/0", "player0", 1)
    assert "call 2 of this seat's session but the record holds only 1" in divergence.what
    (seat0,) = [t for t in result.episode.traces if t.agent.name == "player0"]
    assert seat0.stop_condition == "model_error"
    assert any(e.type == "ReplayDiverged" for e in seat0.errors)


def test_a_changed_payoff_with_the_same_play_is_a_record_divergence(
    kuhn200: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kuhn.rules, "payoffs", lambda cards, history: (5, -5))
    result = taketurns.testing.replay_episode(kuhn200, "kuhn-poker/3/0")
    assert result.status == "diverged"
    assert result.divergence is not None
    assert result.divergence.episode == "kuhn-poker/3/0"
    assert "the replayed record differs: traces[0].rewards.payoff was" in result.divergence.what
    paths = [d.path for d in result.differences]
    assert "traces[0].reward" in paths
    assert "traces[1].reward" in paths


def test_the_python_entry_point_replays_one_episode(kuhn200: Path) -> None:
    recorded = _records(kuhn200)["kuhn-poker/11/0"]
    result = taketurns.testing.replay_episode(kuhn200, "kuhn-poker/11/0")
    assert result.status == "reproduced"
    assert (result.divergence, result.differences, result.failure) == (None, [], None)
    assert result.episode.id == "kuhn-poker/11/0"
    replies = [t.response.content for t in result.episode.traces[0].turns if t.response]
    assert replies == [t["response"]["content"] for t in recorded["traces"][0]["turns"]]
    changed = taketurns.testing.replay_episode(
        kuhn200, "kuhn-poker/11/0", overrides={"invalid_retries": "3"}
    )
    assert changed.status == "diverged"
    assert changed.divergence is not None
    assert changed.divergence.describe().startswith(
        "episode kuhn-poker/11/0, seat player0, turn 0: the request differs"
    )


def test_episode_selects_what_is_replayed(kuhn200: Path, tmp_path: Path) -> None:
    out = tmp_path / "two"
    picked = ["kuhn-poker/5/0", "kuhn-poker/150/0"]
    argv = ["replay", str(kuhn200), "-o", str(out)]
    assert main([*argv, "--episode", picked[0], "--episode", picked[1]]) == 0
    assert sorted(_records(out)) == sorted(picked)
    assert _summary(out)["replayed_from"]["reproduced"] == 2


def test_user_sim_replays_both_seats(usersim: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["replay", str(usersim), "-o", str(out)]) == 0
    old, new = _records(usersim), _records(out)
    assert len(new) == len(old) == 3
    for id_, before in old.items():
        seats = {t["agent"]["name"]: len(t["turns"]) for t in before["traces"]}
        assert set(seats) == {"assistant", "user"}
        assert min(seats.values()) > 1  # multi-turn on both seats
        _same_but_ids_and_timing(before, new[id_])


def test_a_changed_greeting_diverges_at_the_users_first_turn(usersim: Path) -> None:
    result = taketurns.testing.replay_episode(
        usersim, "user-sim/1/0", overrides={"greeting": "What do you want?"}
    )
    assert result.divergence is not None
    assert (result.divergence.seat, result.divergence.turn) == ("user", 0)
    assert "recorded 'Hello! How can I help you today?' but replayed 'What do you want?'" in (
        result.divergence.what
    )


def test_a_tool_env_replays(telecom: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["replay", str(telecom), "-o", str(out)]) == 0
    old, new = _records(telecom), _records(out)
    assert len(new) == len(old) == 3
    for id_, before in old.items():
        calls = [
            turn
            for trace in before["traces"]
            for turn in trace["turns"]
            if (turn["response"] or {}).get("tool_calls")
        ]
        assert calls  # the recorded play called tools; the replay ran them again
        _same_but_ids_and_timing(before, new[id_])


def test_fewer_calls_than_recorded_is_a_divergence(telecom: Path) -> None:
    """At most 2 user messages reach the assistant now: the env stops asking."""
    result = taketurns.testing.replay_episode(
        telecom, "telecom-lite/0/0", overrides={"exchanges": "2"}
    )
    assert result.status == "diverged"
    assert result.divergence is not None
    assert result.divergence.seat == "assistant"
    assert "the replay made" in result.divergence.what
    assert "(the env stopped asking)" in result.divergence.what


def test_bad_input_is_refused_before_anything_runs(
    kuhn200: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["replay", str(tmp_path / "nothing"), "-o", str(out)]) == 2
    assert "holds no episodes.jsonl and config.toml; pass the -o directory" in (
        capsys.readouterr().err
    )
    assert main(["replay", str(kuhn200), "--episode", "kuhn-poker/999/0", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--episode kuhn-poker/999/0:" in err
    assert "holds no episode with this id" in err
    assert main(["replay", str(kuhn200), "--model", "x", "-o", str(out)]) == 2
    assert "replay takes only --env.<field>=V overrides" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(taketurns.ConfigError, match="holds no episode with this id"):
        taketurns.testing.replay_episode(kuhn200, "nope")


def test_an_agent_cli_seat_is_refused_naming_it(kuhn200: Path, tmp_path: Path) -> None:
    run = tmp_path / "codex-run"
    run.mkdir()
    (run / "episodes.jsonl").write_bytes((kuhn200 / "episodes.jsonl").read_bytes())
    config = (kuhn200 / "config.toml").read_text()
    config = config.replace("[env.player1]\n", '[env.player1]\nharness = "codex"\n', 1)
    (run / "config.toml").write_text(config)
    with pytest.raises(taketurns.ConfigError) as caught:
        taketurns.testing.replay_episode(run, "kuhn-poker/0/0")
    (problem,) = caught.value.problems
    assert problem.startswith("env.player1.harness = 'codex': its seat cannot be replayed: ")
    assert "its scratch directory's path, the date, session ids" in problem
    assert main(["replay", str(run), "-o", str(tmp_path / "never")]) == 2
    assert not (tmp_path / "never").exists()


def test_the_divergence_error_is_a_model_endpoint_error() -> None:
    assert issubclass(ReplayDiverged, taketurns.ModelEndpointError)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "programs"
    seats = ["--env.player0.harness=program", "--env.player1.harness=stateful"]
    return _eval(out, "kuhn-poker", "-n", "2", *seats)


def test_program_seats_replay_through_the_interception_server(
    programs: Path, tmp_path: Path
) -> None:
    """Out-of-process seats (a program, a natively resuming one) reach the replay
    model through the interception server, as they reached the model."""
    out = tmp_path / "again"
    assert main(["replay", str(programs), "-o", str(out)]) == 0
    old, new = _records(programs), _records(out)
    assert len(new) == len(old) == 2
    for id_, before in old.items():
        harnesses = {t["agent"]["harness"] for t in before["traces"]}
        assert harnesses == {"program", "stateful"}
        _same_but_ids_and_timing(before, new[id_])


TWO_CHATS = f"{Path(__file__).parent / 'replayenv.py'}:TwoChats"


@pytest.fixture(scope="module")
def two_chats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _eval(tmp_path_factory.mktemp("replay") / "two", TWO_CHATS, "-n", "6")


def test_two_sessions_of_one_seat_replay_each_its_own_record(
    two_chats: Path, tmp_path: Path
) -> None:
    out = tmp_path / "again"
    assert main(["replay", str(two_chats), "-o", str(out)]) == 0
    old, new = _records(two_chats), _records(out)
    assert len(new) == len(old) == 6
    for id_, before in old.items():
        assert [t["agent"]["name"] for t in before["traces"]] == ["player", "player"]
        _same_but_ids_and_timing(before, new[id_])


def test_one_round_more_than_recorded_diverges_on_the_seat(two_chats: Path) -> None:
    result = taketurns.testing.replay_episode(
        two_chats, "replayenv:TwoChats/2/0", overrides={"rounds": "4"}
    )
    assert result.status == "diverged"
    assert result.divergence is not None
    assert (result.divergence.seat, result.divergence.turn) == ("player", 3)
    assert "call 4 of this seat's session but the record holds only 3" in result.divergence.what


def test_a_recorded_endpoint_failure_replays_as_it_failed(tmp_path: Path) -> None:
    """player0's endpoint refused every call of hand #1 with a 400: that episode
    failed (cause ``model``); the replay raises the recorded failure again, with the
    endpoint gone."""
    from faultserver import OK, Call, Fault, FaultyEndpoint, in_thread

    def decide(call: Call) -> Fault:
        system = str((call.body.get("messages") or [{}])[0].get("content"))
        return Fault("status", 400) if "player0 in hand #1 " in system else OK

    run = tmp_path / "run"
    with in_thread(FaultyEndpoint(decide)) as endpoint:
        argv = ["eval", "kuhn-poker", "-n", "3", "--model", "faulty"]
        argv += ["--base-url", endpoint.base_url, "-o", str(run), "--no-progress"]
        assert main(argv) == 1
    old = _records(run)
    assert (old["kuhn-poker/1/0"]["ok"], old["kuhn-poker/1/0"]["cause"]) == (False, "model")
    assert sum(e["ok"] for e in old.values()) == 2
    out = tmp_path / "again"
    assert main(["replay", str(run), "-o", str(out)]) == 0
    new = _records(out)
    for id_, before in old.items():
        _same_but_ids_and_timing(before, new[id_])


def test_an_env_that_raises_now_is_a_failed_replay(
    kuhn200: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cards: Any, history: Any) -> Any:
        raise ArithmeticError("the payoff table broke")

    monkeypatch.setattr(kuhn.rules, "payoffs", broken)
    result = taketurns.testing.replay_episode(kuhn200, "kuhn-poker/9/0")
    assert result.status == "failed"
    assert result.divergence is None
    assert result.failure is not None
    assert "the payoff table broke" in result.failure
    assert result.describe().startswith("episode kuhn-poker/9/0: failed: ")
    assert (result.episode.ok, result.episode.cause) == (False, "env")


async def test_a_seat_the_record_does_not_hold_diverges_at_its_first_call(kuhn200: Path) -> None:
    from taketurns._output.recorded import recorded_episodes
    from taketurns._replay.model import EpisodeReplay

    original = next(recorded_episodes(kuhn200 / "episodes.jsonl"))
    replay = EpisodeReplay(original)
    request = ModelRequest("builtin/bracket", (taketurns.UserMessage("hello"),))
    with pytest.raises(ReplayDiverged) as caught:
        await replay.model("dealer").complete(request)
    divergence = caught.value.divergence
    assert (divergence.episode, divergence.seat, divergence.turn) == (original.id, "dealer", 0)
    assert divergence.what == "the record holds no session of this seat"
    assert replay.divergence is divergence
