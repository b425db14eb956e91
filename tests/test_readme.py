"""The manual's claims, run: README.md and every page under docs/, each checked alike:
every command of its ``bash`` blocks and indented command blocks, its complete Python
programs, and the code "Writing an env" shows (which must be ``examples/duel.py``, the
file its commands run); every relative link and anchor between the pages resolves.

Commands run page by page (README.md first, then docs/ in path order), in the order a
page gives them, in one directory that holds a copy of ``examples/`` and, as "Writing an
env" says, ``duel.py`` beside it. Only ``taketurns`` commands run (``pip install``,
``pytest``, ``npm`` and the like prepare the machine). A ``taketurns`` command that
cannot run here in under a minute is listed in ``NOT_RUN`` with its reason; an entry
that no longer matches a command of some page fails the test, so the list cannot rot.
Code blocks without a language are synopses (``ENV``, ``DIR`` placeholders), not
commands.

The prose's examples are checked too (an override that is only inline text slipped
through once): every inline code span holding a ``taketurns`` command or a dotted
override (``--env.…``, ``--sampling.…``). A concrete ``taketurns eval`` command is
validated (options, env, tasks) and run with ``-n 1`` unless ``DRY_ONLY`` says why not;
a synopsis (placeholders: ``DIR``, ``[...]``, ``...``) must name an existing command
and known flags; an override must be accepted by some env (with a taskset where it is
a taskset's). ``taketurns serve`` is parsed, not started (it serves until stopped);
``taketurns view`` (which serves too) and ``taketurns exploitability`` (which its
page's commands run) must only name their flags.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from required import needed

from taketurns import read_episodes
from taketurns._cli.catalog import options_of
from taketurns._cli.main import _load_config, main
from taketurns._cli.parser import flag_names, parser
from taketurns._config.options import AgentConfig, Sampling
from taketurns._config.registry import envs, tasksets
from taketurns._config.settings import load_eval_config
from taketurns._errors import ConfigError
from taketurns._eval.plan import env_class, make_env

ROOT = Path(__file__).resolve().parents[1]
# every page of the manual, README.md first, by its path from the repository's root
PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
}

# command prefix -> why it is not run here
NOT_RUN = {
    "taketurns exploitability openspiel --env.game=leduc_poker -k 20": "18,720 episodes and "
    "21 NashConvs of Leduc: over a minute; tests/test_exploitability.py measures Kuhn",
    "taketurns eval openspiel --env.game=tic_tac_toe -n 2 --model llamacpp/": "a real model "
    "on 2 CPU cores: minutes; tests/test_real_model.py plays Kuhn on it",
    "taketurns eval tau2 --env.domain=airline --env.policy=gold -n 50": "50 airline tasks "
    "through tau2's own environments and evaluator: minutes here; "
    "tests/test_tau2.py::test_the_gold_script_scores_one_on_every_task plays gold",
    "taketurns eval tau2 --env.domain=telecom --env.policy=gold -n 114": "114 telecom tasks: "
    "about a minute; tests/test_tau2.py::test_telecom_gold_is_dual_control_and_two_rollouts_"
    "never_share_an_environment plays telecom's gold",
    "taketurns eval tau2 --env.domain=retail -n 114 --env.judge.model=gpt-4o-mini": "a hosted "
    "judge (a key and the network); tests/test_tau2.py judges on the built-in judge",
    "taketurns eval tau2 --env.domain=airline -n 50 --model Qwen/": "a server of the reader's "
    "own; tests/test_tau2.py::test_the_builtin_model_runs_telecom_with_both_seats",
    "taketurns eval tau2 --env.domain=mock -n 3 --model llamacpp/": "a real model on 2 CPU "
    "cores: minutes; tests/test_real_model.py runs llamacpp/ models through the envs",
    "taketurns eval tau2 --env.domain=airline -n 2 --env.tools=mcp --env.assistant.harness=": "a "
    "real agent CLI over tau2's tools by MCP: ~2 min each here; tests/test_bfcl_agents.py "
    "runs Codex and Claude Code over an env's tools by MCP (the same --env.tools=mcp path)",
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


def _blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, text) of every code block of a page: fenced (language as written, ""
    for none) and indented by four spaces after a blank line ("indented")."""
    lines = text.splitlines()
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


def _all_blocks() -> Iterator[tuple[str, str, str]]:
    """(page, language, text) of every code block of every page, in page order."""
    for page, text in PAGES.items():
        for lang, block in _blocks(text):
            yield page, lang, block


def _commands() -> list[tuple[str, list[str]]]:
    """Each command block's page and runnable commands (``a && b`` split), in page
    order."""
    blocks = []
    for page, lang, text in _all_blocks():
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
        blocks.append((page, commands))
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
    commands = [c for _, block in BLOCKS for c in block]
    assert any(c.startswith("taketurns eval ./duel.py:Duel") for c in commands)
    assert any(c.startswith("taketurns eval -C ") for c in commands)
    assert any("examples/qa.jsonl" in c for c in commands)
    for prefix in NOT_RUN:
        assert any(c.startswith(prefix) for c in commands), f"stale NOT_RUN entry: {prefix}"


def _runs(here: Path) -> set[Path]:
    return {p.parent for p in here.rglob("episodes.jsonl")}


@pytest.mark.parametrize(
    ("page", "block"), BLOCKS, ids=[f"{p}: {' ; '.join(b)}"[:100] for p, b in BLOCKS]
)
def test_a_readme_command_block_runs(workdir: Path, page: str, block: list[str]) -> None:
    for command in block:
        if not command.startswith("taketurns ") or _skipped(command):
            continue
        argv = shlex.split(command)
        before = _runs(workdir)
        assert main(argv[1:]) == 0, (page, command)
        if argv[1] == "eval":
            (run,) = _runs(workdir) - before
            assert list(read_episodes(run / "episodes.jsonl")), (page, command)


def _python_programs() -> list[str]:
    return [t for _, lang, t in _all_blocks() if lang == "python" and "trio.run(" in t]


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
    envs = [(p, t) for p, lang, t in _all_blocks() if lang == "python" and "(Env):" in t]
    assert envs, "the manual shows no env"
    example = (ROOT / "examples" / "duel.py").read_text()
    for page, text in envs:
        assert text.strip() in example, f"{page}'s env code differs from examples/duel.py"


# --- the prose's inline examples -----------------------------------------------------

# inline `taketurns eval` command prefix -> why it is validated but not run here
DRY_ONLY = {
    "taketurns eval kuhn-poker -n 200 -c 32 --backend ray": "starts a Ray instance (~20 s); "
    "tests/test_ray_backend.py runs evals on Ray",
    "taketurns eval openenv -n 3": "starts an OpenEnv server (~20 s); tests/test_openenv.py "
    "plays it",
}
# a placeholder value in an inline example -> what stands for it here
VALUES = {"f.jsonl": "examples/qa.jsonl", "M": "builtin/judge", "NAME": "kuhn_poker"}
# the reader's own taskset file the prose names (`taketurns eval ./my_tasks.py:MyTasks`)
MY_TASKS = """
from taketurns import Task, Taskset


class MyTasks(Taskset):
    def tasks(self, num_tasks):
        return [Task(i, prompt=f"Say [yes] or [no] ({i})") for i in range(num_tasks)]
"""


def _prose(text: str) -> str:
    """A page without its code blocks: the text whose inline spans are examples."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _spans() -> list[str]:
    """Inline code spans (on one line or wrapped) of every page's prose, whitespace
    collapsed."""
    return [
        " ".join(span.split())
        for text in PAGES.values()
        for span in re.findall(r"`([^`]+)`", _prose(text))
    ]


INLINE_COMMANDS = sorted({s for s in _spans() if s.startswith("taketurns ")})
OVERRIDE_SPANS = sorted(
    {s for s in _spans() if not s.startswith("taketurns ") and re.search(r"--(env|sampling)\.", s)}
)


def _is_synopsis(command: str) -> bool:
    """Placeholders: an upper-case word (``DIR``), brackets, alternatives, ``...``."""
    words = shlex.split(command)[1:]
    return any(
        re.search(r"(^|[/=])[A-Z]{2,}\b|^[A-Z]$", w) or w.startswith("[") or "|" in w or "..." in w
        for w in words
    )


def test_the_prose_has_the_examples_this_test_knows() -> None:
    assert "taketurns eval ./my_tasks.py:MyTasks" in INLINE_COMMANDS
    assert "--env.user.limits.max_turns=4" in " ".join(OVERRIDE_SPANS)
    assert any(s.startswith("taketurns export DIR") for s in INLINE_COMMANDS)
    for prefix in DRY_ONLY:
        assert any(c.startswith(prefix) for c in INLINE_COMMANDS), f"stale DRY_ONLY: {prefix}"


def _known_flags(command: str) -> set[str]:
    return set(flag_names(command))


@pytest.mark.parametrize("command", INLINE_COMMANDS)
def test_an_inline_command_is_valid(workdir: Path, command: str) -> None:
    (workdir / "my_tasks.py").write_text(MY_TASKS)
    words = shlex.split(command)
    sub = words[1]
    assert sub in ("eval", "envs", "report", "serve", "export", "view", "exploitability"), command
    named_only = ("report", "serve", "export", "view", "exploitability")
    if _is_synopsis(command) or sub in named_only or len(words) == 2:
        # a synopsis or a long-running server: the command and its flags exist
        for word in words[2:]:
            if word.startswith("--") and "." not in word and not word.startswith("--env"):
                assert word.split("=")[0] in _known_flags(sub), (command, word)
        if sub == "serve" and not _is_synopsis(command):
            args, extra = parser().parse_known_args(words[1:])
            assert not extra, command
        return
    if "--help" in words or sub == "envs":
        with pytest.raises(SystemExit) if "--help" in words else contextlib.nullcontext():
            assert main(words[1:]) == 0
        return
    args, extra = parser().parse_known_args(words[1:])
    config, _ = _load_config(args, extra)  # every option valid
    env = make_env(config)
    assert env.tasks(1)
    if any(command.startswith(prefix) for prefix in DRY_ONLY):
        return
    out = workdir / "inline" / re.sub(r"\W+", "_", command)[:60]
    assert main([*words[1:], "-n", "1", "-o", str(out), "--overwrite", "--no-progress"]) == 0
    assert list(read_episodes(out / "episodes.jsonl")), command


# where an inline override is tried: (env id, overrides that make the env complete)
_TASKSETS = ("jsonl", "reasoning-gym", "retail-lite")
_TASKSET_BASE = {
    "jsonl": [("env.taskset", "jsonl"), ("env.taskset.path", "examples/qa.jsonl")],
    "reasoning-gym": [("env.taskset", "reasoning-gym"), ("env.taskset.dataset", "leg_counting")],
    "retail-lite": [("env.taskset", "retail-lite")],
}


def _contexts() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    yield "./duel.py:Duel", []  # "Writing an env"'s example
    for env_id in envs.ids():
        if env_id in ("single-agent", "user-sim"):
            for taskset in _TASKSETS:
                yield env_id, list(_TASKSET_BASE[taskset])
        else:
            yield env_id, []


def _accepted(overrides: list[tuple[str, str]]) -> list[str]:
    """The envs (with a taskset) that accept ``overrides``; the problems of the others."""
    accepted, problems = [], []
    for env_id, base in _contexts():
        try:
            cls = env_class(env_id)
            config = load_eval_config(
                cls.config_class, file_data={"env_id": env_id}, overrides=[*base, *overrides]
            )
            make_env(config)
        except ConfigError as exc:
            problems += exc.problems
            continue
        accepted.append(env_id)
    return accepted or problems


def _option_paths() -> set[str]:
    """Every dotted option path of every env and taskset, roles expanded."""
    paths = set()
    role = [p for p, _, _ in options_of(AgentConfig, "", expand_roles=True)]
    for registry, prefix in ((envs, "env"), (tasksets, "env.taskset")):
        for id in registry.ids():
            cls = registry.get(id)
            for path, kind, _ in options_of(cls.config_class, prefix, owner=cls):
                paths.add(path)
                if kind == "role":
                    paths.update(f"{path}{r}" for r in role)
    return paths


def _is_sampling_field(path: str) -> bool:
    """``sampling.<field>`` (or below one, ``sampling.extra.top_k``): the run's own
    sampling options, beside every env's."""
    first, _, rest = path.partition(".")
    return first == "sampling" and rest.split(".")[0] in attrs.fields_dict(Sampling)


@pytest.mark.parametrize("span", OVERRIDE_SPANS)
def test_an_inline_override_is_accepted(workdir: Path, span: str) -> None:
    (workdir / "my_tasks.py").write_text(MY_TASKS)
    overrides = []
    for word in shlex.split(span):
        path, eq, value = word.removeprefix("--").partition("=")
        if "<" in path or "*" in path or "..." in path:
            continue  # a pattern (--env.<role>.*), not an example
        if not eq:
            known = path in _option_paths() or _is_sampling_field(path)
            assert known, f"{span}: no env has the option {path}"
            continue
        overrides.append((path, VALUES.get(value, value)))
    if overrides:
        accepted = _accepted(overrides)
        assert accepted[0] in ("./duel.py:Duel", *envs.ids()), f"{span}: refused: {accepted}"


# --- links between the pages ---------------------------------------------------------


def _heading_slugs(text: str) -> set[str]:
    """The anchors of a page's headings, as GitHub and the site (mkdocs' default
    ``toc`` slugs) both spell them: a link must resolve in either."""
    slugs = set()
    for line in _prose(text).splitlines():
        heading = re.match(r"^#{1,6} (.+)$", line)
        if not heading:
            continue
        title = heading.group(1).replace("`", "").strip().lower()
        github = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        site = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip())
        slugs.add(github if github == site else f"{github} | {site}")
    return slugs


def _links() -> list[tuple[str, str]]:
    """(page, target) of every relative Markdown link of every page's prose."""
    return [
        (page, target)
        for page, text in PAGES.items()
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(text))
        if not re.match(r"[a-z]+:", target)
    ]


def test_the_pages_link_the_way_this_test_knows() -> None:
    pages_linked = {(page, target.split("#")[0]) for page, target in _links()}
    assert ("README.md", "docs/index.md") in pages_linked
    assert ("docs/running.md", "harnesses/containment.md") in pages_linked
    assert any("#" in target for _, target in _links())


@pytest.mark.parametrize(("page", "target"), _links())
def test_a_link_between_pages_resolves(page: str, target: str) -> None:
    path, _, anchor = target.partition("#")
    resolved = ((ROOT / page).parent / path).resolve() if path else ROOT / page
    assert resolved.is_file(), f"{page}: no file {path}"
    assert resolved.is_relative_to(ROOT / "docs") or page == "README.md", (
        f"{page}: {path} is outside docs/, which the site does not publish"
    )
    if anchor:
        text = resolved.read_text(encoding="utf-8")
        assert anchor in _heading_slugs(text), (
            f"{page}: {target}: no heading with that anchor on GitHub and on the site "
            f"(the page's: {sorted(_heading_slugs(text))})"
        )


def test_every_page_is_in_the_sites_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    nav = set(re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)$", config, re.M))
    pages = {page.removeprefix("docs/") for page in PAGES if page != "README.md"}
    assert pages == nav, f"not in mkdocs.yml's nav: {pages - nav}; no such page: {nav - pages}"


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    needed("mkdocs", "the docs extra (pip install -e '.[docs]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "design" / "index.html").is_file()
