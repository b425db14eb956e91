"""A taskset that offers tools never loses them silently: a user-written taskset whose
``resources`` hands out tools (and that names no harness) runs on the ``tools``
harness, under ``single-agent`` and ``user-sim`` alike; the ``null`` harness, which
calls no tool, is refused for such a role, naming the option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taketurns import read_episodes
from taketurns._cli.main import main

TASKS = '''
from taketurns import Resources, Task, Taskset, reward


class Lamps(Taskset):
    """Task i: turn on lamp i with the switch_on tool (no harness named)."""

    def tasks(self, num_tasks):
        return [Task(i, prompt=f"Please turn on lamp {i}.", answer=i) for i in range(num_tasks)]

    def resources(self, task):
        lit = set()

        def switch_on(lamp: int) -> str:
            """Turn one lamp on."""
            lit.add(lamp)
            return f"lamp {lamp} is on"

        return Resources(tools=(switch_on,), state={"lit": lit})

    @reward
    def lit_some(self, task, trace):
        return float(bool(trace.state["lit"]))
'''


@pytest.fixture
def tasks_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    stem = "lamps_" + re.sub(r"\W", "_", tmp_path.name)  # a module name of its own per test
    (tmp_path / f"{stem}.py").write_text(TASKS)
    return f"./{stem}.py:Lamps"


def _traces(out: Path, agent: str) -> list[dict]:
    return [t for e in read_episodes(out / "episodes.jsonl") for t in e["traces"]
            if t["agent"]["name"] == agent]  # fmt: skip


def test_a_tasksets_tools_run_on_the_tools_harness(tasks_file: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", tasks_file, "-n", "2", "--model", "builtin/tools", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    traces = _traces(out, "agent")
    assert [t["agent"]["harness"] for t in traces] == ["tools", "tools"]
    assert all(t["rewards"]["lit_some"] == 1.0 for t in traces)  # the tool was called
    assert all(any(m["role"] == "tool" for m in t["messages"]) for t in traces)


def test_under_user_sim_the_assistant_gets_them_too(tasks_file: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "user-sim", f"--env.taskset={tasks_file}", "-n", "1", "-o", str(out)]
    assert main([*argv, "--env.assistant.model=builtin/tools", "--no-progress"]) == 0
    assert [t["agent"]["harness"] for t in _traces(out, "assistant")] == ["tools"]
    assert [t["agent"]["harness"] for t in _traces(out, "user")] == ["null"]


def test_the_null_harness_is_refused_naming_the_option(
    tasks_file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (on the command line `=null` means unset, i.e. the default: tools)
    (tmp_path / "run.toml").write_text('[env.agent]\nharness = "null"\n')
    argv = ["eval", tasks_file, "-C", "run.toml", "-o", str(tmp_path / "run")]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "env.agent.harness = 'null'" in err
    assert "use --env.agent.harness=tools" in err
    assert not (tmp_path / "run").exists()


def test_a_taskset_without_tools_keeps_the_null_harness(tmp_path: Path) -> None:
    out = tmp_path / "run"
    qa = Path(__file__).parent.parent / "examples" / "qa.jsonl"
    argv = ["eval", "jsonl", f"--env.taskset.path={qa}", "-n", "1", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    assert [t["agent"]["harness"] for t in _traces(out, "agent")] == ["null"]
