"""What a file is, told by its bytes (magic numbers), never by the name someone gave it.

An output genbot keeps (a ComfyUI server's, fetched by /view) must be an image — PNG,
JPEG, WebP, GIF — or a video — WebM, MP4 — and is named by what it is; a page with a
script named `x.png` is not an image, and a PNG named `x.html` is stored as `.png`. An
image is opened as far as its header (Pillow reads no pixels there), so one that declares
more pixels than `MAX_PIXELS` (a decompression bomb) is refused without being allocated.
The file routes of the web API use `sniff_file` to say a stored file's Content-Type.
"""

from __future__ import annotations

import codecs
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEAD = 64  # bytes enough to tell every kind below
MAX_PIXELS = 89_478_485  # Pillow's own MAX_IMAGE_PIXELS (1024 * 1024 * 1024 // 4 // 3)


@dataclass(frozen=True)
class Media:
    name: str  # as a person says it
    kind: str  # "image", "video" or "document"
    mime: str
    suffix: str


PNG = Media("PNG", "image", "image/png", ".png")
JPEG = Media("JPEG", "image", "image/jpeg", ".jpg")
WEBP = Media("WebP", "image", "image/webp", ".webp")
GIF = Media("GIF", "image", "image/gif", ".gif")
WEBM = Media("WebM", "video", "video/webm", ".webm")
MP4 = Media("MP4", "video", "video/mp4", ".mp4")
XLSX = Media("XLSX", "document",
             "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".xlsx")
OUTPUTS = (PNG, JPEG, WEBP, GIF, WEBM, MP4)  # what a generated output may be


def is_image_name(name: str) -> bool:
    """Whether a stored output's name says image: outputs are named by their bytes
    (`output`), so a video is .webm or .mp4 and goes to chat as a file, not a picture."""
    return any(name.lower().endswith(m.suffix) for m in OUTPUTS if m.kind == "image") \
        or name.lower().endswith(".jpeg")

# ISO base media files whose major brand says MP4 (not QuickTime's "qt  ", not HEIF images).
_MP4_BRANDS = {b"isom", b"iso2", b"iso4", b"iso5", b"iso6", b"mp41", b"mp42", b"avc1",
               b"M4V ", b"dash", b"mmp4", b"MSNV"}
_WEBM_DOCTYPE = re.compile(rb"\x42\x82[\x80-\xff]webm")  # EBML DocType "webm"


class NotMedia(ValueError):
    """The bytes are not an output genbot keeps; the message says why, in one line."""


def sniff(head: bytes) -> Media | None:
    """The kind the first bytes say (at least HEAD of them, or the whole file), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if head.startswith(b"\xff\xd8\xff"):
        return JPEG
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if head[:4] == b"\x1a\x45\xdf\xa3" and _WEBM_DOCTYPE.search(head[:HEAD]):
        return WEBM
    if head[4:8] == b"ftyp" and head[8:12] in _MP4_BRANDS:
        return MP4
    return None


def sniff_file(path: Path) -> Media | None:
    """What a stored file is, by its bytes; an XLSX is a ZIP holding a workbook."""
    with path.open("rb") as f:
        head = f.read(HEAD)
    found = sniff(head)
    if found is None and head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
        except (zipfile.BadZipFile, OSError):
            return None
        if {"[Content_Types].xml", "xl/workbook.xml"} <= names:
            return XLSX
    return found


def output(data: bytes, max_pixels: int = MAX_PIXELS) -> Media:
    """What an output is, or NotMedia: an image or video of OUTPUTS, an image whole as far
    as its header and chunks say and no bigger than `max_pixels`."""
    media = sniff(data[:HEAD])
    if media is None or media not in OUTPUTS:
        kept = ", ".join(m.name for m in OUTPUTS)
        raise NotMedia(f"it is not an image or a video genbot keeps ({kept}); "
                       f"it starts {_looks(data)}")
    if media.kind == "image":
        _check_image(data, media, max_pixels)
    return media


def _check_image(data: bytes, media: Media, max_pixels: int) -> None:
    """Pillow's reader for the kind, built directly: it parses the header (the size) and
    no pixels, and unlike Image.open it has not yet refused a bomb, so the size is said."""
    import io

    from PIL import GifImagePlugin, Image, JpegImagePlugin, PngImagePlugin, WebPImagePlugin
    readers: dict[Media, Any] = {
        PNG: PngImagePlugin.PngImageFile, JPEG: JpegImagePlugin.JpegImageFile,
        WEBP: WebPImagePlugin.WebPImageFile, GIF: GifImagePlugin.GifImageFile}

    def too_big(width: int, height: int) -> None:
        if width * height > max_pixels:
            raise NotMedia(f"it declares {width}×{height} pixels, more than the limit of "
                           f"{max_pixels} (MAX_IMAGE_PIXELS)")

    if media is WEBP:  # Pillow's reader refuses a bomb before its size can be said, and
        # libwebp's decoder reserves the whole canvas as it opens
        too_big(*_webp_size(data))
    try:
        with readers[media](io.BytesIO(data)) as im:
            too_big(*im.size)
            im.verify()  # chunks and checksums, without decoding the pixels
    except NotMedia:
        raise
    except Image.DecompressionBombError:
        raise NotMedia("it declares more pixels than Pillow opens "
                       f"({2 * (Image.MAX_IMAGE_PIXELS or 0)}, twice MAX_IMAGE_PIXELS)") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError):
        raise NotMedia(f"it starts as a {media.name} image but is not a whole one (broken or "
                       "cut short)") from None


def _webp_size(data: bytes) -> tuple[int, int]:
    """The canvas a WebP declares, read from its first chunk (RFC 9649); (0, 0) where
    that chunk is not one of the three, which Pillow then refuses as broken."""
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:  # extended: 24-bit canvas width and height - 1
        return (1 + int.from_bytes(data[24:27], "little"),
                1 + int.from_bytes(data[27:30], "little"))
    if chunk == b"VP8 " and len(data) >= 30:  # lossy: 14 bits each after the start code
        return (int.from_bytes(data[26:28], "little") & 0x3FFF,
                int.from_bytes(data[28:30], "little") & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25:  # lossless: 14 bits each, minus one
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    return 0, 0


def _looks(data: bytes) -> str:
    """How bytes that are no kept kind start, for the message: text or not."""
    if not data:
        return "empty"
    head = data[:HEAD]
    try:  # (a character cut at the end of the head is not a reason to call it binary)
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        text = ""
    if not text or not all(ch.isprintable() or ch in "\t\r\n" for ch in text):
        return "with other bytes: " + head[:8].hex(" ")
    if text.lstrip().lower().startswith(("<!doctype html", "<html", "<script", "<svg", "<?xml")):
        return "as markup (HTML, SVG or XML)"
    return "as text"
