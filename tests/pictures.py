"""Small images made in the test itself (PNG by hand with zlib) and the JPEG samples
in tests/data/images/, for the vision tests."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

SAMPLES = Path(__file__).parent / "data" / "images"


def png(width: int, height: int, *, alpha: bool = False, noise: bool = False) -> bytes:
    """An RGB (or RGBA, fully transparent) PNG; `noise` makes it barely compressible."""
    channels = 4 if alpha else 3
    row = width * channels
    if noise:
        pixels = random.Random(7).randbytes(row * height)
        raw = b"".join(b"\0" + pixels[y * row : (y + 1) * row] for y in range(height))
    else:
        raw = (b"\0" + bytes([40, 120, 200, 0][:channels]) * width) * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 6 if alpha else 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def sample(name: str) -> bytes:
    """photo_3000x2000.jpg, photo_1280x960.jpg or sideways_exif6.jpg (EXIF orientation 6)."""
    return (SAMPLES / name).read_bytes()
