"""ComfyUI workflows for tests: a txt2img graph in API format, and the folder of workflows
exported by others (../shared/comfyui-workflows; None where the checkout has none)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = next((p for p in (ROOT.parent / "shared" / "comfyui-workflows",
                              Path("/work/shared/comfyui-workflows")) if p.is_dir()), None)

TXT2IMG = {
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"},
          "_meta": {"title": "Load Checkpoint"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512,
                                                       "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]},
          "_meta": {"title": "Positive"}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["4", 1]},
          "_meta": {"title": "Negative"}},
    "3": {"class_type": "KSampler", "inputs": {
        "seed": 1, "steps": 20, "cfg": 7.0, "sampler_name": "euler", "scheduler": "normal",
        "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0],
        "latent_image": ["5", 0]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x", "images": ["8", 0]}},
}


# The checkpoint a team names, and an img2img graph from a picture (LoadImage "Photo").
IMG2IMG = {**{k: v for k, v in TXT2IMG.items() if k != "5"},
           "10": {"class_type": "LoadImage", "inputs": {"image": "example.png",
                                                        "upload": "image"},
                  "_meta": {"title": "Photo"}},
           "12": {"class_type": "VAEEncode", "inputs": {"pixels": ["10", 0], "vae": ["4", 2]}}}
IMG2IMG["3"] = {**TXT2IMG["3"], "inputs": {**TXT2IMG["3"]["inputs"], "latent_image": ["12", 0],
                                           "denoise": 0.7}}
TXT2IMG_CKPT = json.loads(json.dumps(TXT2IMG).replace("sd15.safetensors",
                                                      "dreamshaper_8.safetensors"))
IMG2IMG = json.loads(json.dumps(IMG2IMG).replace("sd15.safetensors", "dreamshaper_8.safetensors"))


def templates(folder: Path) -> Path:
    """Two ComfyUI templates in `folder`: portrait (txt2img on dreamshaper_8) and photo
    (img2img from a LoadImage titled Photo)."""
    folder.mkdir()
    common = {"prompt": {"type": "text", "required": True, "to": ["Positive.text"]},
              "seed": {"type": "seed", "to": ["3.seed"]},
              "steps": {"type": "int", "to": ["3.steps"]}}
    for name, workflow, extra in (
            ("portrait", TXT2IMG_CKPT, {}),
            ("photo", IMG2IMG, {"picture": {"type": "image", "required": True,
                                            "to": ["Photo.image"]}})):
        (folder / f"{name}.workflow.json").write_text(json.dumps(workflow))
        (folder / f"{name}.json").write_text(json.dumps({
            "name": name, "engine": "comfyui", "workflow": f"{name}.workflow.json",
            "params": {**common, **extra}, "output": "{prompt}/{row}.png"}))
    return folder


def saved_png(**chunks: str) -> bytes:
    """A picture as ComfyUI's Save Image writes it: its workflow in PNG text chunks
    (`prompt`: API format, `workflow`: UI format)."""
    import io

    from PIL import Image, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    for key, text in chunks.items():
        info.add_text(key, text)
    out = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(out, "PNG", pnginfo=info)
    return out.getvalue()
