"""What a test module needs installed: imported, or the test fails naming the fix.

The suite never skips for a missing package (``bash .ci/run`` installs everything it
needs): ``needed("torch", "the learn extra")`` returns the module, or fails the test
(or the module's collection) with one line saying what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def needed(module: str, install: str) -> ModuleType:
    """``module``, imported; a missing one fails with ``install`` (what brings it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"{module} is not installed ({exc}): {install}", pytrace=False)
