"""The README's claims, run: every command of its ``bash`` blocks and indented command
blocks, its complete Python programs, and the code "Writing an env" shows (which must be
``examples/duel.py``, the file its commands run).

Commands run in the order the README gives them, in one directory that holds a copy of
``examples/`` and, as "Writing an env" says, ``duel.py`` beside it. Only ``taketurns``
commands run (``pip install``, ``pytest``, ``npm`` and the like prepare the machine).
A ``taketurns`` command that cannot run here in under a minute is listed in
``NOT_RUN`` with its reason; an entry that no longer matches a README command fails
the test, so the list cannot rot. Code blocks without a language are synopses
(``ENV``, ``DIR`` placeholders), not commands.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from taketurns import read_episodes
from taketurns._cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# command prefix -> why it is not run here
NOT_RUN = {
    "taketurns eval wordle -n 20": "20 TextArena games at ~2 s each to build: over a "
    "minute; tests/test_textarena.py plays Wordle through the same env",
    "taketurns eval textarena --env.game=WordLadder-v0": "20 WordLadder games, as slow; "
    "tests/test_textarena.py plays WordLadder",
    "taketurns eval openenv --env.url=": "a server of the reader's own and a model endpoint; "
    "tests/test_openenv.py plays a server by URL",
    "taketurns eval jsonl --env.taskset.path=examples/qa.jsonl --model builtin/echo "
    "--env.taskset.judge.model=gpt-4.1-mini": "a hosted judge (a key and the network); "
    "tests/test_judge.py judges against an OpenAI-compatible server on loopback",
    "taketurns eval kuhn-poker -n 20 -c 2 --model llamacpp/smollm2-135m-instruct": "a real "
    "model on 2 CPU cores: minutes; tests/test_real_model.py plays Kuhn on it, then exports",
    "taketurns export kuhn-smol": "the samples of the run above",
    "taketurns eval kuhn-poker -n 100 -c 64 --model qwen3-8b --model-server": "vLLM or "
    "SGLang on a GPU; tests/test_model_server.py and tests/test_real_model.py run "
    "--model-server commands",
}


def _blocks() -> Iterator[tuple[str, str]]:
    """(language, text) of every code block: fenced (language as written, "" for
    none) and indented by four spaces after a blank line ("indented")."""
    lines = README.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            yield fence.group(1), "\n".join(lines[i + 1 : end])
            i = end + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and lines[end].startswith("    "):
                end += 1
            yield "indented", "\n".join(line[4:] for line in lines[i:end])
            i = end
        else:
            i += 1


def _commands() -> list[list[str]]:
    """Each command block's runnable commands (``a && b`` split), in README order."""
    blocks = []
    for lang, text in _blocks():
        if lang not in ("bash", "sh", "shell", "indented"):
            continue
        joined = text.replace("\\\n", " ")  # a backslash continues the line
        commands = [
            " ".join(part.split())
            for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
            for part in line.split("&&")
        ]
        if lang == "indented" and not all(c.startswith("taketurns ") for c in commands):
            continue  # an indented block of something else (an example, not a command)
        blocks.append(commands)
    return blocks


def _skipped(command: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if command.startswith(prefix)), None)


BLOCKS = _commands()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    here = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", here / "examples")
    shutil.copy(ROOT / "examples" / "duel.py", here / "duel.py")
    path, modules, cwd = list(sys.path), set(sys.modules), os.getcwd()
    os.chdir(here)
    try:
        yield here
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        for name in set(sys.modules) - modules:  # the README's own files, not taketurns'
            if str(here) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]


def test_the_readme_has_the_commands_this_test_knows() -> None:
    commands = [c for block in BLOCKS for c in block]
    assert any(c.startswith("taketurns eval ./duel.py:Duel") for c in commands)
    assert any(c.startswith("taketurns eval -C ") for c in commands)
    assert any("examples/qa.jsonl" in c for c in commands)
    for prefix in NOT_RUN:
        assert any(c.startswith(prefix) for c in commands), f"stale NOT_RUN entry: {prefix}"


def _runs(here: Path) -> set[Path]:
    return {p.parent for p in here.rglob("episodes.jsonl")}


@pytest.mark.parametrize("block", BLOCKS, ids=[" ; ".join(b)[:80] for b in BLOCKS])
def test_a_readme_command_block_runs(workdir: Path, block: list[str]) -> None:
    for command in block:
        if not command.startswith("taketurns ") or _skipped(command):
            continue
        argv = shlex.split(command)
        before = _runs(workdir)
        assert main(argv[1:]) == 0, command
        if argv[1] == "eval":
            (run,) = _runs(workdir) - before
            assert list(read_episodes(run / "episodes.jsonl")), command


def _python_programs() -> list[str]:
    return [text for lang, text in _blocks() if lang == "python" and "trio.run(" in text]


@pytest.mark.parametrize("program", _python_programs(), ids=lambda p: p.splitlines()[1][:60])
def test_a_readme_python_program_runs(workdir: Path, program: str) -> None:
    script = workdir / "readme_program.py"
    script.write_text(program)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # the printed values are the ones the program's comments promise
    promised = [
        line.split("#")[1].strip()
        for line in program.splitlines()
        if line.lstrip().startswith("print(") and "#" in line
    ]
    printed = proc.stdout.split("\n")
    for promise in promised:
        assert any(line.strip() == promise for line in printed), (promise, proc.stdout)


def test_the_env_the_readme_writes_is_the_example_its_commands_run() -> None:
    envs = [t for lang, t in _blocks() if lang == "python" and "(Env):" in t]
    assert envs, "the README shows no env"
    example = (ROOT / "examples" / "duel.py").read_text()
    for text in envs:
        assert text.strip() in example, "README's env code differs from examples/duel.py"
