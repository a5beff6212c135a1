"""How big an image a bound job asks for, read from its values before anything runs.

A row can ask for 8192×8192 and a 4× upscale after it: a gigapixel that would take the
executor's memory down, found only when it runs. Intake refuses it instead, with the
size named ([intake] max_output_pixels). The reading follows each node's image through
the graph as the ops size it (generate's size, resize, pad, upscale and resize scales);
where the model's own size or an uploaded picture decides, it is unknown and not
counted — pictures are bounded when they are read ([intake] max_image_pixels).
"""

from __future__ import annotations

import math
from typing import Any

from templates.jobs import BoundJob, ComfyJob, DiffusersJob

Size = tuple[int, int]


def largest_image(job: BoundJob) -> Size | None:
    """The largest width × height the job's values ask for, or None if none is known."""
    if isinstance(job, ComfyJob):
        return _comfy(job.prompt)
    return _diffusers(job)


def _diffusers(job: DiffusersJob) -> Size | None:
    sizes: dict[str, Size | None] = {}
    for step in job.nodes:
        inputs = step.inputs
        given = _pair(inputs.get("size"))
        source = next((sizes.get(v["@"].split(".")[0]) for k, v in inputs.items()
                       if k in ("image", "init_image") and isinstance(v, dict) and "@" in v),
                      None)
        scale = _number(inputs.get("scale"))
        width = _number(inputs.get("width"))
        if step.op in ("generate", "pad"):
            size = given or source
        elif step.op == "resize":
            if given:
                size = given
            elif width and isinstance(inputs.get("aspect"), str):
                w, h = (int(x) for x in inputs["aspect"].split(":"))
                size = (int(width), max(1, round(width * h / w)))
            elif width and source:
                size = (int(width), max(1, round(source[1] * width / source[0])))
            elif scale and source:
                size = (round(source[0] * scale), round(source[1] * scale))
            else:
                size = None
        elif step.op == "upscale":
            factor = scale if scale is not None else 2.0
            size = (round(source[0] * factor), round(source[1] * factor)) if source else None
        else:  # crop, text, watermark, save …: no bigger than what came in
            size = source
        sizes[step.id] = size
    return max((s for s in sizes.values() if s), key=lambda s: s[0] * s[1], default=None)


SCALES = ("scale_by", "upscale_by")  # ComfyUI's ImageScaleBy, LatentUpscaleBy, Ultimate SD …


def _comfy(prompt: dict[str, Any]) -> Size | None:
    """A ComfyUI workflow's largest width × height input (EmptyLatentImage, ImageScale …),
    times every scale-by factor above one in it: a bound, not a trace of its graph."""
    sizes = [size for node in prompt.values() if isinstance(node, dict)
             for inputs in [node.get("inputs")] if isinstance(inputs, dict)
             if (size := _pair([inputs.get("width"), inputs.get("height")])) is not None]
    if not sizes:
        return None
    w, h = max(sizes, key=lambda s: s[0] * s[1])
    factor = math.prod(f for node in prompt.values() if isinstance(node, dict)
                       and isinstance(node.get("inputs"), dict)
                       for key in SCALES
                       if (f := _number(node["inputs"].get(key))) is not None and f > 1)
    return round(w * factor), round(h * factor)


def _pair(value: Any) -> Size | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_number, value)):
        return int(value[0]), int(value[1])
    return None


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok and math.isfinite(value) else None
