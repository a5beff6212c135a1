"""The ops that run models: `generate` on diffusers (txt2img, img2img, ControlNet, LoRAs,
six samplers), `edit` (a picture changed by a written instruction) and `upscale` (a
diffusers upscaler when one is named, else resampling).

torch and diffusers are imported inside the functions that need them, so registering
these ops loads neither: the chat side and the template checker import the registry
freely. `generate` is batched: jobs whose inputs have the same `shape` share one
pipeline call with a list of prompts, images and one seeded generator per image, so
each image is the one its job would get alone (within floating-point tolerance).
"""

from __future__ import annotations

import inspect
import math
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from PIL import Image

from executor.diffusers.ops.base import Context, ImageInput, OpError, op
from templates.families import REFERENCE_FAMILIES, Profile, profile
from templates.signatures import OPS

if TYPE_CHECKING:
    from executor.diffusers.previews import Decode

SCHEDULERS = {  # sampler name -> (diffusers scheduler class, config overrides)
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpm++_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++",
                                                 "solver_order": 2}),
    "dpm++_2m_karras": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++",
                                                        "solver_order": 2,
                                                        "use_karras_sigmas": True}),
    "ddim": ("DDIMScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
}
# Flow-matching families (FLUX) sample with their own scheduler: "euler" names it, and the
# SD samplers above, which step a noise schedule these models were not trained on, refuse.
FLOW_SCHEDULERS: dict[str, tuple[str, dict[str, Any]]] = {
    "euler": ("FlowMatchEulerDiscreteScheduler", {})}
PER_IMAGE = ("prompt", "negative", "seed", "init_image", "control_image")


def shape(inputs: dict[str, Any]) -> tuple:
    """What must be equal for two generate calls to share one pipeline call."""
    loras = tuple((lora["name"], float(lora["weight"])) for lora in inputs.get("loras") or [])
    size = tuple(inputs["size"]) if inputs.get("size") else None
    return (inputs["model"], inputs.get("controlnet"), inputs.get("init_image") is None,
            size, inputs.get("steps"), inputs.get("guidance"), inputs.get("sampler"),
            inputs.get("strength"), inputs.get("control_scale"), loras,
            _same(inputs.get("reference")), inputs.get("ip_adapter"),
            inputs.get("reference_scale"))


def _same(picture: Any) -> Any:
    """What tells two reference pictures apart: a stored file's name, else the image
    object (diffusers steers a whole call by one reference per IP-Adapter, so only jobs of
    one reference share a call)."""
    return picture if picture is None or isinstance(picture, str) else id(picture)


@op(batched=True, shape=shape, device=True)
def generate(ctx: Context, batch: list[dict[str, Any]]) -> list[Image.Image]:
    return generate_batch(ctx, batch)



@op(device=True)
def upscale(ctx: Context, image: ImageInput, scale: float = 2.0,
            model: str | None = None) -> Image.Image:
    im = ctx.image(image)
    name = model or ctx.upscaler
    target = (round(im.width * scale), round(im.height * scale))
    if name:
        im = upscale_with_model(ctx, name, im)
        ctx.used_models.append(name)
    return im if im.size == target else im.resize(target, Image.Resampling.LANCZOS)


def _scheduler(sampler: str | None, original: dict, family: str | None) -> Any:
    import diffusers
    overrides: dict[str, Any]
    samplers = FLOW_SCHEDULERS if profile(family).flow else SCHEDULERS
    if sampler is None:
        name, overrides = original["_class_name"], {}
    elif sampler in samplers:
        name, overrides = samplers[sampler]
    else:
        raise OpError(f"sampler {sampler} does not run {family} models: use "
                      f"{' or '.join(samplers)}, or leave it empty for the model's own")
    return getattr(diffusers, name).from_config(original, **overrides)


def generate_batch(ctx: Context, batch: list[dict[str, Any]]) -> list[Image.Image]:
    """Images for generate inputs of one shape, in order; one pipeline call."""
    import torch
    first = batch[0]
    if any(shape(inputs) != shape(first) for inputs in batch):
        raise ValueError("generate_batch needs inputs of one shape")
    cache = ctx.models
    model, controlnet = first["model"], first.get("controlnet")
    if first.get("control_image") is not None and not controlnet:
        raise OpError("a control image needs a controlnet model")
    if controlnet and first.get("control_image") is None:
        raise OpError(f'controlnet "{controlnet}" needs a control image')
    mode = OPS["generate"].mode_of(first)
    pipe = cache.pipeline(model, mode, controlnet)
    info = cache.units[model].info
    cache.use_loras(model, first.get("loras") or [])
    reference = _references(ctx, batch, info.family)
    cache.use_ip_adapter(model, pipe, first.get("ip_adapter") if reference else None,
                         first.get("reference_scale", 0.6))
    ctx.used_models.extend([model, *([controlnet] if controlnet else []),
                            *([first["ip_adapter"]] if reference else []),
                            *(lora["name"] for lora in first.get("loras") or [])])

    if first.get("size"):
        width, height = (int(v) for v in first["size"])
    else:
        width = height = info.size or native_size(pipe, info.family)
    step = multiple(pipe)
    width, height = width - width % step, height - height % step
    if min(width, height) < step:
        raise OpError(f"size {width}x{height} is too small")

    # A fresh scheduler per call, from the checkpoint's own config (never from whatever
    # sampler the previous call set).
    pipe.scheduler = _scheduler(first.get("sampler"), cache.units[model].scheduler, info.family)
    n = len(batch)
    runs = profile(info.family)
    kwargs: dict[str, Any] = {
        "prompt": [i["prompt"] for i in batch],
        "num_inference_steps": model_steps(first.get("steps") or info.steps, cache.units[model]),
        runs.cfg: first["guidance"] if first.get("guidance") is not None else info.guidance,
        # CPU generators: the same seed gives the same noise on any device.
        "generator": [torch.Generator("cpu").manual_seed(int(i["seed"])) for i in batch],
        "num_images_per_prompt": 1,
        "callback_on_step_end": step_callback(ctx, preview_decoder(ctx, model, pipe, width,
                                                                   height)),
    }
    kwargs.update(negative_prompt(runs, model, [i.get("negative") or "" for i in batch]))

    def fit(value: Any) -> Image.Image:
        return ctx.image(value).resize((width, height), Image.Resampling.LANCZOS)

    control = [fit(i["control_image"]) for i in batch] if controlnet else None
    if mode == "img2img":
        kwargs["image"] = [fit(i["init_image"]) for i in batch]  # the size comes from these
        strength = kwargs["strength"] = first.get("strength", 0.75)
        # diffusers denoises int(steps * strength) steps: a few steps at a low strength (a
        # "vary" of a 4-step row) would be none, and the pipeline fails on an empty schedule.
        if strength > 0 and int(kwargs["num_inference_steps"] * strength) < 1:
            kwargs["num_inference_steps"] = math.ceil(1 / strength)
        if _transformer(pipe):  # FLUX's img2img resizes to its own default size unless told
            kwargs.update(height=height, width=width)
        if controlnet:
            kwargs["control_image"] = control
    else:
        kwargs.update(height=height, width=width)
        if controlnet:
            kwargs["image"] = control
    if controlnet:
        kwargs["controlnet_conditioning_scale"] = float(first.get("control_scale", 1.0))
    if reference:
        kwargs["ip_adapter_image"] = reference
    kwargs.update(_sized(pipe, width, height))
    images = pipe(**kwargs).images
    if len(images) != n:
        raise RuntimeError(f"the pipeline made {len(images)} images for {n} prompts")
    return images


@op(device=True)
def edit(ctx: Context, image: ImageInput, instruction: str, model: str, seed: int,
         image_2: ImageInput | None = None, image_3: ImageInput | None = None,
         negative: str = "", steps: int | None = None, guidance: float | None = None,
         size: list[int] | None = None, keep_size: bool = False,
         loras: list[dict[str, Any]] | None = None) -> Image.Image:
    """The picture changed by the instruction, on the model's edit pipeline (FLUX.1 Kontext,
    Qwen-Image-Edit, FLUX.2). The first picture is the one edited, made the output's size
    (its own, within the model's native area, in the model's multiples); the others are
    references the instruction may name ("put the logo from picture 2 on the bottle")."""
    import torch
    cache = ctx.models
    pipe = cache.pipeline(model, OPS["edit"].mode_of({}))
    info = cache.units[model].info
    runs = profile(info.family)
    pictures = [ctx.image(i).convert("RGB") for i in (image, image_2, image_3) if i is not None]
    own = pictures[0].size
    if len(pictures) > runs.images:
        raise OpError(f'model "{model}" is {runs.label}: it edits with at most {runs.images} '
                      f"picture{'s' if runs.images > 1 else ''}, not {len(pictures)}")
    cache.use_loras(model, loras or [])
    ctx.used_models.extend([model, *(lora["name"] for lora in loras or [])])
    native = info.size or native_size(pipe, info.family)
    width, height = (int(v) for v in size) if size else _within(pictures[0].size, native)
    step = multiple(pipe)
    width, height = width - width % step, height - height % step
    if min(width, height) < step:
        raise OpError(f"size {width}x{height} is too small")
    # The edited picture at the output's size; the references within the model's area (a
    # 4000 px product photo would cost the attention over its every patch, for nothing).
    pictures = [pictures[0].resize((width, height), Image.Resampling.LANCZOS),
                *(p.resize(_within(p.size, native), Image.Resampling.LANCZOS)
                  for p in pictures[1:])]
    kwargs: dict[str, Any] = {
        "image": pictures[0] if runs.images == 1 else pictures, "prompt": instruction,
        "height": height, "width": width,
        "num_inference_steps": model_steps(steps or info.steps, cache.units[model]),
        runs.cfg: guidance if guidance is not None else info.guidance,
        "generator": torch.Generator("cpu").manual_seed(int(seed)),
        "callback_on_step_end": step_callback(ctx, preview_decoder(ctx, model, pipe, width,
                                                                   height))}
    kwargs.update({k: v[0] for k, v in negative_prompt(runs, model, [negative]).items()})
    kwargs.update(_sized(pipe, width, height))
    with _pictures_at(pipe, native):
        made = pipe(**kwargs).images[0]
    return made.resize(own, Image.Resampling.LANCZOS) if keep_size and made.size != own else made


def _references(ctx: Context, batch: list[dict[str, Any]], family: str | None
                ) -> Image.Image | None:
    """The call's reference picture for its IP-Adapter (SD 1.5 and SDXL's), or None
    where it has none (one shape: the batch's jobs share one, or have none)."""
    if batch[0].get("reference") is None:
        return None
    if not batch[0].get("ip_adapter"):
        raise OpError("a reference picture needs an IP-Adapter model (ip_adapter)")
    if family not in REFERENCE_FAMILIES:
        raise OpError(f"reference pictures run through an IP-Adapter on "
                      f"{', '.join(profile(f).label for f in REFERENCE_FAMILIES)} models, not "
                      f"{profile(family).label}: on an edit model give them as pictures 2 and 3")
    return ctx.image(batch[0]["reference"]).convert("RGB")


_AREA = threading.Lock()


@contextmanager
def _pictures_at(pipe: Any, native: int) -> Iterator[None]:
    """Qwen-Image-Edit's pipeline encodes every picture at 1024x1024's area (its module's
    VAE_IMAGE_SIZE: the real model's area, written as a constant): for the call, the
    model's own native area, which is that for the real model and 64x64 for the demo (where
    a 1024x1024 encode took 4.6 s of a 4.9 s edit). Calls wait on each other meanwhile."""
    module: Any = sys.modules[type(pipe).__module__]
    if not hasattr(module, "VAE_IMAGE_SIZE"):
        yield
        return
    with _AREA:
        before = module.VAE_IMAGE_SIZE
        module.VAE_IMAGE_SIZE = native * native
        try:
            yield
        finally:
            module.VAE_IMAGE_SIZE = before


def _sized(pipe: Any, width: int, height: int) -> dict[str, Any]:
    """Arguments that keep a pipeline at the size asked: FLUX.1 Kontext scales its output to
    1 MP (`max_area`) and its picture to its preferred sizes (`_auto_resize`) whatever the
    height and width, so a template's size (or the demo's 64 px) would come out 1024 px."""
    if "max_area" not in inspect.signature(pipe.__call__).parameters:
        return {}
    return {"_auto_resize": False, "max_area": width * height}


def model_steps(steps: int, unit: Any) -> int:
    """The steps, refused below what the model's scheduler can take: one that stretches
    its schedule to end at a terminal shift (Qwen-Image's) divides by zero at one step
    and would make a black image."""
    if steps < 2 and (unit.scheduler or {}).get("shift_terminal"):
        raise OpError(f'model "{unit.info.name}" samples 2 steps at least (its scheduler ends '
                      "its schedule at a terminal shift), not 1")
    return steps


def negative_prompt(runs: Profile, model: str, given: list[str]) -> dict[str, Any]:
    """The negative prompt argument for a family that reads one; a family that does not
    (FLUX, Z-Image-Turbo) refuses one rather than ignoring it."""
    if runs.negative:
        return {"negative_prompt": [g or runs.no_negative for g in given]}
    if any(given):
        raise OpError(f'model "{model}" is {runs.label}, which reads no negative prompt: say '
                      "what to avoid in the prompt instead")
    return {}


def _within(size: tuple[int, int], native: int) -> tuple[int, int]:
    """A picture's size, scaled down (proportions kept) to the model's native area."""
    width, height = size
    if width * height <= native * native:
        return width, height
    scale = math.sqrt(native * native / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def native_size(pipe: Any, family: str | None) -> int:
    """The pipeline's own width and height: a UNet's latent size, or a transformer
    pipeline's default (FLUX's 128 latents), times what the VAE scales by; the family's
    where the pipeline has none (Z-Image)."""
    unet = getattr(pipe, "unet", None)
    latents = unet.config.sample_size if unet is not None else getattr(
        pipe, "default_sample_size", None)
    return int(latents * pipe.vae_scale_factor) if latents else profile(family).native


def multiple(pipe: Any) -> int:
    """What width and height must be multiples of: the VAE's scale, twice that where the
    transformer reads latents in 2x2 patches (FLUX: 16 px)."""
    return int(pipe.vae_scale_factor * 2) if _transformer(pipe) else 8


def _transformer(pipe: Any) -> bool:
    """A transformer pipeline (FLUX), where a UNet pipeline has a UNet."""
    return getattr(pipe, "transformer", None) is not None


def step_callback(ctx: Context, decode: Decode | None = None
                  ) -> Callable[[Any, int, Any, dict[str, Any]], dict[str, Any]]:
    """The pipeline's step callback (callback_on_step_end): tells the job's progress,
    interrupts the pipeline when the job is to stop, and pictures the latents when a
    preview is due (`decode`: executor.diffusers.previews)."""
    def callback(pipe: Any, step: int, timestep: Any,
                 tensors: dict[str, Any]) -> dict[str, Any]:
        if ctx.on_step is not None and ctx.on_step(step + 1, pipe.num_timesteps):
            pipe._interrupt = True
        elif ctx.preview is not None and decode is not None and "latents" in tensors:
            ctx.preview(decode, tensors["latents"], step + 1, pipe.num_timesteps)
        return tensors
    return callback


def preview_decoder(ctx: Context, model: str, pipe: Any, width: int, height: int
                    ) -> Decode | None:
    """How this call's latents become previews (None: the executor makes none). Made at
    the first picture asked for (previews.Lazy): nobody watching, no tiny VAE is loaded
    and no colours fitted."""
    if ctx.preview is None:
        return None
    from executor.diffusers import previews
    return previews.Lazy(lambda: previews.decoder(pipe, model, width, height,
                                                  ctx.models.preview_vae(model)))


class Interrupted(Exception):
    """Raised from a legacy step callback, which has no other way to stop a pipeline."""


def upscale_with_model(ctx: Context, name: str, image: Image.Image) -> Image.Image:
    """A diffusers upscaler (e.g. Stable Diffusion x4), conditioned on an empty prompt."""
    import torch
    pipe = ctx.models.upscaler(name)
    steps = ctx.models.units[name].info.steps

    def on_step(step: int, timestep: Any, latents: Any) -> None:
        if ctx.on_step is not None and ctx.on_step(step + 1, steps):
            raise Interrupted
    result = pipe(prompt="", image=image, num_inference_steps=steps,
                  generator=torch.Generator("cpu").manual_seed(0), callback=on_step,
                  callback_steps=1)
    return result.images[0]
