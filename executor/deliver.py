"""After a job's images are stored: the files its batch's sales channels take.

A bound job carries its renditions (templates.channels.Deliverable: the channel's
rendition, its file name for the row, the visible label to draw). Each is made from the
job's first image (templates.renditions), checked against its channel's rules
(templates.deliver_checks), stored under the batch's folder as
`deliver/<channel>/<file name>`, and recorded (storage.renditions) before the job's end
is — the same for every engine. A rendition that breaks a rule is kept and marked with
what it breaks: a person decides (the thread, the dashboard and the results sheet say
why), nothing is lost.

The pack runs in a thread beside the next generation (the loop's finish): it is pillow
and numpy work on the CPU, never the GPU's time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from pathlib import PurePosixPath

from PIL import Image

from executor.inspection import Inspector
from storage.config import Config
from storage.db import Database
from storage.files import FileStore, batch_folder, open_store
from storage.queue import Lease
from storage.renditions import Rendition, Renditions
from templates import deliver_checks, provenance
from templates.channels import Deliverable
from templates.jobs import BoundJob, decode
from templates.provenance import MIME, ProvenanceError, Signer, credentials
from templates.renditions import Provenance, Source, make, prepare
from templates.settings import DeliverConfig, TemplatesConfig

log = logging.getLogger("genbot.executor")

FOLDER = "deliver"


def stored_name(batch_id: int, channel: str, file: str) -> str:
    return f"{batch_folder(batch_id)}/{FOLDER}/{channel}/{file}"


def produce_id(batch_id: int, job_id: int, d: Deliverable) -> str:
    """The implicit label's ProduceID: unique per file, and enough to find it again."""
    return f"genbot-b{batch_id}-j{job_id}-{d.channel}-{d.rendition.name}"


def placed(store: FileStore, job: BoundJob) -> list[tuple[str, bytes]]:
    """The pictures the row named (a product photo …): each as the sheet named it, and its
    bytes — a rendition's C2PA ingredients."""
    out = []
    for param, name in job.named.items():
        stored = job.params.get(param)
        if isinstance(stored, str):
            try:
                out.append((name, store.path(stored).read_bytes()))
            except (OSError, ValueError):
                continue  # (retention may have taken it: the manifest names what it has)
    return out


def grown(store: FileStore, outputs: Sequence[str], name: str,
          pictures: dict[str, tuple[str, Source]]) -> bool:
    """Whether the job stored the picture an extend grew (`name`, in its batch's folder),
    read into `pictures` once; without it the file is made from the job's first picture,
    cropped to its aspect, as a crop would be."""
    if name in pictures:
        return True
    path = next((o for o in outputs if o == name or o.endswith("/" + name)), None)
    if path is None:
        return False
    found = first_picture(store, [path])
    if found is not None:
        pictures[name] = found
    return found is not None


def grown_by(job: BoundJob, picture: str) -> str:
    """The fill model that grew `picture` (its step's), for its manifest."""
    for step in getattr(job, "nodes", []):
        if step.op == "save" and str(picture).endswith(str(step.inputs.get("name"))):
            ref = step.inputs.get("image")
            fill = ref.get("@", "").split(".")[0] if isinstance(ref, dict) else ""
            made = next((s for s in job.nodes if s.id == fill), None)  # type: ignore[union-attr]
            return str(made.inputs.get("model", "")) if made else ""
    return ""


def sign_picture(store: FileStore, job: BoundJob, image: str, job_id: int, batch_id: int,
                 signer: Signer, ingredients: list[tuple[str, bytes]], *,
                 parent: tuple[str, bytes] | None = None, model: str = "") -> tuple[str, bytes]:
    """The generated picture signed in place (made by its model from the row's product
    photo; or, for an edit, a variation, an upscale, from the picture it changed — or
    `parent`, for a picture an extend grew from the job's own — whose manifest it then
    carries): the name and bytes its files name as their source. Signed once: a job run
    again, or packed again, finds its picture signed already."""
    path = store.path(image)
    data = path.read_bytes()
    fmt = {"jpeg": "jpg"}.get(path.suffix[1:].lower(), path.suffix[1:].lower())
    if fmt not in MIME or provenance.read(data, fmt).state:
        return image, data  # (a format c2pa does not sign here, or signed already)
    if parent is None and job.made_from:
        try:
            parent = (job.made_from, store.path(job.made_from).read_bytes())
        except (OSError, ValueError):
            parent = None  # (retention took it: the manifest says what it has)
    signed = signer.sign(data, fmt, PurePosixPath(image).name,
                         {"template": job.template, "version": job.revision, "row": job.row,
                          "batch": batch_id, "job": job_id},
                         ingredients, model=model or model_of(job), parent=parent)
    store.write(image, signed)
    return image, signed


def model_of(job: BoundJob) -> str:
    return (getattr(job, "affinity", None) or "").removeprefix("comfyui:")


def first_picture(store: FileStore, outputs: Sequence[str]) -> tuple[str, Source] | None:
    """The job's first output that is a picture (a ComfyUI workflow may make a video too),
    read once for all its renditions; None: it made none."""
    for output in outputs:
        try:
            with Image.open(store.path(output)) as opened:
                return output, prepare(opened)
        except (OSError, ValueError, Image.DecompressionBombError):
            continue
    return None


def pack(store: FileStore, job: BoundJob, job_id: int, batch_id: int,
         outputs: Sequence[str], *, producer: str, font: str = "",
         signer: Signer | None = None, unsigned: str = "",
         inspector: Inspector | None = None) -> list[Rendition]:
    """Every rendition of one job, made from its first picture, signed, checked and stored
    (in the calling thread); [] where it made no picture. `unsigned`: why no signer could
    be made (the team's certificate cannot sign): each file is made and marked for review
    with that reason. `inspector`: what the picture itself is checked for (unsafe
    content, words misspelt or not allowed), its findings on each file made from it."""
    found = first_picture(store, outputs)
    if found is None:
        return []
    image, source = found
    ingredients = placed(store, job) if signer else []
    seen = inspector.inspect(source.image, job, store, batch_id) if inspector \
        else [[] for _ in job.deliver]
    pictures = {"": (image, source)}  # an extend's grown picture, by name, read once
    origins: dict[str, tuple[str, bytes]] = {}  # each picture signed: what files name
    unsigned_all = unsigned
    if signer is not None:  # the picture first: each file's manifest names it as its source
        try:
            origins[""] = sign_picture(store, job, image, job_id, batch_id, signer,
                                       ingredients)
        except Exception as e:  # noqa: BLE001 - c2pa's refusal: the files, marked
            unsigned_all = f"{type(e).__name__}: {e}"[:200]
    out = []
    for d, picture_findings in zip(job.deliver, seen):
        why_unsigned = unsigned_all
        key = d.picture if d.picture and grown(store, outputs, d.picture, pictures) else ""
        name, source = pictures[key]
        if key and signer is not None and "" in origins and key not in origins:
            try:  # grown from the picture: opened from it, edited on the fill model
                origins[key] = sign_picture(store, job, name, job_id, batch_id, signer, [],
                                            parent=origins[""], model=grown_by(job, name))
            except Exception as e:  # noqa: BLE001 - c2pa's refusal: the file, marked
                why_unsigned = f"{type(e).__name__}: {e}"[:200]
        origin = origins.get(key)
        about = {"template": job.template, "version": job.revision, "row": job.row,
                 "batch": batch_id, "job": job_id, "channel": d.channel,
                 "rendition": d.rendition.name, "source": name,
                 **({"layout": d.overlay.layout, "locale": d.overlay.locale}
                    if d.overlay else {})}
        made = make(source, d, Provenance(producer, produce_id(batch_id, job_id, d), about),
                    font=font, asset=store.path)
        if signer is not None and origin is not None:  # last: it covers every byte before
            try:
                data = signer.sign_rendition(made.data, d.rendition.format, d.file, about,
                                             origin, drawn=bool(d.label or d.overlay))
            except Exception as e:  # noqa: BLE001 - c2pa's refusal: the file, marked
                why_unsigned = f"{type(e).__name__}: {e}"[:200]
            else:
                made = dataclasses.replace(made, data=data, signed=True,
                                           sha256=hashlib.sha256(data).hexdigest())
        findings = [f.plain() for f in [*picture_findings, *deliver_checks.check(d, made)]]
        if why_unsigned:
            findings.append({"check": "c2pa", "codes": why_unsigned})
        path = store.write(stored_name(batch_id, d.channel, d.file), made.data)
        labels = {"explicit": d.label.text if d.label else None,
                  "implicit": {"Label": "1", "ContentProducer": producer,
                               "ProduceID": produce_id(batch_id, job_id, d)},
                  "c2pa": ({"signer": "team" if not signer.creds.local else "local",
                            "source": name, "made_from": job.made_from or None,
                            "ingredients": [n for n, _ in ingredients]}
                           if signer and made.signed else None)}
        out.append(Rendition(job_id, batch_id, d.channel, d.rendition.name, d.file, path,
                             made.size[0], made.size[1], len(made.data), made.sha256,
                             findings, labels))
    return out


class Packer:
    """The loop's side: a job's renditions made off the loop and recorded, after its
    engine stored its images. The store is opened at the first job that names a channel."""

    def __init__(self, config: Config, db: Database):
        self.config, self.renditions = config, Renditions(db)
        self.producer = config[DeliverConfig].producer
        self.font = config[TemplatesConfig].font
        self.inspector = Inspector(frozenset(config[DeliverConfig].checks))
        self._store: FileStore | None = None
        self._signer: Signer | None = None

    @property
    def signer(self) -> Signer:
        """The C2PA signer: the team's certificate, or this data folder's own (made at the
        first job that names a channel)."""
        if self._signer is None:
            settings = self.config[DeliverConfig]
            self._signer = Signer(credentials(settings.c2pa_cert, settings.c2pa_key,
                                              self.config.data_dir))
            if self._signer.creds.local:
                log.info("C2PA: signing with genbot's own certificate for this data folder; "
                         "set [deliver] c2pa_cert and c2pa_key for the team's")
        return self._signer

    @property
    def store(self) -> FileStore:
        if self._store is None:
            self._store = open_store(self.config)
        return self._store

    async def run(self, lease: Lease, outputs: Sequence[object]) -> list[Rendition]:
        """[] when the job names no channel (or made no image to make them from)."""
        wanted = lease.workflow.get("deliver") if isinstance(lease.workflow, dict) else None
        images = [o for o in outputs if isinstance(o, str)]
        if not wanted or not images:
            return []
        job = decode(lease.workflow)
        signer, unsigned = None, ""
        try:
            signer = await asyncio.to_thread(lambda: self.signer)  # (may write its certificate)
        except ProvenanceError as e:  # the team's certificate: said on every file it left
            unsigned = str(e)
            log.error("C2PA: %s; files are made unsigned and marked for review", e)
        made = await asyncio.to_thread(pack, self.store, job, lease.job_id, lease.batch_id,
                                       images, producer=self.producer, font=self.font,
                                       signer=signer, unsigned=unsigned,
                                       inspector=self.inspector)
        await self.renditions.record(lease.job_id, made)
        log.info("renditions made", extra={
            "job": lease.job_id, "batch": lease.batch_id, "renditions": len(made),
            "needs_review": sum(1 for r in made if not r.passed)})
        return made
