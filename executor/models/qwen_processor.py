"""Qwen2-VL's processor for pictures only, which Qwen-Image-Edit reads its pictures with.

The published processor (transformers' Qwen2VLProcessor) holds a video processor too, and
every video processor in transformers 5 needs torchvision, which genbot does not install
(there is no CPU build of it for the torch genbot pins). Qwen-Image-Edit never passes a
video: this processor is the published one without that part, so a real Qwen-Image-Edit
folder and the demo load on any machine genbot installs on. Imports transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import Qwen2VLProcessor
from transformers.processing_utils import ProcessorMixin


class PictureProcessor(Qwen2VLProcessor):
    """Qwen2VLProcessor with its image processor and tokenizer, no video processor (its
    parts are the names of __init__'s arguments, as ProcessorMixin reads them)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None,
                 chat_template: str | None = None, **kwargs: Any):
        self.image_token = getattr(tokenizer, "image_token", "<|image_pad|>")
        self.video_token = getattr(tokenizer, "video_token", "<|video_pad|>")
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)


def load(folder: Path) -> PictureProcessor:
    """A Qwen-Image-Edit folder's processor (its `processor/` subfolder), offline."""
    return PictureProcessor.from_pretrained(str(folder / "processor"), local_files_only=True)
