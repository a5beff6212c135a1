"""Iterating on a batch's images: again, vary, upscale, edit, repaint, extend (their
review is bot.app.review).

Written once, for chat, the REST API, the dashboard and the command line (App.act,
App.find_image call here). An action is a new batch in the parent batch's
place — the same conversation and thread — whose jobs record the image they came from
(`parent_job_id`) and how (`action`); the notifier posts their images into that thread
without a new acceptance, progress or summary (bot.chat.notifier).

    act: the person may -> the image is theirs (or they are an admin) -> it is finished
         and its file is there -> the template makes the child jobs -> limits, placement
         -> one batch, audited

Clicks come twice: a double click, a platform resending an interaction, two tabs.
Within DEDUPE_SECONDS the same person asking the same thing of the same image gets the
batch the first ask made (`created` False). Two people pressing at once get one batch
each: each asked, and each is answered with their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from bot.app import values
from bot.app.permissions import Action, Permissions, Who
from bot.app.placement import NoExecutor, Unplaced
from bot.app.results import job_label, swept_axes
from bot.conventions import thread_of
from bot.errors import Conflict, Invalid, NotFound
from storage.files import FileStore
from storage.queue import Enqueued, NewJob, Queue, Submission
from storage.records import TERMINAL, Batch, Job, Status
from templates import actions
from templates.actions import ACTIONS, ActionSpec, Ask
from templates.families import row_refusal
from templates.graph import Template
from templates.jobs import BoundJob, decode, encode
from templates.params import Problem, parse_aspect
from templates.signatures import MAX_MARGIN
from templates.size_rules import same_shape, sized
from templates.sizes import largest_image

DEDUPE_SECONDS = 10.0
MAX_COUNT = 16  # images one action makes
MAX_REGION = 200  # characters of a region named in words (a segmentation model reads 77 tokens)
MAX_CHOICES = 12  # of a row's several images, listed to pick one from


class App(Protocol):
    """What of bot.app.application.App this module uses (it calls here, not the reverse)."""
    queue: Queue
    store: FileStore
    templates: dict[str, Template]
    permissions: Permissions
    clock: Callable[[], float]

    @property
    def max_output_pixels(self) -> int: ...

    def family_of(self, model: str) -> str | None: ...

    def prompt_tokens(self, model: str) -> Callable[[str], int] | None: ...

    def edit_model(self) -> str | None: ...

    def fill_model(self, own: str | None = None) -> str | None: ...

    def segmentation_model(self) -> str | None: ...

    def has_model(self, model: str) -> bool: ...

    @property
    def max_cell_chars(self) -> int: ...

    async def job(self, job_id: int) -> Job: ...
    async def batch(self, batch_id: int) -> Batch: ...
    async def unplaced(self, needs: Iterable[str | None]) -> list[Unplaced]: ...
    async def _enqueue(self, submission: Submission) -> Enqueued: ...
    async def started_thread(self, platform: str, conversation: str,
                             thread: str) -> int | None: ...
    async def template_version(self, name: str, number: int) -> Template: ...


@dataclass(frozen=True)
class ActionRequest:
    action: str  # a name in templates.actions.ACTIONS
    count: int = 1  # how many new images, where the action takes a count
    values: dict[str, Any] = field(default_factory=dict)  # edit: the changes
    factor: float = 2.0  # upscale
    strength: float | None = None  # vary: None is the template's own, else 0.35
    instruction: str = ""  # edit: a sentence the image is changed by, on an edit model
    model: str | None = None  # that model; None: [templates] edit_model or the first
    mask: bytes | None = None  # repaint: a picture, white where to repaint …
    region: str = ""  # … or where, in words ("the bottle", "瓶子"): a segmentation model finds it
    left: int = 0  # extend: px added on each side …
    right: int = 0
    top: int = 0
    bottom: int = 0
    aspect: str | None = None  # … or the shape the canvas grows to ("9:16")
    key: str | None = None  # the caller's idempotency key (the API's Idempotency-Key)
    lang: str | None = None  # of what the new batch posts; None: the parent batch's
    wait_for_executor: bool = False

    @property
    def ask(self) -> Ask:
        return Ask(count=self.count, values=self.values, factor=self.factor,
                   strength=self.strength, instruction=self.instruction.strip(),
                   model=self.model, left=self.left, right=self.right, top=self.top,
                   bottom=self.bottom, aspect=self.aspect,
                   region=self.region.strip())  # (the mask: once it is stored)

    @property
    def margins(self) -> tuple[int, int, int, int]:
        return self.left, self.right, self.top, self.bottom


@dataclass(frozen=True)
class Acted:
    batch_id: int
    jobs: list[Job]
    created: bool  # False: asked already (a double click): this is what the first ask made
    parent: Job
    action: str


@dataclass(frozen=True)
class ActedOnKept:
    """What an action on a batch's kept images queued."""
    batch_id: int
    jobs: list[Job]
    created: bool
    of_batch: int  # the batch whose kept images it was made from
    kept: int  # how many images it was made from
    action: str


def _invalid(e: Problem) -> Invalid:
    return values.problem(e, "edit_value", own=("edit_unknown", "edit_image"))


def _spec(request: ActionRequest) -> ActionSpec:
    """The action asked for (an unknown one is refused before anything else)."""
    spec = ACTIONS.get(request.action)
    if spec is None:
        raise Invalid("action_unknown", action=str(request.action)[:40],
                      actions=", ".join(ACTIONS))
    return spec


def _asked_well(spec: ActionSpec, request: ActionRequest) -> None:
    """What was asked checked against what the action takes (after who may ask)."""
    if "count" not in spec.takes and request.count != 1:
        raise Invalid("action_count_one", action=spec.name)
    if not 1 <= request.count <= MAX_COUNT:
        raise Invalid("action_count", count=request.count, max=MAX_COUNT)
    if request.strength is not None and not 0 < request.strength <= 1:
        raise Invalid("vary_strength", value=request.strength)
    if request.mask is not None and "mask" not in spec.takes:
        raise Invalid("action_takes_no_mask", action=spec.name)
    if request.region.strip() and "region" not in spec.takes:
        raise Invalid("action_takes_no_region", action=spec.name)
    if len(request.region) > MAX_REGION:
        raise Invalid("region_too_long", chars=len(request.region), max=MAX_REGION)
    if (any(request.margins) or request.aspect) and "margins" not in spec.takes:
        raise Invalid("action_takes_no_margins", action=spec.name)
    if not all(0 <= m <= MAX_MARGIN for m in request.margins):
        raise Invalid("extend_margin", value=max(request.margins, key=abs), max=MAX_MARGIN)
    if request.aspect is not None:
        try:
            parse_aspect(request.aspect)
        except ValueError:
            raise Invalid("extend_aspect", value=str(request.aspect)[:40]) from None


async def _children(app: App, parent: Job, batch: Batch, spec: ActionSpec, ask: Ask,
                    count: int) -> list[BoundJob]:
    """What the action makes of one finished image: `count` bound jobs, each checked as a
    sheet's row would be (size limits, what its model can run)."""
    image = await _image_of(app, parent) if spec.needs_image(ask) else None
    if parent.status not in TERMINAL:
        raise Conflict("action_not_finished", job=parent.id, status=parent.status.value)
    if batch.template not in app.templates:
        raise Conflict("action_template_gone", template=batch.template)
    bound = decode(parent.workflow)
    template = await app.template_version(batch.template, bound.revision)  # the parent's
    if spec.fills:
        ask = _fill_model(app, bound, ask)
    try:
        children = actions.siblings([spec.child(template, bound, ask, image)
                                     for _ in range(count)])
    except Problem as e:
        raise _invalid(e) from None
    await _within_limit(app, children, image, spec, ask)
    _runnable(app, children, spec)
    return children


def _meta(request: ActionRequest, ask: Ask, who: Who, batch: Batch) -> dict[str, Any]:
    """A new batch's record of the ask that made it, in its parent batch's line."""
    meta: dict[str, Any] = {
        "lang": request.lang or batch.meta.get("lang", "en"), "action": request.action,
        "parent_batch": batch.id, "root_batch": batch.meta.get("root_batch", batch.id),
        "by": who.id}
    if ask.instruction:
        meta["instruction"] = ask.instruction
    if ask.mask:
        meta["mask"] = ask.mask
    if ask.region:
        meta["region"] = ask.region
    if any(ask.margins) or ask.aspect:
        meta["canvas"] = ask.aspect or dict(zip(actions.SIDES, ask.margins, strict=True))
    if "sheet" in batch.meta:
        meta["sheet"] = batch.meta["sheet"]
    return meta


async def act(app: App, who: Who, job_id: int, request: ActionRequest) -> Acted:
    spec = _spec(request)
    role = await app.permissions.require(who, spec.name)
    parent = await app.job(job_id)
    batch = await _batch_of(app, parent)
    await app.permissions.own(who, role, spec.name, owner=parent.submitter,
                              subject=parent.batch_id)
    _asked_well(spec, request)
    ask = _with_model(app, spec, request.ask)
    if spec.needs_image(ask):
        image = await _image_of(app, parent)  # (its image gone is said before a double click's)
        if request.mask is not None:
            ask = replace(ask, mask=await _stored_mask(app, request.mask, image))
    earlier = await _earlier(app, who, parent, request)
    if earlier is not None:
        return earlier
    children = await _children(app, parent, batch, spec, ask, request.count)
    if not request.wait_for_executor and \
            (missing := await app.unplaced(c.affinity for c in children)):
        raise NoExecutor(missing)
    await app.permissions.limits(who, role, request.count)
    key = request.key or _window_key(app, who, parent, request, 0)
    done = await app._enqueue(Submission(
        batch.template, who.id,
        [NewJob(parent.row, encode(c), c.affinity, parent=parent.id, action=spec.name)
         for c in children],
        platform=batch.platform, conversation=batch.conversation, thread=thread_of(batch),
        priority=await app.permissions.capped(who, role, batch.priority),
        idempotency_key=key, meta={**_meta(request, ask, who, batch), "parent_job": parent.id}))
    if done.created:
        await app.permissions.allowed(who, spec.name, job=parent.id, batch=done.batch_id,
                                      count=request.count)
    return Acted(done.batch_id, await app.queue.batch_jobs(done.batch_id), done.created,
                 parent, spec.name)


async def act_on_kept(app: App, who: Who, batch_id: int, request: ActionRequest) -> ActedOnKept:
    """The action on every kept image of a batch and of all made from its images (/edit
    b12 "把日常价换成节日价"): one new batch in its thread, each job linked to the image it
    was made from. All or nothing: an image the action cannot use refuses the whole ask."""
    spec = _spec(request)
    role = await app.permissions.require(who, spec.name)
    if request.count != 1:
        raise Invalid("action_count_one", action=spec.name)
    _asked_well(spec, request)
    if request.mask is not None:  # a region is one picture's
        raise Invalid("mask_one_image")
    root, kept = await picks(app, who, batch_id)
    if not kept:
        raise Conflict("picks_none", batch=root.id)
    ask = _with_model(app, spec, request.ask)
    asked = json.dumps([spec.name, [i.id for i in kept], request.values, ask.instruction,
                        ask.model, request.factor, request.strength, request.margins,
                        request.aspect],
                       sort_keys=True, default=str)
    digest = hashlib.sha256(asked.encode()).hexdigest()[:16]
    window = int(app.clock() // DEDUPE_SECONDS)
    keys = [request.key] if request.key else \
        [f"kept:{root.id}:{who.id}:{digest}:{window - back}" for back in (0, 1)]
    for key in keys:  # the same ask a moment ago (a double click), or under the caller's key
        if (earlier := await app.queue.batch_by_key(key)) is not None and (
                request.key or app.clock() - (await app.batch(earlier)).created_at
                <= DEDUPE_SECONDS):
            return ActedOnKept(earlier, await app.queue.batch_jobs(earlier), False, root.id,
                               len(kept), spec.name)
    await app.permissions.limits(who, role, len(kept))  # (before the images: many may be)
    for image in kept:
        await app.permissions.own(who, role, spec.name, owner=image.submitter,
                                  subject=image.batch_id)
    made: list[tuple[Job, BoundJob]] = []
    for image in kept:
        made += [(image, c) for c in await _children(
            app, image, await _batch_of(app, image), spec, ask, 1)]
    if not request.wait_for_executor and \
            (missing := await app.unplaced(c.affinity for _, c in made)):
        raise NoExecutor(missing)
    done = await app._enqueue(Submission(
        root.template, who.id,
        [NewJob(image.row, encode(c), c.affinity, parent=image.id, action=spec.name)
         for image, c in made],
        platform=root.platform, conversation=root.conversation, thread=thread_of(root),
        priority=await app.permissions.capped(who, role, root.priority),
        idempotency_key=keys[0], meta={**_meta(request, ask, who, root), "kept_of": root.id}))
    if done.created:
        await app.permissions.allowed(who, spec.name, batch=done.batch_id, of_batch=root.id,
                                      count=len(made))
    return ActedOnKept(done.batch_id, await app.queue.batch_jobs(done.batch_id),
                       done.created, root.id, len(kept), spec.name)


def _with_model(app: App, spec: ActionSpec, ask: Ask) -> Ask:
    """An instruction's edit model: the one asked, else the configured one; none there is
    refused naming what to configure, and an instruction past a cell's length too. (A
    repaint's or an extend's model is the image's: `_fill_model`.)"""
    if not ask.instruction:
        return ask
    if len(ask.instruction) > app.max_cell_chars:
        raise Invalid("instruction_too_long", chars=len(ask.instruction),
                      max=app.max_cell_chars)
    if spec.fills:
        return ask
    model = ask.model or app.edit_model()
    if model is None:
        raise Invalid("edit_no_model")
    if not app.has_model(model):
        raise Invalid("edit_model_unknown", model=model)
    return replace(ask, model=model)


def _fill_model(app: App, parent: BoundJob, ask: Ask) -> Ask:
    """A repaint's or an extend's model: the one asked, else [templates] fill_model, else
    the model that made the image where it inpaints, else the first that does; and for a
    region in words, [templates] segmentation_model."""
    own = actions.made_by(parent).get("model")
    model = ask.model or app.fill_model(own if isinstance(own, str) else None)
    if model is None:
        raise Invalid("fill_no_model")
    if not app.has_model(model):
        raise Invalid("fill_model_unknown", model=model)
    segmenter = None
    if ask.region:  # a region in words: the segmentation model that finds it
        segmenter = app.segmentation_model()
        if segmenter is None:
            raise Invalid("region_no_model")
        if not app.has_model(segmenter):
            raise Invalid("region_model_unknown", model=segmenter)
    return replace(ask, model=model, segmenter=segmenter)


async def _stored_mask(app: App, data: bytes, image: str) -> str:
    """A repaint's mask, checked against the image and stored: white (bright) where to
    repaint, transparency counting as black; one of the image's proportions at another
    size is resized to it, one of other proportions refused, as are an empty and a full
    one (nothing to repaint; all of it: that is `again`)."""
    def check() -> bytes:
        from PIL import Image, UnidentifiedImageError
        try:
            with Image.open(io.BytesIO(data)) as sent:
                if sent.width * sent.height > app.max_output_pixels:
                    raise Invalid("mask_too_large", width=sent.width, height=sent.height,
                                  max=app.max_output_pixels / 1e6)
                on_black = Image.new("RGBA", sent.size, "black")
                on_black.alpha_composite(sent.convert("RGBA"))
                mask = on_black.convert("L").point(lambda v: 255 if v >= 128 else 0)
            with Image.open(app.store.path(image)) as picture:
                size = picture.size
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
            raise Invalid("mask_not_image") from None
        if not same_shape(mask.size, size):
            raise Invalid("mask_shape", width=mask.width, height=mask.height,
                          image_width=size[0], image_height=size[1])
        mask = mask.resize(size, Image.Resampling.NEAREST) if mask.size != size else mask
        low, high = mask.getextrema()
        if high == 0:
            raise Invalid("mask_empty")
        if low == 255:
            raise Invalid("mask_full")
        out = io.BytesIO()
        mask.save(out, format="PNG")
        return out.getvalue()
    png = await asyncio.to_thread(check)
    return await asyncio.to_thread(app.store.put_input, png)


def _runnable(app: App, children: list, spec: ActionSpec) -> None:
    """What a row's model cannot run (templates.families), an action's child may not ask
    either: a vary of an image whose model cannot start from a picture (FLUX.1 Kontext,
    FLUX.2, Qwen-Image-Edit), an edit naming a model that cannot run the node, an
    instruction longer than the edit model reads. Refused
    here, before anything is queued, rather than failing on the executor."""
    for child in children:
        for step in getattr(child, "nodes", []):  # a ComfyUI job's server checks its own
            model = step.inputs.get("model")
            family = app.family_of(model) if isinstance(model, str) else None
            if family is None or (refused := row_refusal(
                    step.op, step.inputs, family, app.prompt_tokens(model))) is None:
                continue
            _, code, details = refused
            raise Invalid(spec.cannot_run if code == "model_cannot_run" else code, **details)


async def _within_limit(app: App, children: list, image: str | None, spec: ActionSpec,
                        ask: Ask) -> None:
    """What a sheet may not ask for, an action may not either ([intake]
    max_output_pixels): an edit's size, an upscale of an upscaled image (the parent's
    image sized by the spec's rules)."""
    limit = app.max_output_pixels
    sizes = [largest_image(child) for child in children]
    if spec.sizing and image is not None:
        def measured() -> tuple[int, int]:
            from PIL import Image
            with Image.open(app.store.path(image)) as im:  # (reads the header only)
                return im.width, im.height
        source = await asyncio.to_thread(measured)
        sizes.append(sized(spec.sizing, vars(ask), source))
    for size in sizes:
        if size is not None and size[0] * size[1] > limit:
            raise Invalid("action_too_large", width=size[0], height=size[1],
                          megapixels=size[0] * size[1] / 1e6, max=limit / 1e6)


def _window_key(app: App, who: Who, parent: Job, request: ActionRequest, back: int) -> str:
    """The same ask within a window of DEDUPE_SECONDS (`back` windows ago) has this key."""
    mask = hashlib.sha256(request.mask).hexdigest() if request.mask is not None else None
    asked = json.dumps([request.action, request.count, request.values, request.factor,
                        request.strength, request.instruction.strip(), request.model, mask,
                        request.margins, request.aspect, request.region.strip()],
                       sort_keys=True, default=str)
    digest = hashlib.sha256(asked.encode()).hexdigest()[:16]
    window = int(app.clock() // DEDUPE_SECONDS) - back
    return f"action:{parent.id}:{who.id}:{digest}:{window}"


async def _earlier(app: App, who: Who, parent: Job, request: ActionRequest) -> Acted | None:
    """What the same ask made a moment ago (a double click), or under the caller's key."""
    keys = [request.key] if request.key else \
        [_window_key(app, who, parent, request, back) for back in (0, 1)]
    for key in keys:
        batch_id = await app.queue.batch_by_key(key)
        if batch_id is None:
            continue
        found = await app.batch(batch_id)
        if request.key or app.clock() - found.created_at <= DEDUPE_SECONDS:
            return Acted(batch_id, await app.queue.batch_jobs(batch_id), False, parent,
                         request.action)
    return None


async def _batch_of(app: App, job: Job) -> Batch:
    batch = await app.queue.batch(job.batch_id)
    if batch is None:
        raise NotFound("action_batch_gone", job=job.id, batch=job.batch_id)
    return batch


async def _image_of(app: App, job: Job) -> str:
    """The job's first image, in the file store: there to vary or upscale."""
    if job.status != Status.SUCCEEDED or not job.outputs:
        raise Conflict("action_no_image", job=job.id, status=job.status.value)
    path = job.outputs[0]
    exists = await asyncio.to_thread(lambda: app.store.path(path).is_file())
    if not exists:
        raise Conflict("action_outputs_gone", job=job.id, batch=job.batch_id)
    return path


class SeveralImages(Conflict):
    """A row number that names several images (a sweep's row, an A/B's): which one is
    for the person to say, by its job; `jobs` are the row's images."""

    def __init__(self, batch: Batch, row: int, jobs: list[Job],
                 templates: dict[str, Template]):
        self.jobs = jobs
        shown = [f"j{j.id}: {job_label(j, templates.get(j.template or ''), swept_axes(batch))}"
                 for j in jobs[:MAX_CHOICES]]
        if len(jobs) > MAX_CHOICES:
            shown.append("…")
        super().__init__("row_images", row=row, batch=batch.id, count=len(jobs),
                         example=f"j{jobs[0].id}",
                         choices="\n".join(f"  {line}" for line in shown))


async def find_image(app: App, *, platform: str, conversation: str | None,
                     thread: str | None, row: int | None = None, job: int | None = None,
                     batch: int | None = None) -> Job:
    """The image a person means in chat: job N, or row N "as captioned" — of `batch`, or
    of the batch whose thread this is (where the platform has none: the conversation's
    latest). A row means the images the sheet's row itself made, never what an action
    made from one of them (those go by their job, as captioned); a row with several (a
    sweep's, an A/B's) is SeveralImages, for the person to pick one."""
    if job is not None:
        return await app.job(job)
    assert row is not None
    root = batch if batch is not None else await _thread_batch(app, platform, conversation,
                                                               thread)
    if root is None:
        raise NotFound("action_no_batch")
    found = await app.batch(root)
    if "root_batch" in found.meta:  # an action's batch: the row is its sheet batch's
        found = await app.batch(found.meta["root_batch"])
    first = await app.queue.batch_jobs(found.id)
    own = [j for j in first if j.row == row]
    if not own:
        raise NotFound("action_no_row", row=row, batch=found.id,
                       rows=_ranges(sorted({j.row for j in first})) or "-")
    images = [j for j in own if j.status == Status.SUCCEEDED]
    if len(images) > 1:
        raise SeveralImages(found, row, images, app.templates)
    return max(images or own, key=lambda j: j.id)


async def _thread_batch(app: App, platform: str, conversation: str | None,
                        thread: str | None) -> int | None:
    if conversation is None:
        return None
    if thread:
        inside = await app.queue.batches_in_thread(platform, conversation, thread)
        if inside:
            return inside[0]
        started = await app.started_thread(platform, conversation, thread)
        if started is not None:
            return started
    return await app.queue.latest_batch_in(platform, conversation)


def _ranges(rows: list[int]) -> str:
    """2, 3, 4, 7 -> "2–4, 7"."""
    out: list[str] = []
    for r in rows:
        if out and out[-1].split("–")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('–')[0]}–{r}"
        else:
            out.append(str(r))
    return ", ".join(out)


async def picks(app: App, who: Who, batch_id: int) -> tuple[Batch, list[Job]]:
    """The kept images of a batch and of everything made from its images (again, vary …),
    with the batch they began in."""
    await app.permissions.require(who, Action.PICKS)
    batch = await app.batch(batch_id)
    root = await app.batch(batch.meta.get("root_batch", batch.id))
    first = await app.queue.batch_jobs(root.id)
    family = first + await app.queue.descendants(root.id)
    return root, [j for j in family if j.kept and j.outputs]


async def find_batch(app: App, *, platform: str, conversation: str | None,
                     thread: str | None) -> int:
    """The batch of the thread a person writes in (where the platform has none: the
    conversation's latest)."""
    found = await _thread_batch(app, platform, conversation, thread)
    if found is None:
        raise NotFound("action_no_batch")
    return found
