"""The model families genbot's own engine runs, as data every layer reads (no torch).

A family says which diffusers pipeline makes each mode (text-to-image, image-to-image,
inpaint, instruction edit; with a ControlNet or not), the steps and guidance a row that
names none gets, whether it samples by flow matching, what its prompt reads (a negative
prompt or not, how many tokens), its native size and the multiple sizes must be, and what
its weights take in memory at each precision. The executor loads and runs by it
(executor.models, executor.diffusers); the template checker refuses, when templates load,
a node whose model's family cannot run the node's mode, naming both. A new family is a row.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from templates.expressions import ParamRef, Text, walk
from templates.graph import Template
from templates.signatures import OPS, RUN_MODES

MODES = ("txt2img", "img2img", "inpaint", "edit")
# Bytes a weight takes at each precision genbot loads at (GGUF Q8_0 and Q4_0 keep a 16-bit
# scale per block of 32: 34 and 18 bytes per 32 weights).
BYTES_PER_WEIGHT = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "q8_0": 34 / 32,
                    "nf4": 0.5 + 2 / 64, "q4_0": 18 / 32}


@dataclass(frozen=True)
class Profile:
    """How genbot runs one family of models."""
    name: str  # genbot's name, as [models] family = "…" and errors say it
    label: str  # as people read it: "FLUX.1 Kontext"
    pipelines: Mapping[tuple[str, bool], str]  # (mode, with a ControlNet) -> diffusers class
    guidance: float  # a row's default, after [models] and a demo's own
    steps: int = 30
    native: int = 512  # pixels, width and height, when a row names no size
    multiple: int = 8  # width and height are rounded down to this
    flow: bool = False  # flow matching: samples with its own scheduler ("euler" names it)
    negative: bool = True  # reads a negative prompt (real classifier-free guidance)
    cfg: str = "guidance_scale"  # the pipeline argument a row's guidance goes to
    no_negative: str = ""  # the negative prompt of a row that gives none (Qwen: " ", which
    # keeps its real guidance on: diffusers turns CFG off without a negative prompt)
    prompt_tokens: int = 77  # the longest prompt its main text encoder reads
    tokenizer: str = "tokenizer"  # that encoder's tokenizer: the folder's subfolder
    images: int = 0  # pictures an instruction edit takes at most (0: it does not edit)
    loras: str = ""  # the family whose LoRAs it takes ("": its own)
    # Billions of weights per component (denoiser, text encoders, VAE), and the working
    # memory one image at the native size takes at 16 bits (activations, the VAE's decode):
    # what memory planning counts (executor.models.memory).
    weights: Mapping[str, float] = field(default_factory=dict)
    work_gib: float = 1.0

    @property
    def lora_family(self) -> str:
        return self.loras or self.name

    @property
    def load_as(self) -> str:
        """The pipeline a model folder of this family is loaded with (the others are built
        on its components): its text-to-image one, else its first."""
        return self.pipelines.get(("txt2img", False)) or next(iter(self.pipelines.values()))

    def runs(self, mode: str, controlnet: bool = False) -> bool:
        return (mode, controlnet) in self.pipelines

    @property
    def edits(self) -> bool:
        """It changes a picture by an instruction (an image's edit by a sentence)."""
        return self.runs("edit")

    def modes(self, only: Container[str] | None = None) -> list[str]:
        """What it runs, as a person reads it: "txt2img", "img2img with a ControlNet" … (of
        `only`, where given: the modes some op runs)."""
        return sorted(f"{mode} with a ControlNet" if cn else mode for mode, cn in self.pipelines
                      if only is None or mode in only)

    def gib(self, precision: str = "bf16") -> float:
        """GiB its weights take at a precision; a quantized denoiser's text encoders and VAE
        stay at 16 bits, as people run them."""
        per = BYTES_PER_WEIGHT[precision]
        return sum(billions * 1e9 * (per if part == "denoiser" else max(per, 2.0))
                   for part, billions in self.weights.items()) / 2**30


_SD = {("txt2img", False): "StableDiffusionPipeline",
       ("img2img", False): "StableDiffusionImg2ImgPipeline",
       ("inpaint", False): "StableDiffusionInpaintPipeline",
       ("txt2img", True): "StableDiffusionControlNetPipeline",
       ("img2img", True): "StableDiffusionControlNetImg2ImgPipeline"}
_SD15 = {"denoiser": 0.86, "text": 0.123, "vae": 0.084}
_FLUX1 = {"denoiser": 11.9, "text": 4.76 + 0.123, "vae": 0.084}  # T5-XXL and CLIP-L

PROFILES: dict[str, Profile] = {f.name: f for f in (
    Profile("sd15", "Stable Diffusion 1.5", _SD, guidance=7.5, weights=_SD15, work_gib=0.6),
    Profile("sd2", "Stable Diffusion 2.x", _SD, guidance=7.5, native=768,
            weights={**_SD15, "text": 0.354}, work_gib=1.0),
    Profile("sdxl", "SDXL", {("txt2img", False): "StableDiffusionXLPipeline",
                             ("img2img", False): "StableDiffusionXLImg2ImgPipeline",
                             ("inpaint", False): "StableDiffusionXLInpaintPipeline",
                             ("txt2img", True): "StableDiffusionXLControlNetPipeline",
                             ("img2img", True): "StableDiffusionXLControlNetImg2ImgPipeline"},
            guidance=5.0, native=1024, weights={"denoiser": 2.57, "text": 0.818, "vae": 0.084},
            work_gib=1.5),
    Profile("sd3", "Stable Diffusion 3.5", {("txt2img", False): "StableDiffusion3Pipeline",
                                            ("img2img", False): "StableDiffusion3Img2ImgPipeline",
                                            ("inpaint", False): "StableDiffusion3InpaintPipeline"},
            guidance=3.5, steps=28, native=1024, multiple=16, flow=True, prompt_tokens=256,
            tokenizer="tokenizer_3",
            weights={"denoiser": 8.1, "text": 4.76 + 0.818, "vae": 0.084},  # Large; Medium 2.5
            work_gib=2.0),
    # FLUX.1 [dev]: guidance is the distilled guidance the transformer is told (no CFG, no
    # negative prompt), 28 steps. [schnell] (no guidance embedding): 4 steps, guidance unused
    # (the registry tells them apart by the transformer's config). T5 reads 512 tokens.
    Profile("flux", "FLUX.1", {("txt2img", False): "FluxPipeline",
                               ("img2img", False): "FluxImg2ImgPipeline",
                               ("inpaint", False): "FluxInpaintPipeline"},
            guidance=3.5, steps=28, prompt_tokens=512, weights=_FLUX1,
            tokenizer="tokenizer_2",
            native=1024, multiple=16, flow=True, negative=False, work_gib=2.5),
    Profile("flux_kontext", "FLUX.1 Kontext", {("edit", False): "FluxKontextPipeline",
                                               ("txt2img", False): "FluxKontextPipeline"},
            guidance=2.5, steps=28, prompt_tokens=512, images=1, loras="flux", weights=_FLUX1,
            tokenizer="tokenizer_2",
            native=1024, multiple=16, flow=True, negative=False, work_gib=3.5),
    Profile("flux_fill", "FLUX.1 Fill", {("inpaint", False): "FluxFillPipeline"},
            guidance=30.0, steps=50, prompt_tokens=512, loras="flux", weights=_FLUX1,
            tokenizer="tokenizer_2",
            native=1024, multiple=16, flow=True, negative=False, work_gib=3.0),
    Profile("flux2", "FLUX.2", {("txt2img", False): "Flux2Pipeline",
                                ("edit", False): "Flux2Pipeline"},
            guidance=4.0, steps=50, prompt_tokens=512, images=10,
            weights={"denoiser": 32.2, "text": 24.0, "vae": 0.084},
            native=1024, multiple=16, flow=True, negative=False, work_gib=4.0),
    # Qwen-Image reads long bilingual prompts (Qwen2.5-VL) and takes real CFG ("true_cfg").
    Profile("qwen_image", "Qwen-Image", {("txt2img", False): "QwenImagePipeline",
                                         ("img2img", False): "QwenImageImg2ImgPipeline",
                                         ("inpaint", False): "QwenImageInpaintPipeline"},
            guidance=4.0, steps=50, native=1328, multiple=16, flow=True, prompt_tokens=1024,
            cfg="true_cfg_scale", no_negative=" ",
            weights={"denoiser": 20.4, "text": 8.29, "vae": 0.127}, work_gib=3.5),
    Profile("qwen_image_edit", "Qwen-Image-Edit", {("edit", False): "QwenImageEditPlusPipeline"},
            guidance=4.0, steps=40, native=1024, multiple=16, flow=True, prompt_tokens=1024,
            images=3, loras="qwen_image", cfg="true_cfg_scale", no_negative=" ",
            weights={"denoiser": 20.4, "text": 8.29, "vae": 0.127}, work_gib=4.0),
    # Z-Image-Turbo: distilled to 8 steps without CFG; a Qwen3 encoder reads the prompt.
    Profile("zimage", "Z-Image", {("txt2img", False): "ZImagePipeline",
                                  ("img2img", False): "ZImageImg2ImgPipeline",
                                  ("inpaint", False): "ZImageInpaintPipeline"},
            guidance=0.0, steps=8, native=1024, multiple=16, flow=True, negative=False,
            prompt_tokens=512, weights={"denoiser": 6.15, "text": 4.02, "vae": 0.084},
            work_gib=2.0),
)}
# A folder's model_index.json names the pipeline it was saved as: that says its family.
SAVED_AS: dict[str, str] = {
    "StableDiffusionPipeline": "sd15", "StableDiffusionImg2ImgPipeline": "sd15",
    "StableDiffusionXLPipeline": "sdxl", "StableDiffusionXLImg2ImgPipeline": "sdxl",
    "StableDiffusion3Pipeline": "sd3", "FluxPipeline": "flux", "FluxImg2ImgPipeline": "flux",
    "FluxKontextPipeline": "flux_kontext", "FluxFillPipeline": "flux_fill",
    "Flux2Pipeline": "flux2", "QwenImagePipeline": "qwen_image",
    "QwenImageEditPipeline": "qwen_image_edit", "QwenImageEditPlusPipeline": "qwen_image_edit",
    "ZImagePipeline": "zimage"}
FLUX_SCHNELL = {"steps": 4, "guidance": 0.0}


def profile(name: str | None) -> Profile:
    """A family genbot knows (sd15 for a model of none, as some LoRAs are)."""
    return PROFILES[name or "sd15"]


def refusals(t: Template, family_of: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """(node path, why) for each model a template's node names that its family cannot run
    in the node's mode: a literal name, or any choice of the parameter that picks it.
    `family_of` tells a model's family where it can (templates.settings.family_of)."""
    found = []
    for node in t.nodes.values():
        mode = OPS[node.op].mode_of(node.inputs)
        if mode is None:
            continue
        controlnet = node.inputs.get("controlnet") is not None
        negative = node.inputs.get("negative")
        for name in _names(t, node.inputs.get("model")):
            fam = family_of(name)
            if fam is None or fam not in PROFILES:
                continue
            runs = PROFILES[fam]
            if not runs.runs(mode, controlnet):
                found.append((f"nodes.{node.id}.model",
                              f'model "{name}" is {runs.label} ({fam}), which genbot runs for '
                              f"{', '.join(runs.modes(RUN_MODES))}, not {mode}"
                              f"{' with a ControlNet' if controlnet else ''}"))
            elif not runs.negative and _given(negative):
                found.append((f"nodes.{node.id}.negative",
                              f'model "{name}" is {runs.label} ({fam}), which reads no negative '
                              "prompt: leave the node's negative out (say what to avoid in "
                              "the prompt instead)"))
    return found


EDIT_PICTURES = ("image", "image_2", "image_3")


REFERENCE_FAMILIES = ("sd15", "sdxl")  # a generate node's reference runs via an IP-Adapter


# The text each op's model reads, and the message that says it is longer than the model reads.
PROMPTS = {"generate": ("prompt", "prompt_too_long"), "fill": ("prompt", "prompt_too_long"),
           "edit": ("instruction", "instruction_too_many_tokens")}


def row_refusal(op: str, inputs: Mapping[str, Any], family: str,
                tokens: Callable[[str], int] | None = None) -> tuple[str, str, dict] | None:
    """(the input, a message code, its details) when a bound node's model, of `family`,
    cannot run what one row asks: the node's mode, a negative prompt, a reference picture
    (an IP-Adapter's: SD 1.5 and SDXL), more pictures than it edits with, a prompt longer
    than its text encoder reads (`tokens` counts as the model's own tokenizer does, where
    it can be told: the pipelines cut the rest off without a word). Intake asks it of
    every row, so a model named by a text column (which the template's load cannot check)
    is refused before anything is queued, not mid-batch."""
    signature = OPS[op]
    mode = signature.mode_of(dict(inputs))
    runs = PROFILES.get(family)
    if mode is None or runs is None:
        return None
    about = {"model": inputs.get("model"), "label": runs.label, "family": family}
    controlnet = inputs.get("controlnet") is not None
    if not runs.runs(mode, controlnet):
        return "model", "model_cannot_run", {
            **about, "modes": ", ".join(runs.modes(RUN_MODES)),
            "mode": f"{mode} with a ControlNet" if controlnet else mode}
    if inputs.get("negative") and not runs.negative:
        return "negative", "model_reads_no_negative", about
    if inputs.get("reference") is not None and family not in REFERENCE_FAMILIES:
        return "reference", "model_takes_no_reference", about
    pictures = [k for k in EDIT_PICTURES if k in signature.inputs and inputs.get(k) is not None]
    if mode == "edit" and len(pictures) > runs.images:
        return pictures[-1], "model_too_many_pictures", {
            **about, "count": runs.images, "given": len(pictures)}
    given, code = PROMPTS.get(op, ("", ""))
    text = inputs.get(given)
    if tokens is not None and isinstance(text, str) and text:
        count = tokens(text)
        if count > runs.prompt_tokens:
            return given, code, {**about, "tokens": count, "max": runs.prompt_tokens}
    return None


def _given(expr: Any) -> bool:
    """A text input set to something: a parameter (a column may fill it), words or fields."""
    if isinstance(expr, Text):
        return any(text or name for text, name in expr.parts)
    return isinstance(expr, ParamRef) or bool(expr)


def _names(t: Template, expr: Any) -> Iterable[str]:
    for e in walk(expr):
        if isinstance(e, str) and e:
            yield e
        elif isinstance(e, ParamRef) and e.name in t.params:
            p = t.params[e.name]
            yield from (p.choices or ([p.default] if isinstance(p.default, str) else []))


def markdown_table() -> str:
    """The families table in docs/models.md (a test keeps the two identical)."""
    lines = ["| family | runs | steps | guidance | prompt | native | weights (bf16 / Q4_0) |",
             "|---|---|---|---|---|---|---|"]
    for p in PROFILES.values():
        prompt = f"{p.prompt_tokens} tokens" + ("" if p.negative else ", no negative")
        lines.append(f"| `{p.name}` {p.label} | {', '.join(p.modes())} | {p.steps} | "
                     f"{p.guidance:g} ({p.cfg}) | {prompt} | {p.native} px, ×{p.multiple} | "
                     f"{p.gib('bf16'):.1f} / {p.gib('q4_0'):.1f} GiB |")
    return "\n".join(lines)
