"""``color-codeword`` rules: the palette, solid-square PNGs, the user's messages, the
answer parser and the scores. No engine imports beyond message values.

The PNG writer is the smallest valid encoder: one IHDR (8-bit RGB), one IDAT holding
every scanline with filter type 0 (none), deflated by zlib, and IEND; each chunk
carries its CRC-32. A solid square compresses to ~100 bytes, so images can ride in
every request and every trace line without bloating the JSONL.
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import struct
import zlib

from taketurns import UserMessage
from taketurns.harness import ImagePart, TextPart

__all__ = [
    "ANSWER_FORMAT",
    "LETTERS",
    "PALETTE",
    "data_url",
    "generate_squares",
    "parse_codeword",
    "png_square",
    "position_score",
    "system_prompt",
    "task_seed",
    "turn_message",
]

# letter -> (colour name, RGB); chosen to be far apart from each other
PALETTE: dict[str, tuple[str, tuple[int, int, int]]] = {
    "A": ("red", (230, 25, 25)),
    "B": ("orange", (245, 130, 20)),
    "C": ("yellow", (250, 225, 25)),
    "D": ("green", (30, 160, 50)),
    "E": ("blue", (20, 60, 220)),
    "F": ("purple", (130, 40, 170)),
    "G": ("pink", (250, 140, 200)),
    "H": ("brown", (120, 70, 20)),
    "I": ("black", (0, 0, 0)),
}
LETTERS = "".join(PALETTE)
ANSWER_FORMAT = "CODEWORD: <letters>"

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ANSWER = re.compile(r"codeword[*_`\s]*[:=][*_`\s]*([A-Za-z]+)", re.IGNORECASE)


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_square(rgb: tuple[int, int, int], size: int) -> bytes:
    """A ``size`` x ``size`` PNG of one solid colour."""
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    scanline = b"\x00" + bytes(rgb) * size  # filter type 0, then the pixels
    pixels = zlib.compress(scanline * size, 9)
    return _PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def task_seed(seed: int, idx: int) -> int:
    """Task ``idx``'s seed under the eval-level ``seed`` (stable across runs)."""
    digest = hashlib.blake2b(f"color-codeword/{seed}/{idx}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def generate_squares(
    rng: random.Random, num_turns: int, min_squares: int, max_squares: int
) -> list[str]:
    """The letters shown at each turn (letters may repeat)."""
    return [
        "".join(rng.choice(LETTERS) for _ in range(rng.randint(min_squares, max_squares)))
        for _ in range(num_turns)
    ]


def system_prompt() -> str:
    legend = "; ".join(
        f"{letter} = {name} (#{r:02X}{g:02X}{b:02X})"
        for letter, (name, (r, g, b)) in PALETTE.items()
    )
    return (
        "You decode a codeword shown as colored squares. Each color stands for one "
        f"letter: {legend}. Over several turns you are shown new squares, one image per "
        "square, in order. Keep the codeword: after each turn, append the letters of the "
        "new squares in the order shown and reply with the whole codeword so far on one "
        f"line as {ANSWER_FORMAT} (for example CODEWORD: ABE)."
    )


def turn_message(squares: list[str], turn: int, size: int) -> UserMessage:
    """What the user sends at ``turn``: a text part, then one image per new square.
    The text never names a colour: the model must read the images."""
    count = len(squares[turn])
    shown = "1 square" if count == 1 else f"{count} squares"
    if turn == 0:
        text = f"Here {'is' if count == 1 else 'are'} the first {shown}, in order."
    else:
        text = f"Here {'is' if count == 1 else 'are'} {shown} more, in order."
    text = (
        f"Turn {turn + 1} of {len(squares)}. {text} Reply with the whole codeword so far "
        f"as {ANSWER_FORMAT}."
    )
    images = [ImagePart(data_url(png_square(PALETTE[c][1], size))) for c in squares[turn]]
    return UserMessage((TextPart(text), *images))


def parse_codeword(text: str) -> str | None:
    """The letters after the last ``CODEWORD:`` in ``text`` (label case-insensitive,
    markdown emphasis around it tolerated), upper-cased; None when there is none."""
    found = _ANSWER.findall(text)
    return found[-1].upper() if found else None


def position_score(answer: str | None, expected: str) -> float:
    """Fraction of positions right: matches over the longer of answer and expected
    (so extra letters cost too); 0.0 for a missing answer."""
    if not answer:
        return 0.0
    right = sum(a == e for a, e in zip(answer, expected, strict=False))
    return right / max(len(answer), len(expected))
