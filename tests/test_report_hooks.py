"""The env's own part of the report (``Env.report_figures``, ``Env.report_sections``,
drawn with ``taketurns.report``), and a core that names no built-in env.

Runs are made by the real CLI with the reference env ``reportenv:WordsEnv``; the
page is read back with ``test_report``'s HTML parser."""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_report import Doc

import taketurns
import taketurns._runner
import taketurns.report
from taketurns._cli.main import main
from taketurns._report.feed import write_report

ENGINE = Path(taketurns.__file__).parent


def _eval(out: Path, *args: str) -> Path:
    argv = ["eval", "reportenv:WordsEnv", "-n", "4", "-o", str(out), "--no-progress", *args]
    assert main(argv) == 0
    return out


def _page(run: Path, notes: list[str] | None = None) -> tuple[str, Doc]:
    text = write_report(run, notify=None if notes is None else notes.append).read_text()
    return text, Doc(text)


def test_the_envs_figure_and_sections_are_on_the_page(tmp_path: Path) -> None:
    run = _eval(tmp_path / "run")
    text, doc = _page(run)
    # the figure joins the Plots grid, after the built-in plots
    plot = doc.by_id("plot-words")
    assert doc.by_id("plots") in plot.ancestors
    tips = sorted(t.text for t in doc.select("title", within=plot))
    assert tips == ["episodes · <b>word 0</b>: 2", "episodes · <b>word 1</b>: 2"]
    assert "one bar per word" in doc.by_id("plots").text
    # the sections, in order, after the plots and before the transcripts
    sections = doc.select("section", cls="env-section")
    assert [s.attrs["id"] for s in sections] == ["words", "env-again"]
    ids = [el.attrs.get("id") for el in doc.elements if el.tag == "section"]
    assert ids.index("plots") < ids.index("words") < ids.index("transcripts")
    rows = doc.select("tr", within=sections[0])[1:]
    # one row per episode, in the order they were written (as they finished)
    assert sorted(r.text for r in rows) == [
        f"reportenv:WordsEnv/{i}/0player<b>word {i % 2}</b>" for i in range(4)
    ]
    # episode content is text, never markup
    assert "<b>word" not in text
    tags = doc.select("span", cls="tag", within=sections[0])
    assert {t.text for t in tags} == {"player"}
    assert all("t0" in t.classes for t in tags)
    assert not doc.select(cls="env-note")


def test_a_report_written_again_builds_the_env_from_config_toml(tmp_path: Path) -> None:
    run = _eval(tmp_path / "run", "--env.hooks=raises")
    (run / "report.html").unlink()
    notes: list[str] = []
    _, doc = _page(run, notes)
    assert notes == [
        "env 'reportenv:WordsEnv': report_figures failed (RuntimeError: the figure broke); left out"
    ]
    [note] = doc.select("p", cls="env-note")
    assert note.text == notes[0]
    assert not doc.has_id("plot-words")
    assert doc.has_id("words")  # the other hook still drew its part
    assert doc.select("rect", cls="bar", within=doc.by_id("plot-turns"))


def test_a_hook_that_reads_part_of_the_run_leaves_the_page_whole(tmp_path: Path) -> None:
    """The first hook reads the report's own pass: the pass still reads every record
    (the built-in plots and transcripts count all 4), and the next hook reads all."""
    run = _eval(tmp_path / "run", "--env.hooks=first")
    _, doc = _page(run)
    tips = [t.text for t in doc.select("title", within=doc.by_id("plot-words"))]
    assert len(tips) == 1
    assert tips[0].endswith(": 1")
    assert [t.text for t in doc.select("title", within=doc.by_id("plot-turns"))] == [
        "player · 1: 4"
    ]
    assert len(doc.select("details", cls="transcript")) == 4
    assert len(doc.select("tr", within=doc.by_id("words"))) == 1 + 4


_OPENED: list[list[tuple[str, str]]] = []  # while a list is on it, (file, mode) opened go there


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and _OPENED and isinstance(args[0], str | os.PathLike):
        _OPENED[-1].append((os.fspath(args[0]), str(args[1])))


sys.addaudithook(_audit)  # (a hook cannot be removed: it records only inside _opens)


def _opens(path: Path, call: Callable[[], object], *, reading: bool = False) -> int:
    """How many times ``call()`` opens ``path`` (``reading``: to read it)."""
    _OPENED.append([])
    try:
        call()
    finally:
        opened = _OPENED.pop()
    return sum(
        Path(p).resolve() == path.resolve() and (not reading or "r" in mode) for p, mode in opened
    )


def _undated(page: str) -> str:
    return re.sub(r" · generated [0-9: -]+<", "<", page)


@pytest.mark.parametrize("block", [None, 3])
def test_an_eval_reads_none_of_its_records_back_for_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int | None
) -> None:
    """The eval feeds the report (its scan, both hooks) each record as it is written
    (in blocks of lines: the 4 episodes are one block, or with blocks of 3 two): the
    end of the run opens episodes.jsonl to read it not once, and the page is the one
    a reading of the file draws."""
    if block is not None:
        monkeypatch.setattr(taketurns._runner, "REPORT_BLOCK", block)
    run = tmp_path / "run"
    assert _opens(run / "episodes.jsonl", lambda: _eval(run), reading=True) == 0
    fed = (run / "report.html").read_text()
    assert "generated" in fed
    assert "plot-words" in fed
    assert 'id="words"' in fed
    assert _undated(fed) == _undated(write_report(run).read_text())


def test_a_resumed_evals_report_is_fed_the_records_it_kept(tmp_path: Path) -> None:
    """On --resume the records kept from before reach the report through the one
    reading the resume makes anyway (setting aside what must rerun): all 6 episodes
    are on the page, and it is the page a reading of the file draws."""
    run = _eval(tmp_path / "run", "-n", "3")
    reads = _opens(run / "episodes.jsonl", lambda: _eval(run, "-n", "6", "--resume"), reading=True)
    assert reads == 1
    fed = (run / "report.html").read_text()
    doc = Doc(fed)
    assert len(doc.select("tr", within=doc.by_id("words"))) == 1 + 6
    assert _undated(fed) == _undated(write_report(run).read_text())


def test_an_env_with_both_hooks_reads_the_run_once(tmp_path: Path) -> None:
    """Both hooks and the page's own scan read one pass over episodes.jsonl."""
    run = _eval(tmp_path / "run")
    (run / "report.html").unlink()
    assert _opens(run / "episodes.jsonl", lambda: write_report(run)) == 1
    doc = Doc((run / "report.html").read_text())
    assert len(doc.select("title", within=doc.by_id("plot-words"))) == 2
    assert len(doc.select("tr", within=doc.by_id("words"))) == 1 + 4


@pytest.mark.parametrize("hooks", ["sections-first", "sections-raises"])
def test_a_second_hook_that_stops_reading_leaves_the_page_whole(tmp_path: Path, hooks: str) -> None:
    """The second hook reads the same pass; one that returns or raises after the
    first episode is handed nothing more, and the figure and the page count all 4."""
    run = _eval(tmp_path / "run", f"--env.hooks={hooks}")
    notes: list[str] = []
    _, doc = _page(run, notes)
    tips = sorted(t.text for t in doc.select("title", within=doc.by_id("plot-words")))
    assert tips == ["episodes · <b>word 0</b>: 2", "episodes · <b>word 1</b>: 2"]
    assert len(doc.select("details", cls="transcript")) == 4
    if hooks == "sections-first":
        assert not notes
        assert len(doc.select("tr", within=doc.by_id("words"))) == 1 + 1
    else:
        assert notes == [
            "env 'reportenv:WordsEnv': report_sections failed (RuntimeError: the section "
            "broke); left out"
        ]
        assert not doc.has_id("words")


def test_a_hook_returning_the_wrong_thing_is_left_out(tmp_path: Path) -> None:
    run = _eval(tmp_path / "run", "--env.hooks=wrong")
    notes: list[str] = []
    _, doc = _page(run, notes)
    assert notes == [
        "env 'reportenv:WordsEnv': report_sections failed (TypeError: returned str, "
        "not Section); left out"
    ]
    assert not doc.select("section", cls="env-section")
    assert doc.has_id("plot-words")


def test_an_env_not_installed_here_costs_only_its_part(tmp_path: Path) -> None:
    run = _eval(tmp_path / "run")
    config = run / "config.toml"
    config.write_text(config.read_text().replace("reportenv:WordsEnv", "gone-env"))
    notes: list[str] = []
    _, doc = _page(run, notes)
    assert len(notes) == 1
    assert notes[0].startswith("env 'gone-env' could not be built here (ConfigError: ")
    assert notes[0].endswith("any figures and sections of its own are left out")
    assert not doc.has_id("plot-words")
    assert not doc.has_id("words")
    assert doc.select("details", cls="transcript")


def test_the_public_report_module() -> None:
    assert taketurns.report.__all__ == [
        "EpisodeView",
        "Figure",
        "Section",
        "Series",
        "TraceView",
        "bar_chart",
        "details",
        "esc",
        "histogram",
        "num",
        "table",
    ]
    with pytest.raises(ValueError, match="an HTML id"):
        taketurns.report.Section("x", "", id="two words")


# --- the core names no built-in env ------------------------------------------------------

# The env the command runs a bare taskset under (``taketurns eval jsonl`` is
# ``taketurns eval single-agent --env.taskset=jsonl``): the CLI's contract names it.
# ``jsonl`` (a taskset of JSONL rows) is also the name of the format the core writes.
NOT_NAMES = ("single-agent", "jsonl")
# what the built-in envs are called, in prose as in ids
NAMES = ("kuhn", "poker", "telecom", "prisoner", "wordle", "textarena", "user-sim", "retail")
NAMES += ("bfcl", "alphabet", "codeword", "openenv", "reasoning-gym")


def _builtin_ids() -> list[str]:
    found = []
    for group in ("taketurns.envs", "taketurns.tasksets"):
        for ep in importlib.metadata.entry_points(group=group):
            if ep.value.startswith("taketurns.envs."):
                found.append(ep.name)
    return found


def _engine_sources() -> dict[Path, str]:
    files = sorted(ENGINE.rglob("*.py"))
    assert ENGINE / "_report" / "page.py" in files
    return {path: path.read_text(encoding="utf-8") for path in files}


def test_the_core_names_no_builtin_env() -> None:
    """No registered env or taskset id of ``taketurns.envs`` (as a word, not a file
    name such as ``episodes.jsonl``), nor a built-in env's name, anywhere under
    ``engine/``: code, comments and docstrings."""
    ids = _builtin_ids()
    assert {"kuhn-poker", "telecom-lite", "prisoners-dilemma", "retail-lite"} <= set(ids)
    words = [re.escape(i) for i in ids if i not in NOT_NAMES] + [re.escape(n) for n in NAMES]
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(words) + r")", re.IGNORECASE)
    found = [
        f"{path.relative_to(ENGINE.parent)}:{n}: {line.strip()}"
        for path, text in _engine_sources().items()
        for n, line in enumerate(text.splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
