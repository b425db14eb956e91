"""Envs and tasksets named by reference, no packaging: ``taketurns eval ./file.py:Class``
and ``taketurns eval package.module:Class`` (``taketurns._config.reference``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from taketurns import read_episodes
from taketurns._cli.main import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

TASKSET = """
import attrs
from taketurns import Task, Taskset, TasksetConfig, reward


@attrs.define
class CountConfig(TasksetConfig):
    word: str = "count"


class Counting(Taskset):
    config_class = CountConfig

    def tasks(self, num_tasks):
        return [Task(idx=i, prompt=f"{self.config.word} {i}", answer=f"{self.config.word} {i}")
                for i in range(num_tasks)]

    @reward
    def echoed(self, task, trace):
        return float(trace.last_text == task.answer)
"""


@pytest.fixture(autouse=True)
def _restore_imports(tmp_path: Path) -> Iterator[None]:
    """Each test imports its own files under the same module names: forget them after
    (only them: a taketurns module imported meanwhile stays)."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if str(tmp_path) in str(getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding duel.py (docs/writing-envs.md's example), the current directory."""
    shutil.copy(EXAMPLES / "duel.py", tmp_path / "duel.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(*args: str) -> int:
    return main(["eval", *args, "--no-progress"])


def test_a_file_env_runs_by_path_with_overrides(here: Path) -> None:
    assert _run("./duel.py:Duel", "-n", "3", "-o", "run", "--env.rounds=1") == 0
    episodes = list(read_episodes(here / "run" / "episodes.jsonl"))
    assert len(episodes) == 3
    assert {e["env"] for e in episodes} == {"duel:Duel"}
    assert sorted(e["id"] for e in episodes) == [f"duel:Duel/{i}/0" for i in range(3)]
    # rounds=1: left opens, right answers, left answers
    assert [len(t["turns"]) for t in episodes[0]["traces"]] == [2, 1]
    stored = tomllib.loads((here / "run" / "config.toml").read_text())
    assert stored["env_id"] == f"{here / 'duel.py'}:Duel"  # absolute: reruns from anywhere
    assert stored["env"]["rounds"] == 1


def test_a_module_env_runs_from_the_current_directory(here: Path) -> None:
    (here / "mypkg").mkdir()
    (here / "mypkg" / "__init__.py").write_text("")
    shutil.move(here / "duel.py", here / "mypkg" / "duel.py")
    assert _run("mypkg.duel:Duel", "-n", "2", "-o", "run") == 0
    episodes = list(read_episodes(here / "run" / "episodes.jsonl"))
    assert {e["env"] for e in episodes} == {"mypkg.duel:Duel"}


def test_a_taskset_class_runs_under_single_agent(here: Path) -> None:
    (here / "counting.py").write_text(TASKSET)
    code = _run("./counting.py:Counting", "-n", "2", "-o", "run", "--model=builtin/echo")
    assert code == 0
    episodes = list(read_episodes(here / "run" / "episodes.jsonl"))
    assert {e["env"] for e in episodes} == {"single-agent"}
    assert [e["traces"][0]["rewards"]["echoed"] for e in episodes] == [1.0, 1.0]
    # and as an option of another env, with its own options
    code = _run(
        "user-sim",
        "--env.taskset=./counting.py:Counting",
        "--env.taskset.word=hi",
        "-n",
        "1",
        "-o",
        "run2",
    )
    assert code == 0
    (episode,) = read_episodes(here / "run2" / "episodes.jsonl")
    assert episode["task"]["prompt"] == "hi 0"


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("./nope.py:Duel", "no such file"),
        ("./duel.py:Dual", "has no 'Dual'; the classes it defines: AgentConfig"),
        ("./duel.py:DuelConfig", "is not an Env subclass"),
        ("nopkg.duel:Duel", "no module 'nopkg.duel'"),
        ("./broken.py:Duel", "importing broken failed at"),
        ("./json.py:Duel", "the module name 'json' is already taken"),
        ("./my-env.py:Duel", "rename the file"),
    ],
)
def test_a_bad_reference_is_refused_naming_env(
    here: Path, capsys: pytest.CaptureFixture[str], ref: str, needle: str
) -> None:
    (here / "broken.py").write_text("import attrs\nraise RuntimeError('boom')\n")
    shutil.copy(here / "duel.py", here / "json.py")
    shutil.copy(here / "duel.py", here / "my-env.py")
    assert _run(ref, "-n", "1", "-o", "run") == 2
    err = capsys.readouterr().err
    assert f"env = {ref!r}" in err.replace("\n", "")
    assert needle in " ".join(err.split())
    assert not (here / "run").exists()


def test_a_file_env_runs_on_worker_processes(here: Path) -> None:
    code = _run("./duel.py:Duel", "-n", "4", "-o", "run", "--backend", "processes", "--workers=2")
    assert code == 0
    episodes = list(read_episodes(here / "run" / "episodes.jsonl"))
    assert sorted(e["id"] for e in episodes) == [f"duel:Duel/{i}/0" for i in range(4)]


def test_a_file_env_is_refused_on_ray_before_ray_starts(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run("./duel.py:Duel", "-n", "1", "-o", "run", "--backend", "ray") == 2
    assert "Ray workers import the env class from an installed package" in " ".join(
        capsys.readouterr().err.split()
    )


def test_the_console_script_runs_a_file_env_then_reruns_its_config(here: Path) -> None:
    script = Path(sys.executable).with_name("taketurns")
    first = subprocess.run(
        [str(script), "eval", "./duel.py:Duel", "-n", "3", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    (run,) = (here / "outputs").iterdir()
    assert len(list(read_episodes(run / "episodes.jsonl"))) == 3
    # -C DIR/config.toml reruns into a new default directory
    again = subprocess.run(
        [str(script), "eval", "-C", str(run / "config.toml"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    runs = sorted((here / "outputs").iterdir())
    assert len(runs) == 2
    assert all(len(list(read_episodes(r / "episodes.jsonl"))) == 3 for r in runs)
