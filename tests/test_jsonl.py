"""The ``jsonl`` taskset: reading and checking the file, the rewards, and
``taketurns eval jsonl`` end to end on the built-in model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taketurns import AssistantMessage, ConfigError, SystemMessage, Task, Trace, UserMessage
from taketurns._cli.main import main
from taketurns.env import AgentStamp, EpisodeInfo
from taketurns.envs.jsonl import JsonlConfig, JsonlTaskset, load_tasks, normalize
from taketurns.harness import TextPart
from taketurns.taskset import open_taskset, taskset_registry


def write(path: Path, *rows: Any) -> Path:
    """One line per row: a dict is dumped as JSON, a str written as is."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def replied(text: str | None, task: Task | None = None) -> Trace:
    """A trace whose final assistant message says ``text``."""
    trace = Trace(AgentStamp("agent", "m", "null"), EpisodeInfo("e", "x", 0), task or Task(0))
    trace.messages.append(UserMessage("q"))
    if text is not None:
        trace.messages.append(AssistantMessage(text))
    return trace


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_tasks(path)
    return info.value.problems


# --- reading a good file ----------------------------------------------------------


def test_every_field_and_blank_lines(tmp_path: Path) -> None:
    f = write(
        tmp_path / "qa.jsonl",
        {"prompt": "What is 2+2?", "answer": "4"},
        "",
        "   ",
        {
            "prompt": "Capital of France?",
            "system_prompt": "Answer in one word.",
            "answer": "Paris",
            "info": {"source": "atlas", "level": 2},
            "name": "capital",
        },
        {"prompt": "Open question"},
        {"prompt": "How many legs?", "answer": 4},
    )
    tasks = JsonlTaskset(JsonlConfig(path=str(f))).tasks(10)
    assert tasks == [
        Task(0, "qa-0", "What is 2+2?", answer="4"),
        Task(
            1,
            "capital",
            "Capital of France?",
            system_prompt="Answer in one word.",
            answer="Paris",
            info={"source": "atlas", "level": 2},
        ),
        Task(2, "qa-2", "Open question"),
        Task(3, "qa-3", "How many legs?", answer=4),
    ]


def test_prompt_as_a_list_of_messages(tmp_path: Path) -> None:
    f = write(
        tmp_path / "chat.jsonl",
        {
            "prompt": [
                {"role": "system", "content": "Be terse."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": [{"type": "text", "text": "Say bye"}]},
            ],
            "answer": "bye",
        },
    )
    (task,) = load_tasks(f)
    assert task.prompt == (
        SystemMessage("Be terse."),
        UserMessage("Hi"),
        AssistantMessage("Hello."),
        UserMessage((TextPart("Say bye"),)),
    )
    assert task.prompt_text() == "Hi\nHello.\nSay bye"


def test_unicode_line_separators_inside_strings(tmp_path: Path) -> None:
    f = tmp_path / "u.jsonl"
    prompt = "one\u2028two\x1cthree\x85four"
    f.write_text(json.dumps({"prompt": prompt}, ensure_ascii=False) + "\r\n", encoding="utf-8")
    assert [t.prompt for t in load_tasks(f)] == [prompt]


@pytest.mark.parametrize(("n", "expected"), [(1, [0]), (3, [0, 1, 2]), (100, [0, 1, 2])])
def test_num_tasks_beyond_the_file_gives_the_file(tmp_path: Path, n: int, expected: list) -> None:
    f = write(tmp_path / "t.jsonl", *({"prompt": f"q{i}"} for i in range(3)))
    taskset = open_taskset({"id": "jsonl", "path": str(f)})
    assert [t.idx for t in taskset.tasks(n)] == expected


def test_registered_as_jsonl() -> None:
    assert taskset_registry.get("jsonl") is JsonlTaskset
    assert JsonlTaskset.harness == "null"


# --- refusing a bad file ----------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"answer": "4"}', '"prompt" is missing'),
        ('{"prompt": ""}', "prompt is empty"),
        ('{"prompt": []}', "prompt is an empty list of messages"),
        ('{"prompt": 7}', "prompt must be a string or a list of chat messages"),
        ('{"prompt": [{"role": "wizard", "content": "x"}]}', "prompt[0].role must be one of"),
        ('{"prompt": [{"role": "user"}]}', "prompt[0].content is missing"),
        ('{"prompt": "q", "answer": ["a"]}', "answer must be a string or a number, not a list"),
        ('{"prompt": "q", "answer": true}', "answer must be a string or a number"),
        ('{"prompt": "q", "answer": "  "}', "answer is blank"),
        ('{"prompt": "q", "info": "x"}', "info must be an object, not a string"),
        ('{"prompt": "q", "system_prompt": 1}', "system_prompt must be a string"),
        ('{"prompt": "q", "name": {}}', "name must be a string"),
        ('{"prompt": "q", "promt": "typo"}', "unknown field(s) 'promt'"),
    ],
)
def test_a_malformed_line_is_refused_naming_file_and_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    f = write(tmp_path / "bad.jsonl", {"prompt": "fine"}, "", line, {"prompt": "fine too"})
    (message,) = problems(f)
    assert message.startswith(f"{f}, line 3: ")
    assert problem in message


def test_every_malformed_line_is_reported_at_once(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.jsonl", "{", {"prompt": "ok"}, {"prompt": 1}, "[]")
    assert [p.split(":")[0] for p in problems(f)] == [
        f"{f}, line 1",
        f"{f}, line 3",
        f"{f}, line 4",
    ]


def test_a_flood_of_bad_lines_is_summarized(tmp_path: Path) -> None:
    f = write(tmp_path / "bad.jsonl", *(["{"] * 50))
    found = problems(f)
    assert len(found) == 21
    assert found[-1] == f"{f}: ... and 30 more malformed lines"


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "empty.jsonl", "", "  ")
    assert problems(f) == [f"{f}: holds no tasks (one JSON object a line)"]


def test_bad_utf8_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "latin.jsonl"
    f.write_bytes(b'{"prompt": "caf\xe9"}\n')
    (message,) = problems(f)
    assert message.startswith(f"{f}: cannot read the tasks file")


def test_missing_path_names_the_option() -> None:
    with pytest.raises(ConfigError) as info:
        open_taskset("jsonl", field="env.taskset")
    (message,) = info.value.problems
    assert message.startswith(
        "jsonl taskset: path is missing; name the JSONL file of tasks (--env.taskset.path=FILE)"
    )


@pytest.mark.parametrize(("name", "why"), [("nope.jsonl", "no such file"), (".", "directory")])
def test_unreadable_path_names_the_option(tmp_path: Path, name: str, why: str) -> None:
    path = str(tmp_path / name)
    with pytest.raises(ConfigError) as info:
        open_taskset({"id": "jsonl", "path": path}, field="env.taskset")
    (message,) = info.value.problems
    assert message.startswith(f"env.taskset.path = {path!r}: expected the path of a readable")
    assert why in message


def test_config_in_python_is_checked_too(tmp_path: Path) -> None:
    assert JsonlConfig().path is None  # listable default; the taskset refuses it
    with pytest.raises(ConfigError, match="path is missing"):
        JsonlTaskset()
    with pytest.raises(ValueError, match="a file path"):
        JsonlConfig(path="")
    with pytest.raises(ValueError, match="no such file"):
        JsonlTaskset(JsonlConfig(path=str(tmp_path / "missing.jsonl")))


def test_unknown_option_is_refused(tmp_path: Path) -> None:
    f = write(tmp_path / "t.jsonl", {"prompt": "q"})
    with pytest.raises(ConfigError, match=r"env.taskset.shuffle: unknown option"):
        open_taskset({"id": "jsonl", "path": str(f), "shuffle": True}, field="env.taskset")


# --- rewards ----------------------------------------------------------------------


def test_normalize() -> None:
    assert normalize("  Paris\n") == "paris"
    assert normalize("STRASSE") == normalize("straße")


@pytest.mark.parametrize(
    ("answer", "text", "exact", "contains"),
    [
        ("Paris", "Paris", 1.0, 1.0),
        ("Paris", "  paris\n", 1.0, 1.0),
        ("paris", "PARIS", 1.0, 1.0),
        ("Paris", "It is Paris.", 0.0, 1.0),
        ("Paris", "Lyon", 0.0, 0.0),
        ("Paris", "", 0.0, 0.0),
        ("Paris", None, 0.0, 0.0),
        (4, "4", 1.0, 1.0),
        (4, "2+2 = 4", 0.0, 1.0),
        (None, "anything", 0.0, 0.0),
        (None, "", 0.0, 0.0),
    ],
)
async def test_rewards(
    tmp_path: Path, answer: Any, text: str | None, exact: float, contains: float
) -> None:
    row = {"prompt": "q"} if answer is None else {"prompt": "q", "answer": answer}
    taskset = JsonlTaskset(JsonlConfig(path=str(write(tmp_path / "t.jsonl", row))))
    (task,) = taskset.tasks(1)
    trace = replied(text, task)
    await taskset.rubric().score(task, trace)
    assert trace.rewards == {"exact_match": exact}
    assert trace.metrics == {"contains": contains}
    assert trace.reward == exact


async def test_rewards_read_the_final_assistant_text(tmp_path: Path) -> None:
    taskset = JsonlTaskset(JsonlConfig(path=str(write(tmp_path / "t.jsonl", {"prompt": "q"}))))
    task = Task(0, prompt="q", answer="yes")
    trace = replied("yes", task)
    trace.messages += [UserMessage("sure?"), AssistantMessage("no"), AssistantMessage(None)]
    await taskset.rubric().score(task, trace)
    assert (trace.rewards, trace.metrics) == ({"exact_match": 0.0}, {"contains": 0.0})


# --- end to end -------------------------------------------------------------------


def episodes(out: Path) -> list[dict[str, Any]]:
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda e: e["task"]["idx"])


def test_eval_jsonl_alone(tmp_path: Path) -> None:
    # builtin/bracket answers with one of the bracketed options in the prompt
    f = write(
        tmp_path / "t.jsonl",
        {"prompt": "Reply with [blue]", "answer": "[blue]"},
        {"prompt": "Reply with [red]", "answer": "red"},
        {"prompt": [{"role": "user", "content": "Pick [green]"}], "answer": "[GREEN]"},
        {"prompt": "No options here", "answer": "x"},
    )
    out = tmp_path / "run"
    argv = ["eval", "jsonl", "--env.taskset.path", str(f), "-n", "3", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    found = episodes(out)
    assert [e["task"]["idx"] for e in found] == [0, 1, 2]
    assert [[t["rewards"]["exact_match"] for t in e["traces"]] for e in found] == [[1], [0], [1]]
    assert [[t["metrics"]["contains"] for t in e["traces"]] for e in found] == [[1], [1], [1]]
    for e in found:
        assert e["ok"]
        assert e["errors"] == []
        assert e["env"] == "single-agent"
        (trace,) = e["traces"]
        assert trace["stop_condition"] == "agent_completed"
        assert trace["agent"]["name"] == "agent"
        assert trace["agent"]["harness"] == "null"


def test_eval_jsonl_refuses_a_malformed_file_before_running(tmp_path: Path, capsys) -> None:
    f = write(tmp_path / "t.jsonl", {"prompt": "ok"}, {"prompt": "q", "answer": [1]})
    out = tmp_path / "run"
    code = main(["eval", "jsonl", f"--env.taskset.path={f}", "-o", str(out), "--no-progress"])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())  # undo the console's line wrapping
    assert "t.jsonl, line 2:" in err
    assert "answer must be a string or a number" in err
    assert not out.exists()


def test_eval_jsonl_without_a_path_names_the_option(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["eval", "jsonl", "-o", str(out), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "jsonl taskset: path is missing; name the JSONL file of tasks (--env.taskset.path=FILE)"
        in err
    )
    assert not out.exists()


def test_a_taskset_shorter_than_n_is_counted_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4 rows and ``-n 10``: the terminal says 4 tasks, and the viewer's row of the
    finished run plans 4 episodes (not 10)."""
    from taketurns._view.library import Library

    f = write(tmp_path / "four.jsonl", *({"prompt": f"q{i}", "answer": "x"} for i in range(4)))
    out = tmp_path / "runs" / "four"
    argv = ["eval", "jsonl", "--env.taskset.path", str(f), "-n", "10", "-o", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    captured = capsys.readouterr()
    said = " ".join((captured.out + captured.err).split())
    assert ": 4 tasks x 1 rollouts" in said
    library = Library([tmp_path / "runs"])
    library.discover()
    library.refresh()
    run = library.get("four")
    assert run is not None
    assert (run.row()["planned"], run.row()["episodes"]) == (4, 4)
