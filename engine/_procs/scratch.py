"""The engine's files in a rollout's scratch directory, which the rollout's own
processes may write too.

A sandboxed agent can leave anything in its scratch between two segments: a link named
like the next prompt file (pointing at ``/etc/passwd`` or ``/root/.bashrc``), a FIFO
named like the output file it is expected to write. The engine (root, when the eval
runs as root) must neither write through such a link, nor read another file through
it, nor block on a FIFO. So every file the engine writes or reads there goes through
this module, which walks from the scratch's root (``root``: made by the engine, where
the agent cannot replace it) one component at a time without following a link:

- ``create``: a new regular file at ``path``, whatever the agent left under that name
  removed first (never followed), opened exclusively; a link on the way to it (a
  folder the agent replaced by a link) raises ``OSError``;
- ``write_text``: ``create`` and write;
- ``read_bytes``: the file's bytes, None when nothing is there; ``OSError`` when it is
  a link, or anything but a regular file (a FIFO is not waited on).

Files the agent may swap while it runs (its captured output) are read from the
descriptor the engine kept (``read_all``), never reopened by name. All of it is
synchronous: a few KiB in the rollout's private temp directory (the page cache, not
the network) take microseconds, a thread round trip (``trio.Path``) about a hundred.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["create", "read_all", "read_bytes", "write_text"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 65536


def _parent(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> tuple[int, str]:
    """An open descriptor of ``path``'s folder, reached from ``root`` without following
    a link, and ``path``'s last component. ``ValueError`` when ``path`` is not below
    ``root`` (``..`` in it included)."""
    parts = Path(path).relative_to(root).parts
    if not parts:
        raise ValueError(f"{path} is the scratch directory itself, not a file in it")
    if ".." in parts:  # lexically below root, but a walk would climb out of it
        raise ValueError(f"{path} climbs out of the scratch directory {root}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def create(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> int:
    """A new, empty regular file at ``path`` (below ``root``), opened for reading and
    writing; its descriptor (the caller closes it). What was at ``path`` is removed
    first (a link itself, not what it points at)."""
    folder, name = _parent(root, path)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, flags, 0o666, dir_fd=folder)
    finally:
        os.close(folder)


def write_text(root: str | os.PathLike[str], path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8) as a new file at ``path`` (``create``)."""
    fd = create(root, path)
    try:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """All of the file open at ``fd``, from its start (whatever its offset)."""
    chunks, at = [], 0
    while chunk := os.pread(fd, _CHUNK, at):
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def read_bytes(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of the regular file at ``path`` (below ``root``); None when nothing is
    there. ``OSError`` for a link or anything but a regular file."""
    try:
        folder, name = _parent(root, path)
    except FileNotFoundError:
        return None
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=folder)
        except FileNotFoundError:
            return None
    finally:
        os.close(folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return read_all(fd)
    finally:
        os.close(fd)
