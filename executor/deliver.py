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
import logging
from collections.abc import Sequence

from PIL import Image

from storage.config import Config
from storage.db import Database
from storage.files import FileStore, batch_folder, open_store
from storage.queue import Lease
from storage.renditions import Rendition, Renditions
from templates import deliver_checks
from templates.channels import Deliverable
from templates.jobs import BoundJob, decode
from templates.renditions import Provenance, make
from templates.settings import DeliverConfig, TemplatesConfig

log = logging.getLogger("genbot.executor")

FOLDER = "deliver"


def stored_name(batch_id: int, channel: str, file: str) -> str:
    return f"{batch_folder(batch_id)}/{FOLDER}/{channel}/{file}"


def produce_id(batch_id: int, job_id: int, d: Deliverable) -> str:
    """The implicit label's ProduceID: unique per file, and enough to find it again."""
    return f"genbot-b{batch_id}-j{job_id}-{d.channel}-{d.rendition.name}"


def pack(store: FileStore, job: BoundJob, job_id: int, batch_id: int, image: str, *,
         producer: str, font: str = "") -> list[Rendition]:
    """Every rendition of one job, made, checked and stored (in the calling thread)."""
    with Image.open(store.path(image)) as opened:
        source = opened.convert("RGB")
    out = []
    for d in job.deliver:
        about = {"template": job.template, "version": job.revision, "row": job.row,
                 "batch": batch_id, "job": job_id, "channel": d.channel,
                 "rendition": d.rendition.name, "source": image}
        made = make(source, d, Provenance(producer, produce_id(batch_id, job_id, d), about),
                    font=font)
        findings = [f.plain() for f in deliver_checks.check(d, made)]
        path = store.write(stored_name(batch_id, d.channel, d.file), made.data)
        labels = {"explicit": d.label.text if d.label else None,
                  "implicit": {"Label": "1", "ContentProducer": producer,
                               "ProduceID": produce_id(batch_id, job_id, d)}}
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
        self._store: FileStore | None = None

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
        made = await asyncio.to_thread(pack, self.store, job, lease.job_id, lease.batch_id,
                                       images[0], producer=self.producer, font=self.font)
        await self.renditions.record(lease.job_id, made)
        log.info("renditions made", extra={
            "job": lease.job_id, "batch": lease.batch_id, "renditions": len(made),
            "needs_review": sum(1 for r in made if not r.passed)})
        return made
