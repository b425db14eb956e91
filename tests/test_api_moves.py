"""``tools/api_moves.txt`` (where each name that left ``taketurns.__all__`` lives now)
agrees with the tiers, and ``tools/rewrite_imports.py`` rewrites code by it."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import taketurns

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rewrite_imports", TOOLS / "rewrite_imports.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_moved_name_is_exported_where_the_file_says() -> None:
    moves, attributes = _tool().read_moves(TOOLS / "api_moves.txt")
    assert len(moves) >= 76  # of the flat namespace's 124 names, 76 left the top level
    for name, module in moves.items():
        assert name not in taketurns.__all__, name
        assert name in importlib.import_module(module).__all__, (name, module)
    assert attributes == {
        "_start_segment": "start_segment",
        "_segment_messages": "segment_messages",
        "_remove_scratch": "remove_scratch",
        "_unlimited": "unlimited",
    }


def test_imports_are_split_by_the_module_each_name_lives_in() -> None:
    tool = _tool()
    moves = {"Rollout": "taketurns.harness", "Group": "taketurns.train"}
    source = (
        "from taketurns import (\n    Agent,\n    Group as G,  # a note\n    Rollout,\n)\n"
        "    from taketurns import Rollout\n"
        "x = taketurns.Rollout, taketurns.Agent, taketurns.harness.Rollout\n"
        "rollout._start_segment(); boundary._unlimited\n"
    )
    text, dotted = tool.rewrite(source, moves, {"_start_segment": "start_segment"})
    assert text == (
        "from taketurns import Agent\n"
        "from taketurns.harness import Rollout\n"
        "from taketurns.train import Group as G\n"
        "    from taketurns.harness import Rollout\n"
        "x = taketurns.harness.Rollout, taketurns.Agent, taketurns.harness.Rollout\n"
        "rollout.start_segment(); boundary._unlimited\n"
    )
    assert dotted == {"taketurns.harness"}


def test_the_command_rewrites_a_file_and_adds_the_module_import(tmp_path: Path) -> None:
    code = tmp_path / "plugin.py"
    code.write_text(
        "import taketurns\nfrom taketurns import Agent, messages_to_wire\n\n"
        "print(Agent, messages_to_wire, taketurns.Rollout)\n"
    )
    subprocess.run(
        [sys.executable, TOOLS / "rewrite_imports.py", "--no-ruff", tmp_path],
        check=True,
        capture_output=True,
    )
    assert code.read_text() == (
        "import taketurns\nimport taketurns.harness\nfrom taketurns import Agent\n"
        "from taketurns.harness import messages_to_wire\n\n"
        "print(Agent, messages_to_wire, taketurns.harness.Rollout)\n"
    )
