"""``taketurns export``: a run directory's samples as JSON Lines or Parquet, read back
by ``datasets.load_dataset``, with reward, advantage and provenance per row; failed
episodes and untrainable agents left out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pairenv
import pytest

from taketurns import read_episodes
from taketurns._cli.main import main
from taketurns._train.export import (
    MESSAGE_COLUMNS,
    ROW_COLUMNS,
    export_samples,
    message_rows,
    run_groups,
    sample_rows,
)


def _eval(out: Path, *args: str, code: int = 0) -> None:
    argv = ["eval", *args, "-o", str(out), "--no-progress", "--sampling.logprobs=true"]
    assert main(argv) == code  # 1: some episodes failed (everything is written)


@pytest.fixture
def offline_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_jsonl_and_parquet_load_with_datasets(tmp_path: Path, offline_hf: None) -> None:
    import datasets  # the test extra: a missing package fails here, naming it

    run = tmp_path / "run"
    _eval(run, "kuhn-poker", "-n", "3", "-r", "4")
    assert main(["export", str(run)]) == 0
    assert main(["export", str(run), "--format", "parquet", "-o", str(tmp_path / "s.parquet")]) == 0
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows
    assert rows == list(sample_rows(run_groups(run)))
    for path, kind in ((run / "samples.jsonl", "json"), (tmp_path / "s.parquet", "parquet")):
        loaded = datasets.load_dataset(kind, data_files=str(path), split="train")
        assert loaded.column_names == list(ROW_COLUMNS)
        assert loaded.num_rows == len(rows)
        for got, want in zip(loaded, rows, strict=True):
            assert got["episode_id"] == want["episode_id"]
            assert got["completion_ids"] == want["completion_ids"]
            assert got["completion_mask"] == want["completion_mask"]
            assert got["advantage"] == pytest.approx(want["advantage"])
    for row in rows:
        assert row["agent"] in {"player0", "player1"}
        assert row["episode_id"] == f"kuhn-poker/{row['task_idx']}/{row['rollout']}"
        assert len(row["completion_mask"]) == len(row["completion_ids"])
    for task in {r["task_idx"] for r in rows}:
        for agent in ("player0", "player1"):
            mine = {
                r["episode_id"]: r["advantage"]
                for r in rows
                if (r["task_idx"], r["agent"]) == (task, agent)
            }
            assert len(mine) == 4
            assert math.isclose(math.fsum(mine.values()), 0.0, abs_tol=1e-9)


def test_failed_episodes_and_untrainable_agents_are_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairenv.PairEnv.reset({1: "env_raises"})
    run = tmp_path / "run"
    _eval(run, "faults-pair", "-n", "3", "-r", "2", "--env.b.trainable=false", code=1)
    done = export_samples(run)
    assert (done.groups, done.episodes, done.failed) == (3, 6, 2)
    rows = [json.loads(line) for line in done.path.read_text().splitlines()]
    assert {r["task_idx"] for r in rows} == {0, 2}
    assert {r["agent"] for r in rows} == {"a"}
    assert all(r["reward"] == 1.5 and r["advantage"] == 0.0 for r in rows)


def test_a_run_without_token_ids_exports_conversations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], offline_hf: None
) -> None:
    import datasets

    run = tmp_path / "run"
    argv = ["eval", "kuhn-poker", "-n", "2", "-r", "2", "-o", str(run), "--no-progress"]
    assert main(argv) == 0  # no --sampling.logprobs: no token ids
    assert main(["export", str(run)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "wrote 8 message-level samples" in err
    assert "for trainers that tokenize themselves" in err
    assert "--sampling.logprobs=true" in err
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows == list(message_rows(run_groups(run)))
    assert {tuple(r) for r in rows} == {MESSAGE_COLUMNS}
    episodes = {e["id"]: e for e in read_episodes(run / "episodes.jsonl")}
    for row in rows:
        trace = next(t for t in episodes[row["episode_id"]]["traces"]
                     if t["agent"]["name"] == row["agent"])  # fmt: skip
        assert row["messages"] == trace["messages"]  # the whole conversation
        assert row["message_mask"] == [int(m["role"] == "assistant") for m in row["messages"]]
        assert sum(row["message_mask"]) >= 1
        assert row["messages"][0]["role"] == "system"
        assert row["reward"] == trace["reward"]
    for task in (0, 1):
        for agent in ("player0", "player1"):
            mine = [r for r in rows if (r["task_idx"], r["agent"]) == (task, agent)]
            rewards = [r["reward"] for r in mine]
            advantages = [r["advantage"] for r in mine]
            mean = sum(rewards) / 2
            assert advantages == pytest.approx([x - mean for x in rewards])
    parquet = tmp_path / "s.parquet"
    assert main(["export", str(run), "--format", "parquet", "-o", str(parquet)]) == 0
    loaded = datasets.load_dataset("parquet", data_files=str(parquet), split="train")
    assert loaded.column_names == list(MESSAGE_COLUMNS)
    assert [json.loads(m) for m in loaded["messages"]] == [r["messages"] for r in rows]


def test_asked_levels_and_nothing_to_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _eval(run, "kuhn-poker", "-n", "1")  # with token ids
    assert main(["export", str(run), "--level", "messages"]) == 0
    assert "wrote 2 message-level samples" in capsys.readouterr().err
    assert main(["export", str(run)]) == 0  # auto: tokens, since the turns carry them
    assert "wrote 2 samples" in capsys.readouterr().err
    plain = tmp_path / "plain"
    assert main(["eval", "kuhn-poker", "-n", "1", "-o", str(plain), "--no-progress"]) == 0
    assert main(["export", str(plain), "--level", "tokens"]) == 1  # never 0 rows, exit 0
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing to export: no turn carried token ids" in err
    assert "--level messages" in err
    assert not (plain / "samples.jsonl").exists()
    assert main(["export", str(plain), "--level", "words"]) == 2
    assert "auto, tokens, messages" in capsys.readouterr().err


def test_a_run_whose_episodes_all_failed_exports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairenv.PairEnv.reset({0: "env_raises"})
    run = tmp_path / "run"
    _eval(run, "faults-pair", "-n", "1", code=1)
    assert main(["export", str(run)]) == 1
    assert "nothing to export: every episode failed" in capsys.readouterr().err


def test_bad_format_and_missing_run_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(tmp_path)]) == 2
    assert "no episodes.jsonl" in capsys.readouterr().err
    (tmp_path / "episodes.jsonl").write_text("")
    assert main(["export", str(tmp_path), "--format", "csv"]) == 2
    assert "jsonl, parquet" in capsys.readouterr().err


async def test_streamed_groups_recorded_to_a_run_dir_export_as_they_were(tmp_path: Path) -> None:
    from taketurns import EvalConfig, RunDir, open_rollouts
    from taketurns.envs.kuhn import KuhnPoker

    run_dir = RunDir(tmp_path / "run")
    run_dir.prepare(resume=False, overwrite=False)
    env = KuhnPoker()
    config = EvalConfig(env_id="kuhn-poker", concurrency=4)
    task = env.tasks(1)[0]
    async with open_rollouts(env, config, run_dir=run_dir) as source:
        streamed = [g async for g in source.groups([task, *env.tasks(3), task], per_task=3)]
    exported = run_groups(run_dir.path)
    assert len(exported) == len(streamed) == 5  # the repeated task's groups stay apart
    want = sorted(
        (s.episode_id, s.agent, s.advantage, s.completion_ids)
        for g in streamed
        for s in g.samples()
    )
    got = sorted(
        (r["episode_id"], r["agent"], r["advantage"], r["completion_ids"])
        for r in sample_rows(exported)
    )
    assert got == want
