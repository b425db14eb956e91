"""The distribution: one import package, ``taketurns``, that installs beside the PyPI
packages that own the top-level names ``envs`` and ``harnesses`` without touching them;
and an import graph free of cycles, with the core (engine/) never importing the built-in
envs or harnesses (docs/design.md "The floors").

The wheel is built from this checkout and installed into a fresh virtualenv (it sees
the running interpreter's site-packages for taketurns' own dependencies, also when the
tests run inside a virtualenv: see ``_fresh_venv``) beside ``envs==1.4`` and
``harnesses==0.1.1``, all with ``--no-deps``; the neighbours come from the package
index, as a user's would."""

from __future__ import annotations

import ast
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = {"engine": "taketurns", "envs": "taketurns.envs", "harnesses": "taketurns.harnesses"}
NEIGHBOURS = ("envs==1.4", "harnesses==0.1.1")


def _run(*cmd: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{cmd}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, REPO,
    )  # fmt: skip
    (built,) = out.glob("taketurns-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"taketurns"}
    for module in ("__init__.py", "envs/kuhn.py", "harnesses/program.py", "_exchange/null.py"):
        assert f"taketurns/{module}" in names
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    )
    targets = [
        line.split("=", 1)[1].strip() for line in entry_points.decode().splitlines() if "=" in line
    ]
    assert targets
    assert all(t.startswith("taketurns.") for t in targets), targets


def _fresh_venv(home: Path) -> Path:
    """A new virtualenv at ``home`` that sees the dependencies this interpreter sees;
    its python. ``venv`` builds on the base interpreter, whose site-packages the new
    environment gets (``system_site_packages``); when the tests run inside a virtualenv,
    that one's site-packages are added too (a ``.pth`` file running
    ``site.addsitedir``, so their own ``.pth`` files work), after the new
    environment's own: what is installed into it wins."""
    venv.create(home, system_site_packages=True, with_pip=True)
    python = home / "bin" / "python"
    base = Path(sys.base_prefix).resolve()
    parents = [p for p in site.getsitepackages() if not Path(p).resolve().is_relative_to(base)]
    if parents:
        purelib = sysconfig.get_path("purelib", vars={"base": str(home), "platbase": str(home)})
        lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
        (Path(purelib) / "_taketurns_test_parent_site.pth").write_text(lines)
    return python


def test_a_fresh_venv_sees_this_interpreters_dependencies(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    probe = "import cattrs, trio, httpx2, sys; print(sys.prefix)"
    assert _run(python, "-c", probe).strip() == str(tmp_path / "venv")


@pytest.mark.slow
def test_installs_beside_envs_and_harnesses_each_still_itself(wheel: Path, tmp_path: Path) -> None:
    home = tmp_path / "venv"
    python = _fresh_venv(home)
    _run(python, "-m", "pip", "install", "-q", "--no-deps", *NEIGHBOURS)
    _run(python, "-m", "pip", "install", "-q", "--no-deps", wheel)
    probe = (
        "import importlib.metadata as md, pathlib, sys\n"
        "import envs, taketurns\n"
        "from taketurns import Agent, Env, Task, reward, run_eval\n"
        "from taketurns.envs.kuhn import KuhnPoker\n"
        "import taketurns.harnesses.program\n"
        "site = pathlib.Path(sys.prefix)\n"
        "assert pathlib.Path(taketurns.__file__).is_relative_to(site), taketurns.__file__\n"
        "assert pathlib.Path(envs.__file__).is_relative_to(site), envs.__file__\n"
        "assert envs.validate_boolean('true') is True  # the PyPI envs, intact\n"
        "h = pathlib.Path(envs.__file__).parents[1] / 'harnesses' / '__init__.py'\n"
        "assert '__version__ = \"0.1.1\"' in h.read_text()  # the PyPI harnesses, intact\n"
        "ours = {str(f).split('/')[0] for f in md.files('taketurns')}\n"
        "assert ours - {'..'} == {'taketurns', 'taketurns-0.1.0.dist-info'}, ours\n"
        "print('ok')\n"
    )
    assert _run(python, "-c", probe, cwd=tmp_path).strip() == "ok"
    # the console script runs the main job from that install
    out = tmp_path / "run"
    _run(home / "bin" / "taketurns", "eval", "kuhn-poker", "-n", "2", "-o", out, "--no-progress")
    assert (out / "episodes.jsonl").read_text().count("\n") == 2


# --- the import graph -------------------------------------------------------------


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(REPO).with_suffix("").parts
    parts = [FOLDERS[folder], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module ``module`` imports, at module level or inside functions (a lazy
    import is still a dependency), leaving out ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    files = [p for folder in FOLDERS for p in (REPO / folder).rglob("*.py")]
    names = {_module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        deps = _imports(tree, name, path.name == "__init__.py")
        graph[name] = {d for d in deps if d in names and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_import_graph_has_no_cycles() -> None:
    graph = _graph()
    assert len(graph) > 60  # the walk saw the whole package
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles(graph) == []


def test_the_core_never_imports_the_built_in_envs_or_harnesses() -> None:
    graph = _graph()
    core = {m for m in graph if not m.startswith(("taketurns.envs", "taketurns.harnesses"))}
    for module in sorted(core):
        bad = {d for d in graph[module] if d.startswith(("taketurns.envs", "taketurns.harnesses"))}
        assert not bad, f"{module} imports {sorted(bad)}"


# what a plugin may import of taketurns: the public tiers (not the test doubles)
PLUGIN_API = {
    "taketurns",
    "taketurns.env",
    "taketurns.errors",
    "taketurns.harness",
    "taketurns.http",
    "taketurns.report",
    "taketurns.taskset",
    "taketurns.train",
}


def _beyond_the_api(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a built-in env or harness that reach past the public tiers."""
    plugins = ("taketurns.envs", "taketurns.harnesses")
    return sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith(plugins)
        for dep in deps
        if dep.startswith("taketurns") and not dep.startswith(plugins) and dep not in PLUGIN_API
    )


def test_built_in_envs_and_harnesses_use_only_the_public_api() -> None:
    toy = {
        "taketurns.envs.k": {"taketurns", "taketurns.harness", "taketurns.envs.kuhn_rules"},
        "taketurns.harnesses.h": {"taketurns._exchange.harness", "taketurns.testing"},
    }
    assert _beyond_the_api(toy) == [
        "taketurns.harnesses.h -> taketurns._exchange.harness",
        "taketurns.harnesses.h -> taketurns.testing",
    ]
    assert _beyond_the_api(_graph()) == []


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


# The floors of the package, top first: a unit (a subpackage, a top-level module, or
# one of the two plugin folders) imports only from floors below its own, never
# sideways. The public faces (``taketurns`` and its public modules) re-export the
# private units below them; the built-in plugins see nothing but those faces.
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        {"taketurns.envs", "taketurns.harnesses", "taketurns.__main__"},
        {"taketurns._cli"},
        {
            "taketurns",
            "taketurns.env",
            "taketurns.errors",
            "taketurns.harness",
            "taketurns.http",
            "taketurns.report",
            "taketurns.taskset",
            "taketurns.testing",
            "taketurns.train",
        },
        {"taketurns._runner", "taketurns._view"},
        {
            "taketurns._backends",
            "taketurns._replay",
            "taketurns._report",
            "taketurns._rescore",
            "taketurns._train",
        },
        {"taketurns._output"},
        {"taketurns._eval"},
        {"taketurns._http"},
        {"taketurns._exchange"},
        {"taketurns._config", "taketurns._models"},
        {"taketurns._errors", "taketurns._gc", "taketurns._procs", "taketurns._startup"},
    )
)


def _unit(module: str) -> str:
    if module.startswith(("taketurns.envs", "taketurns.harnesses")):
        return ".".join(module.split(".")[:2])
    return _subpackage(module)


def _floor_of(unit: str) -> int:
    found = [i for i, floor in enumerate(FLOORS) if unit in floor]
    assert found, f"{unit} stands on no floor: add it to FLOORS (tests/test_packaging.py)"
    return found[0]


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """The imports that go sideways or up a floor, ``module -> dependency``."""
    return sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if _unit(dep) != _unit(module) and _floor_of(_unit(dep)) <= _floor_of(_unit(module))
    )


def test_every_import_goes_down_a_floor() -> None:
    toy = {
        "taketurns._train.x": {"taketurns._report.y", "taketurns._train.z", "taketurns._eval.e"},
        "taketurns._models.a": {"taketurns._exchange.b"},
        "taketurns.envs.k": {"taketurns", "taketurns._exchange.b"},
    }
    assert _upward(toy) == [
        "taketurns._models.a -> taketurns._exchange.b",
        "taketurns._train.x -> taketurns._report.y",
    ]
    assert _upward(_graph()) == []


def test_the_engines_subpackages_depend_downward_only() -> None:
    graph = _graph()
    layers: dict[str, set[str]] = {}
    for module, deps in graph.items():
        if module.startswith(("taketurns.envs", "taketurns.harnesses")) or module == "taketurns":
            continue
        layers.setdefault(_subpackage(module), set()).update(
            _subpackage(d) for d in deps if d != "taketurns"
        )
    for layer, deps in layers.items():
        deps.discard(layer)
    assert _cycles(layers) == [], layers


# --- seams, not reach-ins ------------------------------------------------------------

# private names of other libraries the core reads, each for a reason
FOREIGN_PRIVATES = {
    "_SubParsersAction",  # argparse: the only way to walk a parser's subcommands
    "_actions",  # argparse: a parser's options, for the catalog of flags
    "_taketurns_offline",  # a mark the textarena env puts on nltk.download, read back there
    "_load_scenario",  # BFCL's backends load their scenario only through it
}


def _defined_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, attributes set on
    anything, slots and class-level assignments."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)  # __slots__ entries, attrs' private fields by name
    return {name for name in found if name.startswith("_")}


def _reach_ins(path: Path, root: Path = REPO) -> list[str]:
    """``expr._name`` where ``expr`` is not ``self``/``cls`` and no part of this
    module defines ``_name``: another module's private, read from outside."""
    tree = ast.parse(path.read_text(), str(path))
    own = _defined_privates(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in own or node.attr in FOREIGN_PRIVATES:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
            continue
        target = ast.unparse(node.value)
        if target.split(".")[0] in {"taketurns", "sys", "os", "trio", "attrs"}:
            continue  # a private module by its dotted path, or the stdlib's own privates
        found.append(f"{path.relative_to(root)}:{node.lineno}: {target}.{node.attr}")
    return found


def test_no_module_reaches_into_anothers_privates(tmp_path: Path) -> None:
    files = sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))
    assert [hit for path in files for hit in _reach_ins(path)] == []
    sample = tmp_path / "engine" / "sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "class A:\n    def __init__(self): self._own = 1\n"
        "def f(a, rollout): return a._own, rollout._start_segment()\n"
    )
    hits = [h.split(": ", 1)[1] for h in _reach_ins(sample, tmp_path)]
    assert hits == ["rollout._start_segment"]
