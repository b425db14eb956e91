"""mypy over the package ``taketurns`` as it installs, with the settings in
pyproject.toml: every module of every package ``[tool.setuptools] packages`` lists,
named as it is imported. The folders map into the package by
``[tool.setuptools.package-dir]`` (engine/ is ``taketurns``, envs/ and harnesses/ its
subpackages), a mapping mypy cannot read from a checkout nor through an editable
install's import hook; so each file is handed to mypy's build with its module name.
The same for an editable install and a clean clone; errors name the checkout's files
(``engine/...``), as tracebacks do.

Run: ``python .ci/mypy_package.py`` (what ``bash .ci/typecheck`` runs)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def package_sources(pyproject: Path) -> list[BuildSource]:
    """Every module of the distribution's packages: (its file, its module name)."""
    setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    folders: dict[str, str] = setuptools["package-dir"]
    sources = []
    for package in setuptools["packages"]:
        # a package lies in its own folder, or in its nearest mapped parent's
        mapped = max((p for p in folders if package == p or package.startswith(f"{p}.")), key=len)
        rest = package.removeprefix(mapped).lstrip(".").split(".")
        folder = Path(folders[mapped], *filter(None, rest))
        if not (ROOT / folder / "__init__.py").is_file():
            raise SystemExit(f"pyproject.toml: package {package} has no {folder}/__init__.py")
        for path in sorted((ROOT / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            sources.append(BuildSource(str(path.relative_to(ROOT)), name))
    return sources


def main() -> int:
    sources = package_sources(ROOT / "pyproject.toml")
    _, options = process_options(
        ["--config-file", str(ROOT / "pyproject.toml")], require_targets=False
    )
    try:
        result = build.build(sources, options)
    except CompileError as exc:  # a blocking error: a file that does not parse, ...
        print("\n".join(exc.messages), file=sys.stderr)
        return 2
    if result.errors:
        print("\n".join(result.errors))
        return 1
    files = len({s.path for s in sources})
    print(f"Success: no issues found in {files} source files (package taketurns)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
