"""Suite-wide set-up.

- Tests that interrupt a child process rely on SIGINT reaching it. A shell starts a
  background job (``pytest ... &`` with job control off, as `nohup` runs do) with
  SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
  ``taketurns`` the tests start would then shrug off the SIGINT they send, and Python
  would not install its own handler. Restoring Python's handler here gives every
  child the default disposition again.
- Every test runs with a private ``TMPDIR`` (``private_tmpdir``: this process's and
  every child's), which must hold no rollout scratch and no interception socket
  directory once the test is over: what an eval killed, crashed or interrupted by a
  test leaves behind fails that test, instead of lying in the machine's temp
  directory.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

LEFTOVERS = ("taketurns-", "interception-")  # what the engine makes in TMPDIR


@pytest.fixture(autouse=True)
def private_tmpdir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The test's own ``TMPDIR``, in pytest's base temp directory (short enough for
    an interception socket's path to fit a Unix socket's 108 bytes, and inside the
    folder an agent program in ``tmp_path`` would have bound as its install tree, so
    that it is not); after the test, asserted free of leftovers, then removed."""
    path = Path(tempfile.mkdtemp(prefix="tt-", dir=tmp_path_factory.getbasetemp()))
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    yield path
    left = sorted(p.name for p in path.iterdir() if p.name.startswith(LEFTOVERS))
    shutil.rmtree(path, ignore_errors=True)
    assert left == [], f"the test left these in its TMPDIR ({path}): {left}"
