"""Reference agent programs run out of process by the ``program`` and ``stateful``
harnesses. They know nothing of taketurns: they read ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` like any OpenAI client, and exchange JSON with the harness: in
files, or (``chat --serve``) as lines on stdin and stdout, each line naming the
endpoint of the rollout it belongs to."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["command"]


def command(name: str) -> tuple[str, ...]:
    """The command line that runs the reference program ``name`` (``chat``,
    ``stateful``): this interpreter on the program's file, ``-S`` (no ``site``: the
    programs use the standard library alone), so neither the ``taketurns`` package
    nor site-packages is imported and a program started per segment starts fast.
    ``python -m taketurns.harnesses.programs.NAME`` runs the same program."""
    return (sys.executable, "-S", str(Path(__file__).with_name(f"{name}.py")))
