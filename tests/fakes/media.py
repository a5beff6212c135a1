"""Small files of each kind an output may be (and a few it must not be), built here.

Images come from Pillow; a video is its container's first bytes as a muxer writes them
(WebM: an EBML header with DocType "webm", as ComfyUI's SaveWEBM writes through PyAV; MP4:
an `ftyp` box of brand isom), enough for anything that tells files by their bytes. A bomb
is a whole PNG — valid chunks and checksums — whose header declares a huge size over a
few bytes of pixels.
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

HTML = b"<!DOCTYPE html><html><body><script>fetch('/api/v1/jobs')</script></body></html>"
TEXT = b"not a picture at all, whatever its name says\n"


def image(kind: str = "PNG", size: tuple[int, int] = (8, 6),
          color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, kind)
    return buf.getvalue()


def webm() -> bytes:
    header = (b"\x42\x86\x81\x01" b"\x42\xf7\x81\x01" b"\x42\xf2\x81\x04" b"\x42\xf3\x81\x08"
              b"\x42\x82\x84webm" b"\x42\x87\x81\x04" b"\x42\x85\x81\x02")
    return b"\x1a\x45\xdf\xa3" + bytes([0x80 | len(header)]) + header + b"\x18\x53\x80\x67\x80"


def mp4() -> bytes:
    ftyp = b"ftyp" + b"isom" + struct.pack(">I", 0x200) + b"isom" + b"iso2" + b"mp41"
    return struct.pack(">I", 4 + len(ftyp)) + ftyp + struct.pack(">I", 8) + b"free"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + \
        struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG declaring width × height (8-bit RGB) over one compressed row of zeros."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * (1 + 3 * min(width, 4096)))
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", pixels) + \
        _chunk(b"IEND", b"")


def bomb_webp(width: int = 16_383, height: int = 16_383) -> bytes:
    """An animated WebP (VP8X) of two 8 x 8 frames on a canvas of width x height: a valid
    file (frames may be smaller than the canvas) whose decoder would allocate the canvas."""
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 255, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    data = bytearray(buf.getvalue())
    assert data[12:16] == b"VP8X"
    data[24:27], data[27:30] = (width - 1).to_bytes(3, "little"), (height - 1).to_bytes(3, "little")
    return bytes(data)


def product_shot(size: tuple[int, int] = (1024, 1024), background=(247, 246, 244)):
    """What a product template makes: a red bottle on an off-white studio background, off
    centre."""
    from PIL import Image, ImageDraw
    im = Image.new("RGB", size, background)
    d = ImageDraw.Draw(im)
    w, h = size
    d.rounded_rectangle((int(w * .52), int(h * .25), int(w * .72), int(h * .82)), radius=20,
                        fill=(190, 30, 40))
    d.rectangle((int(w * .58), int(h * .18), int(w * .66), int(h * .26)), fill=(40, 40, 40))
    return im


def scene(size: tuple[int, int] = (1024, 1024)):
    """A picture with no plain background: noise everywhere."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(3)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def product_png(size: tuple[int, int] = (256, 256)) -> bytes:
    buf = io.BytesIO()
    product_shot(size).save(buf, "PNG")
    return buf.getvalue()
