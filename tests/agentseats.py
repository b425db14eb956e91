"""Fixtures shared by the tests of out-of-process agent harnesses (a helper module, not
a conftest: a test module imports the fixtures it uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from taketurns.http import InterceptionServer, open_interception_server


@pytest.fixture(autouse=True)
def scratch_root(private_tmpdir: Path) -> Path:
    """Where this test's rollouts make their scratch directories: the test's own
    ``TMPDIR`` (``tests/conftest.py``), short enough for the interception server's
    socket directory to be made there too (past 90 bytes it falls back to ``/tmp``,
    where a leftover fails no test)."""
    return private_tmpdir


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running
