"""Fixtures shared by the tests of out-of-process agent harnesses (a helper module, not
a conftest: a test module imports the fixtures it uses)."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from taketurns.http import InterceptionServer, open_interception_server


@pytest.fixture(autouse=True)
def scratch_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's rollouts make their scratch directories."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running
