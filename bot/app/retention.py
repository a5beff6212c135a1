"""Retention: forgetting what finished long ago, in small steps beside a live queue.

`genbot prune --finished-before 30d` and the daily run of [queue] retention_days both
come here. Batches wholly finished before the cutoff go with their jobs, events and
output files; so do events of no batch (pause, resume, lost workers) and chat messages
sent or given up on. Every step is its own short transaction (one batch; a few
thousand rows), so claims, heartbeats and enqueues never wait behind a prune. With an
archive, each batch is appended to it as one JSON line — batch, jobs and events — and
flushed to disk before the batch is deleted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from storage.files import FileStore, batch_folder, grids_folder, picks_folder
from storage.outbox import Outbox
from storage.queue import Queue

CHUNK = 100  # batches looked up at a time
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float:
    """"30d", "12h", "90m", "2w", "45s" (or plain seconds) as seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not found:
        raise ValueError(f"{text!r} is not a duration: a number and a unit, like 30d, 12h, "
                         "90m or 2w")
    return float(found[1]) * UNITS[found[2] or "s"]


@dataclass
class Pruned:
    batches: list[int] = field(default_factory=list)
    events: int = 0  # events of no batch (a batch's own go with it)
    messages: int = 0  # chat messages sent or given up on


async def prune(queue: Queue, outbox: Outbox | None, store: FileStore, before: float, *,
                archive: Path | None = None, dry_run: bool = False) -> Pruned:
    """Forget what finished before `before` (Unix time). `dry_run`: only say which batches."""
    done = Pruned()
    if dry_run:
        done.batches = await queue.finished_before(before, limit=10**9)
        return done
    out: IO[str] | None = None
    try:
        if archive is not None:
            archive.parent.mkdir(parents=True, exist_ok=True)
            out = archive.open("a", encoding="utf-8")
        while ids := await queue.finished_before(before, CHUNK):
            if out is not None:
                for batch_id in ids:
                    record = await queue.batch_record(batch_id)
                    out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
                out.flush()
                os.fsync(out.fileno())
            forgotten = await queue.forget_finished(before, CHUNK, ids=ids)
            for batch_id in forgotten:
                for folder in (batch_folder, picks_folder, grids_folder):
                    store.delete_folder(folder(batch_id))
            done.batches += forgotten
            if len(forgotten) < len(ids):  # one came back to life (a retry): next round
                break
    finally:
        if out is not None:
            out.close()
    done.events = await queue.forget_loose_events(before)
    if outbox is not None:
        done.messages = await outbox.forget_done(before)
    return done
