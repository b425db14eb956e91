"""What the repository's files cite ships with them: no docstring, comment, test or page
cites a file outside the repository (the design document is ``docs/design.md``), and
every test the manual names (``tests/test_x.py::test_name``) exists.

Files are read from the checkout (every text file under the folders that hold code,
docs and tests, and the top-level files); ``.ci/run`` alone may name the nltk data
that lies beside a checkout on the CI machine (it sets ``NLTK_DATA`` from it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("engine", "envs", "harnesses", "tests", "benchmarks", "tools", "examples", "docs", ".ci")
SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini", ".sh", ".json", ""}
# files outside the repository that a clone does not have (spelt in pieces, so that
# this file does not cite them itself)
OUTSIDE = re.compile(
    "|".join(
        (
            r"\b" + "DESIGN" + r"\.md",
            r"\b" + "NOTES" + r"\.md",
            r"\b" + "STYLE" + r"\.md",
            r"\.\./" + "shared",
            "/work" + "/shared",
        )
    )
)
# (file, the one use it may make): .ci/run reads the nltk data beside the checkout
ALLOWED = {(".ci/run", "../" + "shared/nltk_data")}


def _files() -> list[Path]:
    found = [
        p
        for p in ROOT.iterdir()
        if p.is_file() and p.suffix in SUFFIXES and not p.name.startswith(".git")
    ]
    for folder in FOLDERS:
        found += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
        ]
    return sorted(found)


def _citations(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    name = path.relative_to(ROOT).as_posix()
    cited = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in OUTSIDE.finditer(line):
            rest = line[match.start() :]
            if not any(name == file and rest.startswith(use) for file, use in ALLOWED):
                cited.append(f"{name}:{number}: {line.strip()}")
    return cited


def test_the_walk_sees_the_repository() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"README.md", "docs/design.md", "engine/_exchange/session.py", ".ci/run"} <= names
    assert OUTSIDE.search("see " + "DESIGN" + ".md")
    assert OUTSIDE.search("../" + "shared/x")


def test_no_file_cites_a_file_outside_the_repository() -> None:
    cited = [c for path in _files() for c in _citations(path)]
    assert not cited, "cites a file outside the repository (cite docs/design.md):\n" + "\n".join(
        cited
    )


def _pages() -> dict[str, str]:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def _named_tests() -> list[tuple[str, str, str]]:
    """(page, test file, test name) of every ``tests/x.py::name`` a page names."""
    return sorted(
        {
            (page, file, name)
            for page, text in _pages().items()
            for file, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", text)
        }
    )


def _tests_of(file: str) -> set[str]:
    tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, functions) and node.name.startswith("test")
    }


def test_the_design_names_tests() -> None:
    assert sum(page == "docs/design.md" for page, _, _ in _named_tests()) > 50


@pytest.mark.parametrize(("page", "file", "name"), _named_tests())
def test_a_test_the_manual_names_exists(page: str, file: str, name: str) -> None:
    assert (ROOT / file).is_file(), f"{page} names {file}, which does not exist"
    assert name in _tests_of(file), f"{page} names {file}::{name}, which does not exist"
