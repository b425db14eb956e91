"""Rewrite code written against the flat ``taketurns`` namespace to the tiers of issue
28, as ``tools/api_moves.txt`` says:

- ``from taketurns import A, B as C, ...`` (one line or parenthesised, in ``.py``
  files and in Markdown code) becomes one ``from M import ...`` per module the names
  live in now, ``taketurns`` first;
- ``taketurns.NAME`` (an attribute, or a dotted name in text) becomes
  ``taketurns.M.NAME``; a ``.py`` file that did so and has ``import taketurns`` gets
  ``import taketurns.M`` beside it;
- ``._old`` attributes renamed by the file (``attribute: _old -> new``) become ``.new``;
- a name that moved between two public modules (``NAME: taketurns.harness ->
  taketurns.env``, issue 41's doors by audience) is rewritten the same way in ``from
  taketurns.harness import ...`` and ``taketurns.harness.NAME``.

Then, for the ``.py`` files it changed, ``ruff check --select I --fix`` and
``ruff format`` (unless ``--no-ruff``). Prints each file it changed.

Run: ``python tools/rewrite_imports.py [--moves tools/api_moves.txt] PATH...`` (a
directory means its ``.py`` and ``.md`` files). The files whose strings are samples of
the old names (this tool, its test, the private reach-in test) are passed over.

Merging a branch written against the flat namespace: merge; where ``engine/__init__.py``
conflicts keep the tiers' version; give each name the branch added to
``taketurns.__all__`` a tier (its face module, ``TIERS`` in tests/test_exports.py and a
line here in api_moves.txt); run this tool on the files the branch changed
(``git diff --name-only BASE BRANCH``); add a new private subpackage to ``FLOORS`` in
tests/test_packaging.py; then ruff, ``bash .ci/typecheck`` and tests/test_exports.py,
test_packaging.py and test_api_moves.py."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# their strings are samples of the old names, on purpose
SAMPLES = ("tools/rewrite_imports.py", "tests/test_api_moves.py", "tests/test_packaging.py")
TOP = "taketurns"
WIDTH = 100


def _from_re(module: str) -> re.Pattern[str]:
    return re.compile(
        rf"^(?P<indent>[ \t]*)from {re.escape(module)} import "
        r"(?:\((?P<multi>[^)]*)\)|(?P<single>[^\n()#]*[^\s\n()#]))(?P<comment>[ \t]*#[^\n]*)?$",
        re.MULTILINE,
    )


_FROM = _from_re(TOP)


def read_tier_moves(path: Path) -> dict[str, dict[str, str]]:
    """old public module (not ``taketurns``) -> (name -> its new module)."""
    tiers: dict[str, dict[str, str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        key, _, rest = line.partition(":")
        old, arrow, new = (part.strip() for part in rest.partition("->"))
        if arrow and key.strip() != "attribute" and old != TOP:
            tiers.setdefault(old, {})[key.strip()] = new
    return tiers


def read_moves(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> its new module, old attribute -> new attribute): the names that left
    ``taketurns`` (``read_tier_moves``: those that moved between other modules)."""
    names: dict[str, str] = {}
    attributes: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, rest = line.partition(":")
        old, arrow, new = rest.partition("->")
        if not arrow:
            raise SystemExit(f"{path}:{number}: expected 'NAME: OLD -> NEW', got {raw!r}")
        if key.strip() == "attribute":
            attributes[old.strip()] = new.strip()
        elif old.strip() == TOP:
            names[key.strip()] = new.strip()
        elif not old.strip().startswith(f"{TOP}."):
            raise SystemExit(f"{path}:{number}: only names that left {TOP} modules are handled")
    return names, attributes


def _statement(indent: str, module: str, names: list[str], comment: str) -> str:
    one = f"{indent}from {module} import {', '.join(names)}{comment}"
    if len(one) <= WIDTH:
        return one
    inner = "".join(f"{indent}    {name},\n" for name in names)
    return f"{indent}from {module} import ({comment}\n{inner}{indent})"


def _split_imports(match: re.Match[str], moves: dict[str, str], top: str = TOP) -> str:
    body = match["multi"] if match["multi"] is not None else match["single"]
    items = [
        item.strip()
        for line in body.splitlines()
        for item in line.split("#", 1)[0].split(",")
        if item.strip()
    ]
    by_module: dict[str, list[str]] = {}
    for item in items:
        name = item.split(" as ")[0].strip()
        by_module.setdefault(moves.get(name, top), []).append(item)
    if set(by_module) == {top}:
        return match[0]
    order = sorted(by_module, key=lambda m: (m != top, m))
    comment = match["comment"] or ""
    return "\n".join(
        _statement(match["indent"], module, by_module[module], comment if i == 0 else "")
        for i, module in enumerate(order)
    )


def rewrite(text: str, moves: dict[str, str], attributes: dict[str, str]) -> tuple[str, set[str]]:
    """The rewritten text, and the modules now reached as ``taketurns.M.NAME``."""
    text = _FROM.sub(lambda m: _split_imports(m, moves), text)
    dotted: set[str] = set()
    if moves:
        pattern = re.compile(
            r"(?<![\w.])taketurns\.(" + "|".join(map(re.escape, sorted(moves))) + r")\b"
        )

        def to_module(m: re.Match[str]) -> str:
            dotted.add(moves[m[1]])
            return f"{moves[m[1]]}.{m[1]}"

        text = pattern.sub(to_module, text)
    for old, new in attributes.items():
        text = re.sub(rf"\.{re.escape(old)}\b", f".{new}", text)
    return text, dotted


def rewrite_tiers(text: str, tiers: dict[str, dict[str, str]]) -> tuple[str, set[str]]:
    """``rewrite`` for the names that moved from one public module to another."""
    dotted: set[str] = set()
    for old, moves in tiers.items():
        split = _from_re(old)
        text = split.sub(lambda m, moves=moves, old=old: _split_imports(m, moves, old), text)
        pattern = re.compile(
            rf"(?<![\w.]){re.escape(old)}\.(" + "|".join(map(re.escape, sorted(moves))) + r")\b"
        )

        def to_module(m: re.Match[str], moves: dict[str, str] = moves) -> str:
            dotted.add(moves[m[1]])
            return f"{moves[m[1]]}.{m[1]}"

        text = pattern.sub(to_module, text)
    return text, dotted


def _add_module_imports(text: str, modules: set[str]) -> str:
    for module in sorted(modules):
        if re.search(rf"^\s*import {re.escape(module)}\b", text, re.MULTILINE):
            continue
        text, found = re.subn(
            r"^(?P<indent>[ \t]*)import taketurns$",
            lambda m, module=module: f"{m[0]}\n{m['indent']}import {module}",
            text,
            count=1,
            flags=re.MULTILINE,
        )
        if not found:
            print(f"  note: uses {module} without 'import taketurns'; check its imports")
    return text


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in (".py", ".md"))
        else:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--moves", type=Path, default=HERE / "api_moves.txt")
    parser.add_argument("--no-ruff", action="store_true", help="leave imports unsorted")
    args = parser.parse_args(argv)
    moves, attributes = read_moves(args.moves)
    tiers = read_tier_moves(args.moves)
    changed: list[Path] = []
    for path in _files(args.paths):
        if path.resolve().as_posix().endswith(SAMPLES):
            print(f"{path}: passed over (its strings are samples of the old names)")
            continue
        text = path.read_text()
        new, dotted = rewrite(text, moves, attributes)
        new, more = rewrite_tiers(new, tiers)
        dotted |= more
        if path.suffix == ".py" and dotted:
            new = _add_module_imports(new, dotted)
        if new != text:
            path.write_text(new)
            changed.append(path)
            print(path)
    python = [str(p) for p in changed if p.suffix == ".py"]
    if python and not args.no_ruff:
        ruff = [sys.executable, "-m", "ruff"]
        subprocess.run([*ruff, "check", "-q", "--select", "I", "--fix", *python], check=False)
        subprocess.run([*ruff, "format", "-q", *python], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
