"""Jobs under a lease that look stuck: what `genbot queue doctor`, /doctor, the API and
the stuck-job gauges of /metrics read, and the hand-back an operator asks for.

A lease is normally short-lived and busy: a job claimed ahead starts within one job's
run, and a running job reports a step every few seconds (storage: `progressed_at`). A
lease that shows no sign of life for [queue] stuck_after seconds, or whose holder the
worker registry no longer sees alive, is stuck: the batch, its chat thread and whoever
waits on it hang with no error anywhere. Handing it back puts the job in the queue
again (no attempt used) and fences its holder, which stops it at its next heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.queue import Queue
from storage.records import LeasedJob
from storage.workers import Workers

GONE = ("stopped", "lost")  # registry states of an executor that will renew nothing


@dataclass(frozen=True)
class Lease:
    """A leased job, who holds it, and whether (and why) it is stuck."""
    job: LeasedJob
    holder_state: str  # the holder's state in the worker registry; "unknown" if absent
    why: str | None  # stuck: "quiet" (no sign of life), or "holder_gone"; None: fine

    @property
    def stuck(self) -> bool:
        return self.why is not None


async def leases(queue: Queue, stuck_after: float) -> list[Lease]:
    """Every leased job, the longest without a sign of life first."""
    states = {w.id: w.state for w in await Workers.of(queue).all()}
    found = []
    for job in await queue.leased_idle():
        state = states.get(job.lease_owner or "", "unknown")
        why = "holder_gone" if state in GONE else \
            "quiet" if job.idle_seconds >= stuck_after else None
        found.append(Lease(job, state, why))
    return found
