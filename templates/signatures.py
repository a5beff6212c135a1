"""What each op takes and gives: the typed signatures templates are checked against.

Plain data, no torch: the template validator (and the chat side through it) reads
this without loading the GPU stack. The executor's op implementations are registered
against these names and must accept exactly these inputs.

Value types:
  text, int, float, bool, seed   scalars
  color      "#rrggbb" or "auto" (the op picks a colour from the image)
  size       [width, height] in pixels, or None: the model's native size
  aspect     "W:H", e.g. "4:5"
  model      a logical model name from the config's model registry
  loras      a list of {"name": <lora>, "weight": <float>}
  sampler    one of SAMPLERS
  image      an image (an input file, or another node's output)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templates.size_rules import Given, Grown, Native, NoImage, Same, Scaled, SizeRule, Width

SAMPLERS = ("euler", "euler_a", "dpm++_2m", "dpm++_2m_karras", "ddim", "unipc")
POSITIONS = ("top", "bottom", "center", "top_left", "top_right", "bottom_left", "bottom_right")
FORMATS = ("png", "jpg", "webp")

REQUIRED = object()


@dataclass(frozen=True)
class Input:
    type: str
    default: Any = REQUIRED  # REQUIRED, or the value used when the template leaves it out
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    optional: bool = False  # None is a valid value ("use the model's own")
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Signature:
    name: str
    help: str
    inputs: dict[str, Input]
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> type
    sizing: tuple[SizeRule, ...] = ()  # how its image is sized (templates.size_rules)
    # The modes it runs its `model` in (templates.families.MODES), the first unless the
    # node is given an init_image and it has "img2img"; () for an op that runs no model.
    modes: tuple[str, ...] = ()

    def mode_of(self, inputs: dict[str, Any]) -> str | None:
        """The mode a node of this op runs its model in; None: it runs none."""
        if "img2img" in self.modes and inputs.get("init_image") is not None:
            return "img2img"
        return self.modes[0] if self.modes else None


def _sig(op: str, help: str, outputs: dict[str, str], sizing: tuple[SizeRule, ...], /,
         modes: tuple[str, ...] = (), **inputs: Input) -> Signature:
    return Signature(op, help, inputs, outputs, sizing, modes)


_IMAGE_OUT = {"image": "image"}
MAX_MARGIN = 8192  # px an extend adds on one side ([intake] max_output_pixels bounds the whole)

OPS: dict[str, Signature] = {s.name: s for s in [
    _sig("generate", "Diffusion: txt2img, img2img (init_image), ControlNet guidance "
         "(control_image + controlnet), LoRAs.", _IMAGE_OUT, (Given(), Same(), Native()),
         ("txt2img", "img2img"),
         prompt=Input("text"),
         negative=Input("text", ""),
         model=Input("model"),
         seed=Input("seed"),
         steps=Input("int", None, optional=True, min=1, max=200,
                     help="None: the model's own"),
         guidance=Input("float", None, optional=True, min=0, max=50),
         size=Input("size", None, optional=True, help="None: the model's native size"),
         sampler=Input("sampler", None, optional=True, choices=SAMPLERS),
         init_image=Input("image", None, optional=True, help="img2img source"),
         strength=Input("float", 0.75, min=0, max=1, help="img2img: how much to change"),
         control_image=Input("image", None, optional=True),
         controlnet=Input("model", None, optional=True),
         control_scale=Input("float", 1.0, min=0, max=4),
         reference=Input("image", None, optional=True,
                         help="a style or subject reference picture (an IP-Adapter: SD 1.5, "
                         "SDXL)"),
         reference_scale=Input("float", 0.6, min=0, max=2,
                               help="how strongly the reference steers the image"),
         ip_adapter=Input("model", None, optional=True,
                          help="the IP-Adapter the reference runs through"),
         loras=Input("loras", [])),
    _sig("edit", "Change a picture by a written instruction with an edit model (FLUX.1 "
         "Kontext, Qwen-Image-Edit, FLUX.2): what the sentence leaves out stays as it was.",
         _IMAGE_OUT, (Given(), Same()), ("edit",),
         image=Input("image"),
         instruction=Input("text", help='"把背景换成海滩", "make the bottle matte black"'),
         model=Input("model"),
         seed=Input("seed"),
         image_2=Input("image", None, optional=True,
                       help="another picture the instruction may name (Qwen-Image-Edit: "
                       "up to 3)"),
         image_3=Input("image", None, optional=True),
         negative=Input("text", "", help="models with real guidance only (Qwen-Image-Edit)"),
         steps=Input("int", None, optional=True, min=1, max=200,
                     help="None: the model's own"),
         guidance=Input("float", None, optional=True, min=0, max=50),
         size=Input("size", None, optional=True,
                    help="None: the picture's proportions within the model's area, in its "
                    "multiples"),
         keep_size=Input("bool", False, help="the result resampled to the picture's own "
                         "size (an image's edit keeps its size)"),
         loras=Input("loras", [])),
    _sig("fill", "Repaint part of a picture on the model's inpaint pipeline: the region a "
         "mask marks white (a region edit), and the margins the canvas grows by (an extend: "
         "left/right/top/bottom in px, or an aspect around it). Every pixel outside them "
         "stays exactly the picture's; the mask's edge is blended inward.",
         _IMAGE_OUT, (Grown(), Same()), ("inpaint",),
         image=Input("image"),
         model=Input("model"),
         seed=Input("seed"),
         prompt=Input("text", "", help="what to paint there; empty: what fits the picture"),
         mask=Input("image", None, optional=True,
                    help="white where to repaint, the picture's size; None: the margins only"),
         region=Input("text", "", help="where to repaint, in words (\"the bottle\", \"瓶子\"): "
                      "found by the segmenter; with a mask, both are repainted"),
         segmenter=Input("model", None, optional=True,
                         help="the segmentation model (CLIPSeg) that finds the region"),
         left=Input("int", 0, min=0, max=MAX_MARGIN, help="px added on the left"),
         right=Input("int", 0, min=0, max=MAX_MARGIN),
         top=Input("int", 0, min=0, max=MAX_MARGIN),
         bottom=Input("int", 0, min=0, max=MAX_MARGIN),
         aspect=Input("aspect", None, optional=True,
                      help='the canvas grown to this shape around the picture ("9:16"), '
                      "after the margins"),
         negative=Input("text", "", help="families that read one"),
         steps=Input("int", None, optional=True, min=1, max=200,
                     help="None: the model's own"),
         guidance=Input("float", None, optional=True, min=0, max=50),
         strength=Input("float", 1.0, min=0.05, max=1,
                        help="how far the region is painted anew (1: from noise)"),
         feather=Input("int", 8, min=0, max=128,
                       help="px inside the mask's edge blended into the picture"),
         loras=Input("loras", []),
         if_needed=Input("bool", False, help="a picture already of `aspect` comes back as "
                         "it is (a sales channel's extend: the row's picture may be that "
                         "shape); else nothing to grow is an error")),
    _sig("upscale", "Enlarge: a diffusers upscaler when one is configured, else "
         "high-quality resampling.", _IMAGE_OUT, (Scaled(default=2.0),),
         image=Input("image"),
         scale=Input("float", 2.0, min=1, max=8),
         model=Input("model", None, optional=True)),
    _sig("canny", "Edge map, e.g. to guide a ControlNet.", _IMAGE_OUT, (Same(),),
         image=Input("image"),
         low=Input("int", 100, min=0, max=255),
         high=Input("int", 200, min=0, max=255)),
    _sig("crop", "Centre-crop to an aspect ratio.", _IMAGE_OUT, (Same(),),
         image=Input("image"),
         aspect=Input("aspect")),
    _sig("resize", "Resize to a size, to a width (keeping the aspect), or by a factor.",
         _IMAGE_OUT, (Given(), Width(), Scaled()),
         image=Input("image"),
         size=Input("size", None, optional=True),
         width=Input("int", None, optional=True, min=8, max=8192),
         scale=Input("float", None, optional=True, min=0.01, max=16),
         aspect=Input("aspect", None, optional=True)),
    _sig("pad", "Pad to a size, centred.", _IMAGE_OUT, (Given(), Same()),
         image=Input("image"),
         size=Input("size"),
         color=Input("color", "auto")),
    _sig("palette", "Dominant colour of an image and a colour that reads on it.",
         {"dominant": "color", "contrast": "color"}, (NoImage(),),
         image=Input("image")),
    _sig("text", "Text over a colour band (CJK-capable font).", _IMAGE_OUT, (Same(),),
         image=Input("image"),
         text=Input("text"),
         position=Input("text", "bottom", choices=POSITIONS),
         color=Input("color", "auto"),
         band=Input("color", "auto"),
         font_size=Input("int", None, optional=True, min=6, max=1000)),
    _sig("watermark", "A translucent text mark.", _IMAGE_OUT, (Same(),),
         image=Input("image"),
         text=Input("text"),
         position=Input("text", "bottom_right", choices=POSITIONS),
         opacity=Input("float", 0.35, min=0, max=1),
         avoid=Input("text", None, optional=True)),
    _sig("keep_product", "Put the product photo back over the image, exactly as "
         "photographed inside its mask (the photo's transparency, or a mask picture), the "
         "edge blended inward, an optional soft shadow under it: a template's \"keep\" adds "
         "it before every save.", _IMAGE_OUT, (Same(),),
         image=Input("image"),
         product=Input("image", help="the product photo, stretched to the image as the "
                       "generation's control image was"),
         mask=Input("image", None, optional=True, help="white where the product is; None: "
                    "the photo's own transparency, else [executor] matting's cut-out (none: "
                    "the image is left as made)"),
         blend=Input("int", 2, min=0, max=16, help="px of edge blended inward"),
         shadow=Input("float", 0.0, min=0, max=1, help="a soft contact shadow, 0 none"),
         beside=Input("text", None, optional=True, help="the saved image's name: a mask the "
                      "background-removal model cut out ([executor] matting) is saved beside "
                      "it")),
    _sig("save", "Write the image into the batch's output folder, with metadata to "
         "reproduce it.", {}, (Same(),),
         image=Input("image"),
         name=Input("text", None, optional=True,
                    help="file name pattern; default: the template's output pattern"),
         format=Input("text", "png", choices=FORMATS)),
]}


def check_signatures(ops: dict[str, Signature]) -> None:
    """Every op says how it sizes its image: intake's size bound follows those rules, and
    an op without one would slip past [intake] max_output_pixels unseen."""
    if unsized := sorted(name for name, s in ops.items() if not s.sizing):
        raise RuntimeError(f"ops without a size rule (Signature.sizing): {', '.join(unsized)}")


check_signatures(OPS)
RUN_MODES = {mode for s in OPS.values() for mode in s.modes}  # what some op runs


def markdown_table() -> str:
    """The ops table in docs/templates.md (a test keeps the two identical)."""
    lines = ["| op | inputs (= default when optional) | outputs | what it does |",
             "|---|---|---|---|"]
    for s in OPS.values():
        ins = ", ".join(f"{n}: {i.type}" + ("" if i.required else f" = {i.default!r}")
                        for n, i in s.inputs.items())
        outs = ", ".join(f"{n}: {t}" for n, t in s.outputs.items()) or "—"
        lines.append(f"| `{s.name}` | {ins} | {outs} | {s.help} |")
    return "\n".join(lines)
