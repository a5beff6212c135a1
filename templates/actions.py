"""New jobs from a finished image: the table of actions (`ACTIONS`, one `ActionSpec` each)
and the bound job each one runs.

The table is what every front reads: chat's commands and the buttons under each image
(Slack, DingTalk), the CLI's `genbot job …`, the API's action names and OpenAPI document,
the dashboard's buttons (GET /api/v1/vocabulary), and who may (bot.app.permissions). A new
action is a spec here with its derive function, an op if it needs one, and its words in
the catalog (`verb_NAME`, `help_NAME`, `about_NAME`): docs/architecture.md, "an image action".

Each takes the template and the parent's bound job (what made the image) and returns the
child's bound job, bound through the same `bind` as a sheet's row, so a child is checked
and stored exactly like one:

  again    the row's values with every seed drawn anew
  edit     the row's values with the changes given, each read like a sheet cell; or,
           given an instruction ("把背景换成海滩"), the parent's image changed by it on an
           edit model (the `edit` op: FLUX.1 Kontext, Qwen-Image-Edit, FLUX.2), saved
           beside it ("_edit")
  vary     diffusers: the row again, its first `generate` turned into an image-to-image
           pass from the parent's image at a low strength (the template's own
           `vary_strength`, else VARY_STRENGTH); ComfyUI: the parent's image fed into
           the template's `vary_image` parameter (else its first image parameter), with
           new seeds; the workflow's own denoise stays its author's
  upscale  the parent's image through the executor's upscaler (the `upscale` op: a
           configured diffusers upscaler, else high-quality resampling), saved beside
  repaint  the region a mask marks repainted on an inpaint model (the `fill` op), every
           pixel outside it the image's own, saved beside ("_repaint")
  extend   the canvas grown by margins or to an aspect ("9:16"), the new area painted on
           an inpaint model (`fill`), the image itself unchanged, saved beside ("_extend")

Several children of one ask share a batch folder: `siblings` names their files apart.

What an action cannot do for a template is a `Problem` with a code people read
(bot.messages), never a half-made job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import msgspec

from storage.files import name_in_batch
from templates.binding import bind, kept, safe_output_name
from templates.jobs import BoundJob, ComfyJob, DiffusersJob, Step
from templates.params import Param, Problem, coerce, draw_seed
from templates.signatures import OPS
from templates.size_rules import Grown, Scaled, SizeRule

if TYPE_CHECKING:
    from templates.graph import Template

VARY_STRENGTH = 0.35  # enough to change details, little enough to keep the picture
UPSCALE_MAX = OPS["upscale"].inputs["scale"].max or 8.0


# --- the table -----------------------------------------------------------------------

PARAMETERS = ("count", "strength", "factor", "values", "instruction", "mask", "region",
              "margins")
#   what an action may take beside the image: count (how many), strength (0-1), factor
#   (>1), values (KEY=VALUE changes), instruction (a sentence: what an edit model changes,
#   what a repaint or an extend paints), mask (where to repaint), region (where to
#   repaint, in words), margins (px to add on each side, or an aspect to grow to)
SIDES = ("left", "right", "top", "bottom")


@dataclass(frozen=True)
class Ask:
    """What a person asked of an action beside the image: the values of PARAMETERS."""
    count: int = 1
    values: Mapping[str, Any] = field(default_factory=dict)
    factor: float = 2.0
    strength: float | None = None  # None: the template's own, else VARY_STRENGTH
    instruction: str = ""  # edit: what to change in the image; repaint, extend: what to paint
    model: str | None = None  # the model it runs on ([templates] edit_model, fill_model)
    mask: str | None = None  # repaint: the mask in the file store, white where to paint
    region: str = ""  # repaint: where to paint, in words ("the bottle", "瓶子") …
    segmenter: str | None = None  # … found by this model ([templates] segmentation_model)
    left: int = 0  # extend: px added on each side …
    right: int = 0
    top: int = 0
    bottom: int = 0
    aspect: str | None = None  # … or the shape the canvas grows to around the image ("9:16")

    @property
    def margins(self) -> tuple[int, int, int, int]:
        return self.left, self.right, self.top, self.bottom


Derive = Callable[["Template", BoundJob, Ask, "str | None"], BoundJob]


@dataclass(frozen=True)
class ActionSpec:
    """One action on a finished image: what it takes, who may, what it needs of the
    template and the image, how it makes the child job."""
    name: str
    derive: Derive  # (template, the parent's bound job, the ask, its image or None) -> child
    takes: tuple[str, ...] = ()  # of PARAMETERS; an action without "count" makes one image
    role: str = "submitter"  # the least role that may (a new image costs the GPU)
    aliases: tuple[str, ...] = ()  # chat's other words for it, in any language
    icon: str = ""  # before its verb on a button
    uses_image: bool = False  # it needs the parent's image file, finished and there
    cannot: Callable[[Template], str | None] = lambda t: None  # why a template cannot:
    #   a Problem code (bot.messages), or None; the action is offered only where None
    sizing: tuple[SizeRule, ...] = ()  # the parent's image sized by the ask's values
    #   (upscale: by its factor), bounded as a sheet's sizes are; (): its graph says all
    button: bool = True  # offered under each finished image (chat's buttons, the dashboard)
    cannot_run: str = "model_cannot_run"  # the Problem code when the child's model cannot
    #   run what the action made of the row (templates.families.row_refusal)
    fills: bool = False  # it paints on an inpaint model ([templates] fill_model, else the
    #   image's own model where its family inpaints)

    @property
    def verb(self) -> str:
        """Its name in the catalog (bot.messages): "Vary", "变体"."""
        return f"verb_{self.name}"

    def offered(self, template: Template | None) -> bool:
        return template is not None and self.cannot(template) is None

    def child(self, t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
        """The child job; one made from the parent's image names it (`made_from`): its
        files' Content Credentials then name the parent's picture as where they came from."""
        made = self.derive(t, parent, ask, image)
        return msgspec.structs.replace(made, made_from=image) if image else made

    def needs_image(self, ask: Ask) -> bool:
        """It works on the parent's image file: always, or (edit) when given an
        instruction, which changes the image itself."""
        return self.uses_image or bool(ask.instruction)


def _no_seed(t: Template) -> str | None:
    return None if any(p.type == "seed" for p in t.params.values()) else "action_no_seed"


def _no_source(t: Template) -> str | None:
    """Vary feeds the image into a ComfyUI image input, or a diffusers `generate`."""
    if t.comfy is not None:
        has_image = t.vary_image or any(p.type == "image" for p in t.params.values())
        return None if has_image else "vary_no_image"
    return None if any(n.op == "generate" for n in t.nodes.values()) else "vary_no_model"


def _vary(t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
    assert image is not None
    if t.comfy is not None and ask.count > 1 and _no_seed(t):
        raise Problem("vary_count_no_seed", template=t.name)  # N times the same image
    return vary(t, parent, image, ask.strength)


def _edit(t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
    if not ask.instruction:
        return edit(t, parent, dict(ask.values))
    if ask.values:
        raise Problem("edit_both")
    assert image is not None and ask.model is not None  # (needs_image; the app's model)
    return instruct(t, parent, image, ask.instruction, ask.model)


def _upscale(t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
    assert image is not None
    return upscale(t, parent, image, ask.factor)


def _repaint(t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
    assert image is not None and ask.model is not None  # (the app's fill model)
    if ask.mask is None and not ask.region:
        raise Problem("repaint_no_mask")
    return fill(t, parent, image, ask.model, "repaint", ask.instruction, mask=ask.mask,
                region=ask.region, segmenter=ask.segmenter if ask.region else None)


def _extend(t: Template, parent: BoundJob, ask: Ask, image: str | None) -> BoundJob:
    assert image is not None and ask.model is not None
    if not any(ask.margins) and not ask.aspect:
        raise Problem("extend_nothing")
    return fill(t, parent, image, ask.model, "extend", ask.instruction,
                **dict(zip(SIDES, ask.margins, strict=True)), aspect=ask.aspect)


ACTIONS: dict[str, ActionSpec] = {s.name: s for s in [
    ActionSpec("again", lambda t, parent, ask, image: again(t, parent), takes=("count",),
               aliases=("再来", "重画", "reroll"), icon="🔁", cannot=_no_seed),
    ActionSpec("vary", _vary, takes=("count", "strength"), aliases=("变体", "变化"),
               icon="✨", uses_image=True, cannot=_no_source, cannot_run="vary_no_img2img"),
    ActionSpec("upscale", _upscale, takes=("factor",), aliases=("放大",), icon="🔍",
               uses_image=True, sizing=(Scaled("factor"),)),
    ActionSpec("edit", _edit, takes=("values", "instruction"), aliases=("修改", "编辑"),
               icon="✏️"),
    # (no chat button: a region is painted or sent as a picture, a shape is asked for)
    ActionSpec("repaint", _repaint, takes=("mask", "region", "instruction"),
               aliases=("局部重绘", "重绘"), icon="🖌️", uses_image=True,
               button=False, cannot_run="fill_cannot_run", fills=True),
    ActionSpec("extend", _extend, takes=("margins", "instruction"),
               aliases=("扩图", "扩展", "outpaint", "expand"), icon="↔️", uses_image=True,
               sizing=(Grown(),), button=False, cannot_run="fill_cannot_run", fills=True),
]}


# What a review's "changes requested" becomes, the first that can: an edit by the note
# (where an edit model is configured), else a new try of the row.
CHANGES = ("edit", "again")
# What a channel's file whose picture is at fault asks for (bot.app.deliveries): a new seed.
REROLL = "again"


def offered(template: Template | None) -> list[str]:
    """The actions a template's images offer, in the table's order."""
    return [s.name for s in ACTIONS.values() if s.offered(template)]


# --- what each one makes --------------------------------------------------------------

def again(t: Template, parent: BoundJob) -> BoundJob:
    """The same row, every seed drawn anew."""
    seeds = [p.name for p in t.params.values() if p.type == "seed"]
    if not seeds:
        raise Problem("action_no_seed", template=t.name)
    return _rebind(t, parent, {**parent.params, **dict.fromkeys(seeds)})


def edit(t: Template, parent: BoundJob, changes: dict[str, Any]) -> BoundJob:
    """The row's values with `changes` (by parameter name or any of its column headers),
    each read as a sheet cell would be. A seed left out stays: only what was asked changes."""
    values = dict(parent.params)
    for key, raw in changes.items():
        p = _param(t, key)
        if p.picture:
            raise Problem("edit_image", key=key)
        try:
            values[p.name] = coerce(p, raw)
        except Problem as e:
            raise Problem(e.code, **{**e.details, "key": key, "column": p.name}) from None
    return _rebind(t, parent, values)


def vary(t: Template, parent: BoundJob, image: str, strength: float | None = None) -> BoundJob:
    """Close variations of the parent's image (`image`: its path in the file store)."""
    seeds = {p.name: None for p in t.params.values() if p.type == "seed"}
    if isinstance(parent, ComfyJob):
        if strength is not None:  # a workflow's own denoise is its author's, not ours
            raise Problem("vary_strength_comfy", template=t.name)
        fed = t.vary_image or next((p.name for p in t.params.values() if p.type == "image"),
                                   None)
        if fed is None:
            raise Problem("vary_no_image", template=t.name)
        child = _rebind(t, parent, {**parent.params, **seeds, fed: image})
        named = {k: v for k, v in child.named.items() if k != fed}  # not the sheet's now
        return msgspec.structs.replace(child, named=named)
    child = _rebind(t, parent, {**parent.params, **seeds})
    assert isinstance(child, DiffusersJob)
    first = next((i for i, s in enumerate(child.nodes) if s.op == "generate"), None)
    if first is None:
        raise Problem("vary_no_model", template=t.name)
    step = child.nodes[first]
    strength = strength if strength is not None else (t.vary_strength or VARY_STRENGTH)
    nodes = list(child.nodes)
    nodes[first] = Step(step.id, step.op, {**step.inputs, "init_image": image,
                                           "strength": float(strength)})
    if not seeds:  # a template whose seed is fixed: vary still needs new noise
        nodes[first] = Step(step.id, step.op, {**nodes[first].inputs, "seed": draw_seed()})
    return msgspec.structs.replace(child, nodes=nodes)


def instruct(t: Template, parent: BoundJob, image: str, instruction: str,
             model: str) -> DiffusersJob:
    """The parent's image changed by `instruction` on the edit model `model`, a new seed,
    at the image's own size, named after it ("_edit") in the folder its template put it
    in. The row's values stay the parent's (its results row reads as the image it was made
    from)."""
    return _beside(t, parent, image, "edit", [
        Step("edit", "edit", {"image": image, "instruction": instruction, "model": model,
                              "seed": draw_seed(), "keep_size": True})], "edit.image")


def fill(t: Template, parent: BoundJob, image: str, model: str, tag: str, prompt: str = "",
         **region: Any) -> DiffusersJob:
    """The parent's image with a region repainted (`mask`) or its canvas extended (the
    margins, `aspect`) on the inpaint model `model`, a new seed, saved beside it ("_tag").
    What to paint: the prompt given, else the prompt that made the image — with its
    negative and LoRAs where `model` is the one that made it too."""
    source = made_by(parent)
    own = source.get("model") == model
    inputs = {"image": image, "model": model, "seed": draw_seed(),
              "prompt": prompt or source.get("prompt") or source.get("instruction") or "",
              **{k: v for k, v in region.items() if v}}
    if own:
        inputs.update({k: source[k] for k in ("negative", "loras") if source.get(k)})
    # An extend keeps the whole image, the product in it too, where it was: putting the
    # photo back stretched over the grown canvas would move it. A repaint puts it back.
    grows = any(region.get(side) for side in SIDES) or bool(region.get("aspect"))
    return _beside(t, parent, image, tag, [Step("fill", "fill", inputs)], "fill.image",
                   keep=not grows)


def channel_extends(job: BoundJob, model: str) -> BoundJob:
    """The job with its picture grown, on the fill model, to each aspect its channels'
    `extend` files take: a fill step and a save per aspect after the job's first save
    ("A1/2.png" -> "A1/2_ext9x16.png"), growing what that save writes (a picture already
    of the aspect is saved as it is). Each such deliverable names its grown picture. The
    product stays where it was: an extend keeps every pixel it had."""
    from templates.channels import aspect_of
    wanted = sorted({aspect_of(d.rendition.size) for d in job.deliver
                     if d.rendition.fit == "extend"})
    save = next((s for s in getattr(job, "nodes", []) if s.op == "save"), None)
    if not wanted or not isinstance(job, DiffusersJob) or save is None:
        return job
    source = made_by(job)
    name = PurePosixPath(str(save.inputs["name"]))
    nodes, outputs, grown_as = list(job.nodes), dict(job.outputs), {}
    for w, h in wanted:
        fid, sid = f"extend_{w}x{h}", f"save_extend_{w}x{h}"
        out = safe_output_name(str(name.with_name(f"{name.stem}_ext{w}x{h}")), "png")
        nodes += [Step(fid, "fill", {"image": save.inputs["image"], "model": model,
                                     "seed": draw_seed(), "prompt": source.get("prompt", ""),
                                     "aspect": f"{w}:{h}", "if_needed": True}),
                  Step(sid, "save", {"image": {"@": f"{fid}.image"}, "name": out,
                                     "format": "png"})]
        outputs[sid] = grown_as[(w, h)] = out
    deliver = [msgspec.structs.replace(d, picture=grown_as[aspect_of(d.rendition.size)])
               if d.rendition.fit == "extend" else d for d in job.deliver]
    return msgspec.structs.replace(job, nodes=nodes, outputs=outputs, deliver=deliver)


def made_by(job: BoundJob) -> dict[str, Any]:
    """The inputs of the step that drew a job's image (its first generate or edit); {}:
    none (a ComfyUI job, a template without a model)."""
    return next((s.inputs for s in getattr(job, "nodes", []) if s.op in ("generate", "edit")),
                {})


def upscale(t: Template, parent: BoundJob, image: str, factor: float = 2.0) -> DiffusersJob:
    """The parent's image enlarged `factor` times, named after it ("_x2") in the folder
    the template's output pattern put it in ("{sku}/{row}.png": "A1/2_x2.png")."""
    if not 1 < factor <= UPSCALE_MAX:
        raise Problem("upscale_factor", value=factor, max=UPSCALE_MAX)
    return _beside(t, parent, image, f"x{factor:g}", [
        Step("upscale", "upscale", {"image": image, "scale": float(factor), "model": None})],
        "upscale.image")


def _beside(t: Template, parent: BoundJob, image: str, tag: str, steps: list[Step],
            made: str, keep: bool = True) -> DiffusersJob:
    """A job of `steps` on the parent's image whose output `made` is saved beside it, its
    name the image's with "_tag" ("A1/2.png" -> "A1/2_x2.png"), in the image's format (a
    template that keeps its product puts it back first)."""
    name = PurePosixPath(name_in_batch(image))
    suffix = name.suffix[1:].lower()
    fmt = suffix if suffix in ("png", "jpg", "jpeg", "webp") else "png"
    fmt = "jpg" if fmt == "jpeg" else fmt
    out = safe_output_name(str(name.with_name(f"{name.stem}_{tag}")), fmt)
    if t.keep is not None and keep:  # the product put back over what the action made, too
        steps = [*steps, kept(t.keep, parent.params, {"@": made}, "save", out)]
        made = f"{steps[-1].id}.image"
    return DiffusersJob(
        template=t.name, row=parent.row, params=dict(parent.params), named=dict(parent.named),
        version=parent.version, revision=parent.revision, deliver=list(parent.deliver),
        nodes=[*steps, Step("save", "save", {"image": {"@": made}, "name": out,
                                             "format": fmt})],
        outputs={"save": out})


def siblings(children: list[BoundJob]) -> list[BoundJob]:
    """One action's children (again or vary, count > 1) share a batch folder and would
    save under the same names, each overwriting the last: the first keeps the template's
    names, the n-th has "_n" before the suffix ("A1/2.png", "A1/2_2.png", …; not "-n",
    which a ComfyUI job's further images take)."""
    return [child if n == 1 else renamed(child, str(n)) for n, child in enumerate(children, 1)]


def renamed(job: BoundJob, tag: str, like: dict[str, str] | None = None) -> BoundJob:
    """`job` saving its images as NAME_TAG.EXT: from its own names, or from `like` (another
    job's, saving node by node) where that names the same saving nodes."""
    base = {node: name for node, name in (like or {}).items() if node in job.outputs} \
        or job.outputs
    names = {node: _tagged(name, tag) for node, name in base.items()}
    if isinstance(job, ComfyJob):
        return msgspec.structs.replace(job, outputs=names)
    nodes = [Step(s.id, s.op, {**s.inputs, "name": names[s.id]}) if s.id in names else s
             for s in job.nodes]
    return msgspec.structs.replace(job, outputs=names, nodes=nodes)


def _tagged(name: str, tag: str) -> str:
    path = PurePosixPath(name)
    return safe_output_name(str(path.with_name(f"{path.stem}_{tag}{path.suffix}")))


def _param(t: Template, key: str) -> Param:
    found = t.param_for(key)
    if found is None:
        raise Problem("edit_unknown", key=key, names=", ".join(t.params))
    return found


def _rebind(t: Template, parent: BoundJob, values: dict[str, Any]) -> BoundJob:
    """The template bound again for the parent's row: its pictures as the sheet named
    them, and its sales channels' files (an image made again is delivered as the first)."""
    child = bind(t, values, row=parent.row, extras=parent.columns)
    return msgspec.structs.replace(child, named=dict(parent.named),
                                   deliver=list(parent.deliver))
