"""The public surface, in tiers (issue 28): each public module's ``__all__`` is pinned
here, complete and resolvable, and each name has one home (the everyday errors are
also in the whole tree, ``taketurns.errors``); every module's own ``__all__``
resolves; implementation modules are private (docs/design.md "The public surface"), and
the only public submodules are the deliberate ones."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import taketurns

PUBLIC_SUBMODULES = {
    "taketurns.env",
    "taketurns.envs",
    "taketurns.errors",
    "taketurns.harness",
    "taketurns.harnesses",
    "taketurns.http",
    "taketurns.report",
    "taketurns.taskset",
    "taketurns.testing",
    "taketurns.train",
}

# Every public module's ``__all__``, pinned: a name joins or leaves a tier on purpose.
TIERS: dict[str, list[str]] = {
    # what an env author and an eval user write with
    "taketurns": [
        *("Agent", "AgentConfig", "Agents", "AssistantMessage", "ChatSession", "ConfigError"),
        *("Env", "EnvConfig", "Episode", "EvalConfig", "EvalRun", "HarnessError"),
        *("Interrupted", "Judge", "JudgeConfig", "Limits", "Message", "ModelEndpointError"),
        *("OptionError", "Reply", "Resources", "Rubric", "RunDir", "Sampling"),
        *("SessionClosed", "SessionOver", "SystemMessage", "TaketurnsError", "Task"),
        *("Taskset", "TasksetConfig", "TasksetEnv", "Timeouts", "Tool", "ToolMessage"),
        *("Trace", "TurnError", "UserMessage", "is_failure", "load_eval_config", "metric"),
        *("open_rollouts", "read_episodes", "register_env", "register_taskset", "reward"),
        *("run_eval", "stop"),
    ],
    "taketurns.errors": [
        *("AsyncioCancelled", "BadRequest", "ConfigError", "HarnessError", "Interrupted"),
        *("ModelEndpointError", "ModelServerError", "OptionError", "OutputError"),
        *(
            "ReplayDiverged",
            "RolloutStopped",
            "ScoringError",
            "SessionClosed",
            "SessionError",
            "SessionOver",
        ),
        *("TaketurnsError", "ToolArgumentError", "TurnError", "WorkerDied", "WorkerError"),
        "WorkerLost",
    ],
    # a harness author's door, and what a harness and an env both build with (issue 41)
    "taketurns.harness": [
        *("Captured", "Endpoint", "ErrorInfo", "Harness", "ImagePart"),
        *("McpConnection", "McpServer", "McpTool", "NullHarness", "OwnedProcess"),
        *("Prompt", "Rollout", "Sandbox", "ServedHarness", "SessionState"),
        *("TextPart", "ToolCall", "as_tools", "can_chat", "create_in_scratch", "from_wire"),
        *(
            "harness_registry",
            "load_reference",
            "messages_from_wire",
            "messages_to_wire",
            "open_mcp_servers",
            "read_descriptor",
            "read_in_scratch",
            "run_asyncio",
            "run_owned",
        ),
        *("start_owned", "text_of", "to_wire", "tool_schema", "write_in_scratch"),
    ],
    # an env author's door (issue 41)
    "taketurns.env": [
        *("AgentStamp", "EpisodeInfo", "JudgeCall", "ModelClient", "ModelRequest"),
        *("ModelResponse", "PolicyProbe", "Turn", "TurnReward", "Usage"),
        *("at_least", "env_registry", "int_between", "one_of", "register_builtin_policy"),
        "roles_of",
    ],
    # a taskset author's door (issue 41)
    "taketurns.taskset": [
        *("open_taskset", "parse_verdict", "taskset_registry"),
    ],
    "taketurns.http": [
        *("AnthropicMessages", "ChatCompletions", "Dialect", "EndpointState", "Failure"),
        *("Gemini", "InterceptionServer", "OpenAIClient", "Parsed", "Responses"),
        *("dialect_registry", "open_interception_server", "serve"),
    ],
    "taketurns.train": [
        *("Group", "GroupStream", "LocalPolicy", "RolloutSource", "Sample", "TraceAdvantage"),
        *("TurnTokens", "episode_samples", "export_samples", "group_advantages"),
        *("load_policy", "make_group", "trace_samples", "turn_tokens"),
    ],
    "taketurns.report": [
        *("EpisodeView", "Figure", "Section", "Series", "TraceView", "bar_chart", "details"),
        *("esc", "histogram", "num", "table"),
    ],
    "taketurns.testing": [
        *("USAGE", "BuiltinModel", "ReplayDivergence", "ReplayResult", "ScriptedModel"),
        *("Sleep", "replay_episode", "run_episode"),
    ],
}
FACES = sorted(TIERS)
# the built-in plugins' packages export nothing themselves: their modules do
PLUGIN_PACKAGES = ("taketurns.envs", "taketurns.harnesses")


@pytest.mark.parametrize("face", FACES)
def test_each_public_modules_all_is_pinned(face: str) -> None:
    assert importlib.import_module(face).__all__ == TIERS[face]
    assert len(set(TIERS[face])) == len(TIERS[face])


def test_the_top_level_is_a_list_a_reader_can_hold() -> None:
    assert len(taketurns.__all__) <= 48
    assert taketurns.__all__ == sorted(taketurns.__all__)
    for package in PLUGIN_PACKAGES:
        assert not hasattr(importlib.import_module(package), "__all__"), package


def test_each_name_has_one_home_but_the_everyday_errors() -> None:
    homes: dict[str, list[str]] = {}
    for face, names in TIERS.items():
        for name in names:
            homes.setdefault(name, []).append(face)
    twice = {name: faces for name, faces in homes.items() if len(faces) > 1}
    # the errors taketurns itself exports are also in the whole tree, and only they
    assert twice == {
        name: ["taketurns", "taketurns.errors"]
        for name in TIERS["taketurns"]
        if name in TIERS["taketurns.errors"]
    }


@pytest.mark.parametrize(("face", "name"), [(face, name) for face in FACES for name in TIERS[face]])
def test_every_exported_name_resolves(face: str, name: str) -> None:
    value = getattr(importlib.import_module(face), name)  # lazily imported names too
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("taketurns."), f"{name} is from {value.__module__}"
        assert value.__module__ != face or face == "taketurns.testing", (
            f"{face}.{name}: define it in a private module, re-export it here"
        )


@pytest.mark.parametrize("face", FACES)
def test_everything_public_in_a_public_module_is_exported(face: str) -> None:
    module = importlib.import_module(face)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        # testing defines its doubles itself: what it imports to do so is not exported
        and (face != "taketurns.testing" or getattr(value, "__module__", None) == face)
    }
    assert public <= set(module.__all__), sorted(public - set(module.__all__))


def test_the_in_process_tiers_do_not_load_the_http_stack_or_the_runner() -> None:
    probe = (
        "import sys, taketurns, taketurns.errors, taketurns.harness, taketurns.testing\n"
        "import taketurns.train, taketurns.env, taketurns.taskset\n"
        "print(sorted(m for m in ('hypercorn', 'quart', 'quart_trio', 'rich', 'pyarrow',"
        " 'taketurns._runner', 'torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_eval_of_in_process_harnesses_does_not_load_the_http_stack(tmp_path: Path) -> None:
    """The plan asks whether a harness is served without importing the interception
    server (quart and hypercorn are a seventh of such an eval's start); an eval whose
    agents are all in process never needs it, and ``taketurns.open_rollouts`` is
    imported on first use like the runner."""
    probe = (
        "import sys\n"
        "from taketurns._cli.main import main\n"
        f"argv = ['eval', 'kuhn-poker', '-n', '1', '--no-progress', '-o', {str(tmp_path)!r}]\n"
        "assert main(argv) == 0\n"
        "print(sorted(m for m in ('hypercorn', 'quart', 'quart_trio', 'taketurns._http.served',"
        " 'taketurns._train.rollouts') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize(
    "face",
    ["taketurns", "taketurns.env", "taketurns.harness", "taketurns.train", "taketurns.testing"],
)
def test_an_unknown_name_is_an_attribute_error(face: str) -> None:
    with pytest.raises(AttributeError, match=f"module '{face}' has no attribute 'no_such_name'"):
        _ = importlib.import_module(face).no_such_name


def test_run_asyncio_lives_in_the_harness_door_and_the_env_door_still_has_it() -> None:
    """Its home is ``taketurns.harness`` (a harness's and an env's); code written when
    ``taketurns.env`` exported it still imports it from there."""
    import taketurns.env
    import taketurns.harness
    from taketurns.env import run_asyncio

    assert run_asyncio is taketurns.harness.run_asyncio is taketurns.env.run_asyncio
    assert "run_asyncio" not in vars(taketurns.env)


def _walk(package: str) -> set[str]:
    # each of the three folders on its own: an editable install maps envs/ and
    # harnesses/ into the package without putting them under engine/
    root = importlib.import_module(package)
    return {package} | {m.name for m in pkgutil.walk_packages(root.__path__, f"{package}.")}


MODULES = sorted(
    (_walk("taketurns") | _walk("taketurns.envs") | _walk("taketurns.harnesses"))
    - {"taketurns", "taketurns.__main__"}
)


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")[1:])


def test_implementation_modules_are_private() -> None:
    public = {
        m
        for m in MODULES
        if not _is_private(m) and not m.startswith(("taketurns.envs.", "taketurns.harnesses."))
    }
    assert public == PUBLIC_SUBMODULES
    # the layout the architecture is read from
    subpackages = {m for m in MODULES if m.count(".") == 1 and m.split(".")[1].startswith("_")}
    assert {
        "taketurns._exchange",
        "taketurns._models",
        "taketurns._http",
        "taketurns._eval",
        "taketurns._output",
        "taketurns._backends",
        "taketurns._report",
        "taketurns._cli",
        "taketurns._config",
    } <= subpackages


@pytest.mark.parametrize("module_name", MODULES)
def test_each_module_all_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [])
    for name in names:
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name!r}"


# -- one error root (docs/design.md "Errors", issue 23) -----------------------------------

_BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def _drawn_tree() -> dict[str, str]:
    """``taketurns._errors``'s docstring drawing read back: class name -> its parent."""
    import taketurns._errors

    doc = taketurns._errors.__doc__ or ""
    lines = doc.split("::", 1)[1].splitlines()
    root = next(line.strip() for line in lines if line.strip())
    parents: dict[str, str] = {}
    stack = [root]  # the last class drawn at each depth
    for line in lines:
        found = _BRANCH.match(line.strip("\n")[4:])  # the drawing is indented 4
        if found is None:
            continue
        depth = len(found["indent"]) // 4 + 1
        del stack[depth:]
        parents[found["name"]] = stack[depth - 1]
        stack.append(found["name"])
    return {root: "", **parents}


# control flow, not errors (issue 41): BaseExceptions, as trio's Cancelled, outside the tree
CONTROL_FLOW = {"RolloutStopped"}


def _exported_errors() -> dict[str, type[BaseException]]:
    """Every exception class a public module exports, by name (control flow apart)."""
    found: dict[str, type[BaseException]] = {}
    for face in FACES:
        module = importlib.import_module(face)
        for name in TIERS[face]:
            value = getattr(module, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                assert found.setdefault(name, value) is value, name
    assert set(found) >= CONTROL_FLOW
    return {name: cls for name, cls in found.items() if name not in CONTROL_FLOW}


def test_the_errors_module_holds_the_whole_tree() -> None:
    import taketurns.errors

    assert set(_exported_errors()) | CONTROL_FLOW == set(taketurns.errors.__all__)


def test_control_flow_is_no_error_a_harness_can_swallow() -> None:
    import taketurns._errors
    import taketurns.errors

    for name in CONTROL_FLOW:
        cls = getattr(taketurns.errors, name)
        assert issubclass(cls, BaseException), name
        assert not issubclass(cls, Exception), name  # `except Exception` lets it through
        assert cls.__module__ == "taketurns._errors", name
        assert f"``{name}``" in (taketurns._errors.__doc__ or "").split("::", 1)[1], name
        assert name not in _drawn_tree(), name


def test_the_drawn_error_tree_is_the_exported_one() -> None:
    tree = _drawn_tree()
    exported = _exported_errors()
    assert set(tree) == set(exported)
    for name, parent in tree.items():
        cls = exported[name]
        assert cls.__module__ == "taketurns._errors", name  # all in one module
        ours = [b.__name__ for b in cls.__bases__ if issubclass(b, taketurns.TaketurnsError)]
        assert ours == ([parent] if parent else []), (name, ours, parent)


def test_every_exported_error_has_the_one_root() -> None:
    for name, cls in _exported_errors().items():
        assert issubclass(cls, taketurns.TaketurnsError), name
    # the foreign bases they had before the root was theirs are kept
    for name in ("OptionError", "TurnError", "BadRequest", "ToolArgumentError"):
        assert issubclass(_exported_errors()[name], ValueError), name


def test_no_core_module_defines_an_error_class_but_the_errors_module() -> None:
    for module_name in MODULES:
        if module_name == "taketurns._errors" or module_name.startswith(
            ("taketurns.envs", "taketurns.harnesses")
        ):
            continue  # the errors module; built-in plugins, written against the public API
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module_name
                and not name.startswith("_")  # a module's private detail, never raised out
            ):
                raise AssertionError(f"{module_name}.{name}: define it in taketurns._errors")
