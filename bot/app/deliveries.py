"""Which of a batch's renditions ship: the files a channel's uploader gets.

A rendition ships when its job succeeded and every rule of its channel holds
(templates.deliver_checks found nothing) — and, once anyone reviews the batch (an image
approved, rejected or sent back, or the batch signed off), only where its image was
approved: review is then how a team says what goes live. A batch nobody reviews ships
every passing file. What does not ship says why (`held`), so a person can act on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage.records import Batch, Job, Status
from storage.renditions import Rendition
from storage.reviews import Review


@dataclass(frozen=True)
class Delivery:
    ships: list[Rendition]
    held: list[tuple[Rendition, str]]  # and why: "needs_review", "not_approved", "job_<status>"
    reviewed: bool  # the batch is under review: only approved images ship


def delivery(batch: Batch, jobs: Sequence[Job], renditions: Sequence[Rendition],
             channel: str | None = None) -> Delivery:
    by_id = {j.id: j for j in jobs}
    reviewed = batch.signed_off_at is not None or any(
        j.review != Review.UNREVIEWED for j in jobs if j.status == Status.SUCCEEDED)
    ships, held = [], []
    for r in renditions:
        if channel is not None and r.channel != channel:
            continue
        job = by_id.get(r.job_id)
        if job is None or job.status != Status.SUCCEEDED:
            held.append((r, f"job_{job.status if job else 'gone'}"))
        elif not r.passed:
            held.append((r, "needs_review"))
        elif reviewed and job.review != Review.APPROVED:
            held.append((r, "not_approved"))
        else:
            ships.append(r)
    return Delivery(ships, held, reviewed)


def zip_entries(ships: Sequence[Rendition]) -> list[tuple[str, str]]:
    """(stored path, name in the zip): each file in its channel's folder, named for the
    channel's uploader."""
    return [(r.path, f"{r.channel}/{r.name}") for r in ships]
