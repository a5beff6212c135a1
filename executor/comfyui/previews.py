"""A ComfyUI server's own previews, as its WebSocket sends them in binary messages.

Every binary message starts with its event type, a big-endian uint32 (ComfyUI's
`BinaryEventTypes`):

  1  PREVIEW_IMAGE                 [1][image format: 1 JPEG, 2 PNG][image bytes]
  4  PREVIEW_IMAGE_WITH_METADATA   [4][metadata length][metadata JSON][image bytes]

The second names its prompt (`prompt_id`, and the node) and is what a server sends a
client that said `supports_preview_metadata` in its `feature_flags` (the engine does); the
first, from older servers, belongs to whichever prompt is executing. Other types (3, a
node's progress text) are not previews. A server previews only when started with
`--preview-method auto` (or latent2rgb, taesd).

What comes in is a server's: a frame too short, metadata that is no JSON object, or a
picture that is no small image (a bomb declaring more than MAX_PIXELS) is dropped.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass

from PIL import Image

PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA = 1, 4
MAX_PIXELS = 4096 * 4096  # ComfyUI's own previews are 512 px at most


@dataclass(frozen=True)
class Frame:
    picture: bytes  # JPEG or PNG, as the server encoded it
    prompt_id: str | None  # None: the prompt executing now (a server without metadata)


def frame(data: bytes) -> Frame | None:
    """A preview frame, or None for any other binary message or a malformed one."""
    if len(data) < 8:
        return None
    kind, second = struct.unpack(">II", data[:8])
    if kind == PREVIEW_IMAGE:
        return Frame(data[8:], None)
    if kind == PREVIEW_IMAGE_WITH_METADATA:
        end = 8 + second
        if end > len(data):
            return None
        try:
            meta = json.loads(data[8:end])
        except ValueError:
            return None
        if not isinstance(meta, dict):
            return None
        prompt = meta.get("prompt_id")
        return Frame(data[end:], str(prompt) if prompt is not None else None)
    return None


def picture(data: bytes) -> Image.Image | None:
    """The frame's picture, decoded; None where it is no image or too large to be one."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > MAX_PIXELS:
                return None
            return im.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
