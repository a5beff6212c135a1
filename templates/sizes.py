"""How big an image a bound job asks for, read from its values before anything runs.

A row can ask for 8192×8192 and a 4× upscale after it: a gigapixel that would take the
executor's memory down, found only when it runs. Intake refuses it instead, with the
size named ([intake] max_output_pixels). The reading follows each node's image through
the graph by the size rule each op's signature declares (templates/size_rules.py: the
size given, a width, scaled by a factor, the same as what came in); where the model's own
size or an uploaded picture decides, it is unknown and not counted — pictures are bounded
when they are read ([intake] max_image_pixels).
"""

from __future__ import annotations

import math
from typing import Any

from templates.jobs import BoundJob, ComfyJob, DiffusersJob
from templates.signatures import OPS
from templates.size_rules import Size, number, pair, sized


def largest_image(job: BoundJob) -> Size | None:
    """The largest width × height the job's values ask for, or None if none is known."""
    if isinstance(job, ComfyJob):
        return _comfy(job.prompt)
    return _diffusers(job)


def _diffusers(job: DiffusersJob) -> Size | None:
    sizes: dict[str, Size | None] = {}
    for step in job.nodes:
        source = next((sizes.get(v["@"].split(".")[0]) for k, v in step.inputs.items()
                       if k in ("image", "init_image") and isinstance(v, dict) and "@" in v),
                      None)
        sizes[step.id] = sized(OPS[step.op].sizing, step.inputs, source)
    return max((s for s in sizes.values() if s), key=lambda s: s[0] * s[1], default=None)


SCALES = ("scale_by", "upscale_by")  # ComfyUI's ImageScaleBy, LatentUpscaleBy, Ultimate SD …


def _comfy(prompt: dict[str, Any]) -> Size | None:
    """A ComfyUI workflow's largest width × height input (EmptyLatentImage, ImageScale …),
    times every scale-by factor above one in it: a bound, not a trace of its graph."""
    sizes = [size for node in prompt.values() if isinstance(node, dict)
             for inputs in [node.get("inputs")] if isinstance(inputs, dict)
             if (size := pair([inputs.get("width"), inputs.get("height")])) is not None]
    if not sizes:
        return None
    w, h = max(sizes, key=lambda s: s[0] * s[1])
    factor = math.prod(f for node in prompt.values() if isinstance(node, dict)
                       and isinstance(node.get("inputs"), dict)
                       for key in SCALES
                       if (f := number(node["inputs"].get(key))) is not None and f > 1)
    return round(w * factor), round(h * factor)
