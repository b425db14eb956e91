"""``taketurns.report.EpisodeView``: what an env's report hooks read, the parsed
record answering the fields hooks read without structuring the episode."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from cattrs.errors import ClassValidationError

from taketurns._cli.main import main
from taketurns._output.records import episode_from, read_episodes
from taketurns.report import EpisodeView


def _records(tmp_path: Path) -> list[dict]:
    out = tmp_path / "run"
    argv = ["eval", "reportenv:WordsEnv", "-n", "3", "-r", "2", "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    return list(read_episodes(out / "episodes.jsonl"))


def test_the_view_reads_as_the_episode(tmp_path: Path) -> None:
    records = _records(tmp_path)
    assert len(records) == 6
    for raw in records:
        view, episode = EpisodeView(raw), episode_from(copy.deepcopy(raw))
        assert (view.id, view.env, view.rollout, view.seed, view.stop) == (
            episode.id,
            episode.env,
            episode.rollout,
            episode.seed,
            episode.stop,
        )
        assert (view.ok, view.cause, view.info) == (episode.ok, episode.cause, episode.info)
        assert view.task == episode.task
        assert len(view.traces) == len(episode.traces) == 1
        for t, trace in zip(view.traces, episode.traces, strict=True):
            assert t.agent == trace.agent
            assert (t.info, t.rewards, t.metrics) == (trace.info, trace.rewards, trace.metrics)
            assert (t.reward, t.stop_condition) == (trace.reward, trace.stop_condition)
            assert t.last_text == trace.last_text != ""
            # any other field: the whole trace, structured on first use
            assert t.turns == trace.turns
            assert t.turns
            assert t.trace() is t.trace()
        assert view.timing == episode.timing  # the whole episode, likewise
        assert view.episode() is view.episode()


def test_the_view_does_not_structure_what_it_answers() -> None:
    """A record whose turns no longer structure still answers every view field; only
    reading the turns structures (and fails)."""
    raw = {
        "id": "e/0/0",
        "env": "e",
        "task": {"idx": 0, "id": "t0", "prompt": "hi"},
        "rollout": 0,
        "cause": None,
        "traces": [
            {
                "agent": {"name": "player", "model": "m", "harness": "chat"},
                "info": {"seat": 1},
                "rewards": {"payoff": 2.0},
                "reward": 2.0,
                "messages": [
                    {"role": "assistant", "content": "check"},
                    {"role": "assistant", "content": [{"type": "text", "text": "bet"}]},
                    {"role": "user", "content": "ok"},
                ],
                "turns": [{"not": "a turn"}],
            }
        ],
    }
    view = EpisodeView(raw)
    assert view.ok
    assert view.task.idx == 0
    assert view.id == "e/0/0"
    (trace,) = view.traces
    assert trace.agent.name == "player"
    assert trace.info == {"seat": 1}
    assert trace.rewards == {"payoff": 2.0}
    assert trace.reward == 2.0
    assert trace.last_text == "bet"
    with pytest.raises(ClassValidationError):
        trace.turns  # noqa: B018
    failed = EpisodeView({**raw, "cause": "model"})
    assert not failed.ok
    assert failed.cause == "model"
