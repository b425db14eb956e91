"""reasoning-gym: tasks are the real datasets' items (seeded from the task index, never
from ``-n``), scored by the dataset's own ``score_answer``; the multi-turn mode re-asks
after a wrong answer and rewards the first correct one; bad options are refused by name
before any episode. Needs the ``reasoning-gym`` extra (part of ``test``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from taketurns import Agent, AgentConfig, ConfigError, Episode, Task, Trace
from taketurns._cli.main import main
from taketurns.env import EpisodeInfo, ModelClient
from taketurns.envs.reasoning import ReasoningGym, ReasoningGymConfig, extract_answer
from taketurns.envs.single import SingleAgentConfig, SingleAgentEnv
from taketurns.harness import text_of
from taketurns.taskset import taskset_registry
from taketurns.testing import ScriptedModel, run_episode

try:
    import reasoning_gym
except ImportError as exc:  # a missing dependency fails, naming it (never a skip)
    raise ImportError(
        f"tests/test_reasoning_gym.py needs reasoning-gym: pip install -e '.[test]' ({exc})"
    ) from exc


def env_of(**options: Any) -> SingleAgentEnv:
    return SingleAgentEnv(SingleAgentConfig(taskset={"id": "reasoning-gym", **options}))


def factory(
    env: SingleAgentEnv, client: ModelClient
) -> Callable[[str, AgentConfig, EpisodeInfo, Callable[[Trace], None]], Agent]:
    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        config = attrs.evolve(config, harness=config.harness or env.default_harness(role))
        return Agent(
            role, config, client=client, episode=info, rubric=env.rubric(role), on_close=on_close
        )

    return make


async def play(env: SingleAgentEnv, task: Task, client: ModelClient) -> Trace:
    episode = Episode(f"single-agent/{task.idx}/0", "single-agent", task)
    episode = await run_episode(env, episode, factory(env, client))
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    return trace


# --- tasks ------------------------------------------------------------------------


def test_registered_as_a_taskset() -> None:
    assert taskset_registry.get("reasoning-gym") is ReasoningGym


def test_task_i_is_the_datasets_item_seeded_from_i_whatever_n() -> None:
    env = env_of(dataset="leg_counting", seed=7)
    five, two = env.tasks(5), env_of(dataset="leg_counting", seed=7).tasks(2)
    assert five[:2] == list(two)
    # reasoning-gym seeds item i with seed + i: task i is item i of the dataset itself
    reference = reasoning_gym.create_dataset("leg_counting", seed=7, size=5)
    for i, task in enumerate(five):
        assert (task.idx, task.name) == (i, f"leg_counting-{i}")
        assert task.prompt == reference[i]["question"]
        assert task.answer == reference[i]["answer"]
        assert task.info == {"dataset": "leg_counting", "seed": 7 + i}
        assert "<answer>" in (task.system_prompt or "")  # reasoning-gym's default prompt
    assert len({task.prompt for task in five}) == 5


def test_dataset_options_from_a_table_and_from_command_line_text() -> None:
    taskset = ReasoningGym(
        ReasoningGymConfig(
            dataset="leg_counting", options={"min_animals": "2", "max_animals": 2}, seed=3
        )
    )
    for task in taskset.tasks(4):
        item = reasoning_gym.create_dataset(
            "leg_counting", seed=task.info["seed"], size=1, min_animals=2, max_animals=2
        )[0]
        assert task.prompt == item["question"]
        assert len(item["metadata"]["animals"]) == 2


def test_answers_are_read_from_answer_tags() -> None:
    assert extract_answer("thinking... <answer> 42 </answer>") == "42"
    assert extract_answer("<answer>1</answer> no, <answer>2</answer>") == "2"
    assert extract_answer("  17\n") == "17"


# --- scoring ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "score"),
    [("I count <answer>{answer}</answer>.", 1.0), ("<answer>-1</answer>", 0.0), ("", 0.0)],
)
async def test_one_shot_is_scored_by_the_datasets_score_answer(reply: str, score: float) -> None:
    env = env_of(dataset="leg_counting")
    task = env.tasks(1)[0]
    trace = await play(env, task, ScriptedModel(reply.format(answer=task.answer)))
    assert trace.stop_condition == "agent_completed"
    assert len(trace.turns) == 1
    assert trace.rewards == {"score": score}
    assert trace.metrics == {"answers": float(bool(reply)), "first_try": score}


async def test_partial_credit_is_the_datasets_own() -> None:
    # spell_backward's scorer gives partial credit; the reward is exactly its score
    env = env_of(dataset="spell_backward")
    task = env.tasks(1)[0]
    near = task.answer[:-1] + ("x" if task.answer[-1] != "x" else "y")
    dataset = reasoning_gym.create_dataset("spell_backward", seed=0, size=1)
    expected = dataset.score_answer(answer=near, entry=dataset[0])
    assert 0.0 < expected < 1.0
    trace = await play(env, task, ScriptedModel(f"<answer>{near}</answer>"))
    assert trace.rewards == {"score": expected}


async def test_attempts_re_ask_with_feedback_until_the_first_correct_answer() -> None:
    env = env_of(dataset="leg_counting", attempts=4)
    task = env.tasks(1)[0]
    right = f"<answer>{task.answer}</answer>"
    model = ScriptedModel("<answer>1</answer>", "<answer>2</answer>", right)
    trace = await play(env, task, model)
    assert trace.info["scores"] == [0.0, 0.0, 1.0]
    assert trace.rewards == {"score": 1.0}
    assert trace.metrics == {"answers": 3.0, "first_try": 0.0}
    assert trace.stop_condition == "agent_completed"
    assert len(model.requests) == 3  # the correct answer ended the conversation
    feedback = text_of(model.requests[1].messages[-1].content)
    assert "not correct" in feedback
    assert "3 tries left" in feedback
    assert task.prompt in feedback


async def test_attempts_run_out_and_the_last_answer_is_scored() -> None:
    env = env_of(dataset="leg_counting", attempts=2)
    task = env.tasks(1)[0]
    model = ScriptedModel("<answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>")
    trace = await play(env, task, model)
    assert trace.info["scores"] == [0.0, 0.0]
    assert (trace.rewards, trace.metrics) == ({"score": 0.0}, {"answers": 2.0, "first_try": 0.0})
    assert len(model.requests) == 2


# --- the command line -------------------------------------------------------------


def test_eval_reasoning_gym_by_its_id(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "reasoning-gym", "--env.taskset.dataset=leg_counting", "-n", "5"]
    assert main([*argv, "-o", str(out), "--no-progress"]) == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    found = sorted((json.loads(line) for line in lines), key=lambda e: e["task"]["idx"])
    assert [e["task"]["idx"] for e in found] == [0, 1, 2, 3, 4]
    for e in found:
        assert e["ok"]
        assert e["env"] == "single-agent"
        (trace,) = e["traces"]
        assert trace["stop_condition"] == "agent_completed"
        assert set(trace["rewards"]) == {"score"}
    assert 'dataset = "leg_counting"' in (out / "config.toml").read_text()


def test_envs_lists_the_dataset_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    listing = " ".join(capsys.readouterr().out.split())
    assert "env.taskset.dataset" in listing
    for name in ("leg_counting", "spell_backward", "zebra_puzzles"):
        assert name in listing


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "env.taskset.dataset: name a reasoning-gym dataset"),
        (["--env.taskset.dataset=leg_countin"], "env.taskset.dataset = 'leg_countin': expected"),
        (["--env.taskset.dataset=leg_counting", "--env.taskset.options.size=3"], "set by the"),
        (
            ["--env.taskset.dataset=leg_counting", "--env.taskset.options.legs=3"],
            "env.taskset.options.legs: not an option of leg_counting; its options: max_animals",
        ),
        (
            ["--env.taskset.dataset=leg_counting", "--env.taskset.options.min_animals=0"],
            "leg_counting refused its options",
        ),
        (["--env.taskset.dataset=leg_counting", "--env.taskset.attempts=0"], "attempts"),
    ],
)
def test_bad_options_are_refused_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    assert main(["eval", "reasoning-gym", *args, "-o", str(out), "--no-progress"]) == 2
    assert needle in " ".join(capsys.readouterr().err.split())
    assert not out.exists()


def test_a_missing_dataset_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="name a reasoning-gym dataset"):
        ReasoningGym(ReasoningGymConfig())
