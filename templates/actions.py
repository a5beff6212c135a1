"""New jobs from a finished image: again, vary, upscale and edit — the bound job each one runs.

Each takes the template and the parent's bound job (what made the image) and returns the
child's bound job, bound through the same `bind` as a sheet's row, so a child is checked
and stored exactly like one:

  again    the row's values with every seed drawn anew
  edit     the row's values with the changes given, each read like a sheet cell
  vary     diffusers: the row again, its first `generate` turned into an image-to-image
           pass from the parent's image at a low strength (the template's own
           `vary_strength`, else VARY_STRENGTH); ComfyUI: the parent's image fed into
           the template's `vary_image` parameter (else its first image parameter), with
           new seeds; the workflow's own denoise stays its author's
  upscale  the parent's image through the executor's upscaler (the `upscale` op: a
           configured diffusers upscaler, else high-quality resampling), saved beside

Several children of one ask share a batch folder: `siblings` names their files apart.

What an action cannot do for a template is a `Problem` with a code people read
(bot.messages), never a half-made job.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import msgspec

from templates.binding import bind, safe_output_name
from templates.jobs import BoundJob, ComfyJob, DiffusersJob, Step
from templates.params import Problem, coerce, draw_seed
from templates.signatures import OPS

if TYPE_CHECKING:
    from templates.graph import Template

VARY_STRENGTH = 0.35  # enough to change details, little enough to keep the picture
UPSCALE_MAX = OPS["upscale"].inputs["scale"].max or 8.0


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
        if p.type == "image":
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


def upscale(t: Template, parent: BoundJob, image: str, factor: float = 2.0) -> DiffusersJob:
    """The parent's image enlarged `factor` times, named after it ("_x2")."""
    if not 1 < factor <= UPSCALE_MAX:
        raise Problem("upscale_factor", value=factor, max=UPSCALE_MAX)
    name = PurePosixPath(image).name
    stem, suffix = name.rsplit(".", 1) if "." in name else (name, "png")
    fmt = suffix.lower() if suffix.lower() in ("png", "jpg", "jpeg", "webp") else "png"
    fmt = "jpg" if fmt == "jpeg" else fmt
    out = safe_output_name(f"{stem}_x{factor:g}", fmt)
    return DiffusersJob(
        template=t.name, row=parent.row, params=dict(parent.params), named=dict(parent.named),
        version=parent.version, revision=parent.revision,
        nodes=[Step("upscale", "upscale", {"image": image, "scale": float(factor),
                                           "model": None}),
               Step("save", "save", {"image": {"@": "upscale.image"}, "name": out,
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


def _param(t: Template, key: str):
    found = t.param_for(key)
    if found is None:
        raise Problem("edit_unknown", key=key, names=", ".join(t.params))
    return found


def _rebind(t: Template, parent: BoundJob, values: dict[str, Any]) -> BoundJob:
    child = bind(t, values, row=parent.row, extras=parent.columns)
    return msgspec.structs.replace(child, named=dict(parent.named))
