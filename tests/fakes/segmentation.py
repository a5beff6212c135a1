"""A tiny CLIPSeg model (transformers' own architecture, random weights, the demo's byte-level
CLIP tokenizer) for the region-in-words tests: built here in a second, nothing downloaded.

Random weights find nothing in particular, so the decoder's last bias is set for one
picture and one phrase (`tuned`): a sixth of its map passes the threshold, about half the
picture once grown — a region the tests can see kept to. `blind` sets it far below: every
phrase matches nothing.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image


def write_clipseg(folder: Path, tuned: tuple[Image.Image, str] | None = None,
                  blind: bool = False) -> Path:
    import math

    import torch
    from transformers import (
        CLIPSegConfig,
        CLIPSegForImageSegmentation,
        CLIPSegProcessor,
        ViTImageProcessor,
    )

    from executor.models import segmentation
    from executor.models.tiny_text import clip_tokenizer
    tokenizer, bos, eos = clip_tokenizer()
    text = {"vocab_size": len(tokenizer), "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 77,
            "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos}
    vision = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "image_size": 32, "patch_size": 8}
    config = CLIPSegConfig(text_config=text, vision_config=vision, projection_dim=16,
                           extract_layers=[1], reduce_dim=8, decoder_num_attention_heads=2,
                           decoder_intermediate_size=16, conditional_layer=0)
    torch.manual_seed(0)
    model = CLIPSegForImageSegmentation(config).eval()
    processor = CLIPSegProcessor(
        image_processor=ViTImageProcessor(size={"height": 32, "width": 32},
                                          image_mean=[0.481, 0.458, 0.408],
                                          image_std=[0.269, 0.261, 0.276]),
        tokenizer=tokenizer)
    last = [m for m in model.decoder.modules() if isinstance(m, torch.nn.ConvTranspose2d)][-1]
    with torch.no_grad():
        if blind:
            last.bias.fill_(-30.0)
        elif tuned is not None:
            picture, words = tuned
            inputs = processor(text=[words], images=[picture.convert("RGB")], padding=True,
                               return_tensors="pt")
            logits = model(**inputs).logits
            cut = math.log(segmentation.THRESHOLD / (1 - segmentation.THRESHOLD))
            last.bias += cut - logits.quantile(0.85)  # (about a sixth passes)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
