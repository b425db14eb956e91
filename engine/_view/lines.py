"""A growing ``episodes.jsonl`` read incrementally: the byte offset of each complete
line, in an ``array('q')`` (8 bytes a line: a 500,000-episode run costs 4 MB), and
the lines themselves read back by number with ``pread``.

``extend`` reads only what was appended since it last ran (the byte offset where the
last complete line ended is kept), never the whole file again. A line is complete
once its newline is written (the writer appends whole batches, but a reader may see
a write half done). A line of any length is indexed in bounded memory and time: a
step that finds no newline remembers how far it looked (``scanned``), and the next
step reads on from there, never the same bytes again. When the file is replaced or
shrinks (a ``--resume`` tidies it: ``RunDir.tidy`` renames a new file into place) the
index starts over and ``generation`` grows, so followers know to start over too.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LineIndex"]

CHUNK = 4 << 20  # bytes read per step of ``extend``
BLOCK = 1 << 20  # bytes read at once by ``read``


class LineIndex:
    """The complete lines of one file; see the module docstring."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.starts = array("q")
        self.end = 0  # byte offset just past the last complete line indexed
        self.scanned = 0  # bytes after ``end`` already searched for a newline
        self.generation = 0
        self._inode: int | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def extend(self, limit: int = CHUNK) -> bool:
        """Index up to ``limit`` more bytes of complete lines (sync: a page-cache read);
        True when the end of the file was reached. Starts over (``generation`` + 1)
        when the file was replaced or cut."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            self._reset(None)
            return True
        try:
            st = os.fstat(fd)
            if st.st_ino != self._inode or st.st_size < self.end + self.scanned:
                self._reset(st.st_ino)
            at = self.end + self.scanned
            data = os.pread(fd, min(limit, max(st.st_size - at, 0)), at)
        finally:
            os.close(fd)
        last = data.rfind(b"\n")
        if last < 0:  # a line longer than this step: read on from here next time
            self.scanned += len(data)
            return len(data) < limit
        starts, find = self.starts, data.find
        starts.append(self.end)  # the line begun at ``end`` (maybe steps ago) ends here
        pos = find(b"\n") + 1
        while pos <= last:
            starts.append(at + pos)
            pos = find(b"\n", pos) + 1
        # the bytes after the last newline hold none: the next step reads on after them
        self.end, self.scanned = at + last + 1, len(data) - last - 1
        return len(data) < limit

    def _reset(self, inode: int | None) -> None:
        if self._inode is not None or self.end:
            self.generation += 1
        self._inode = inode
        self.starts = array("q")
        self.end = self.scanned = 0

    def read(self, first: int, stop: int) -> Iterator[tuple[int, bytes]]:
        """(line number from 0, raw line without its newline) for lines
        ``first <= n < stop`` of the index, read in blocks of about ``BLOCK`` bytes."""
        stop = min(stop, len(self.starts))
        if first >= stop:
            return
        with self.path.open("rb") as f:
            n = first
            while n < stop:
                begin = self.starts[n]
                last = n
                while last + 1 < stop and self.starts[last + 1] - begin < BLOCK:
                    last += 1
                end = self.starts[last + 1] if last + 1 < len(self.starts) else self.end
                f.seek(begin)
                block = f.read(end - begin)
                for i in range(n, last + 1):
                    a = self.starts[i] - begin
                    b = (self.starts[i + 1] if i + 1 < len(self.starts) else self.end) - begin
                    yield i, block[a : b - 1]
                n = last + 1
