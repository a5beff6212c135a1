"""What an engine is to the executor's loop: it turns bound jobs into stored files.

The loop (executor.loop) owns everything a job goes through on the queue — claiming
(ahead), leases and heartbeats, cancels, timeouts, progress, the outcome, recycling —
once, for every engine. An engine only runs jobs:

  generate(runs)  the engine's part that needs the device or the server: the diffusers
                  engine's GPU nodes, the ComfyUI engine's prompt on its server
  finish(run)     what comes after and can overlap the next generation: the pillow ops
                  and saving, or fetching and storing the server's images

While it runs, it tells the loop each step (`Control.step`), asks between steps
whether a run must stop (`Control.stop_reason`), and shows the image forming when a
preview is due (`Control.preview_due`, `Control.preview`); it never waits for the database. The
loop knows each run by its lease (`Run.key`: the job and its lease token), not by the
job: after an outage longer than a lease the same job may come back to the same
executor while its stale run is still finishing, and the two must not be confused. How a
job ended is left on its `Run`: outputs, or an error (retryable or not), or stopped
for a reason the loop gave, or given back (the engine's own trouble, such as a server
that went down: the job runs again and no attempt is used).

Adding an engine: a package under executor/ with a class that satisfies `Engine`, and
a way to choose it in executor.worker (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from storage.names import one_line
from storage.queue import Lease, LeaseKey

if TYPE_CHECKING:
    from PIL import Image


class Stop(StrEnum):
    """Why a running job must stop before its end."""
    CANCELED = "canceled"  # someone asked; the job ends canceled
    TIMEOUT = "timeout"  # past [executor] job_timeout; it fails
    SHUTDOWN = "shutdown"  # the executor is stopping; the job goes back to the queue
    LEASE_LOST = "lease lost"  # another executor may have it now; this one records nothing


@dataclass
class Run:
    """One job on its way through an engine, and how it ended."""
    lease: Lease
    outputs: list[str] = field(default_factory=list)  # stored paths, in template order
    error: str | None = None
    retryable: bool = False
    stopped: Stop | None = None
    give_back: str | None = None  # not the row's fault: run it again, no attempt used

    @property
    def id(self) -> int:
        return self.lease.job_id

    @property
    def key(self) -> LeaseKey:
        """This run of the job: its lease (job id and token)."""
        return self.lease.key

    @property
    def batch_id(self) -> int:
        return self.lease.batch_id

    @property
    def live(self) -> bool:
        return self.error is None and self.stopped is None and self.give_back is None

    def fail(self, error: str, *, retry: bool = False) -> None:
        """The job failed: `error` is stored on it and read in chat, so it is made one
        line whatever an engine or an exception put in it."""
        self.error, self.retryable = one_line(error), retry


@dataclass(frozen=True)
class Wanted:
    """What an engine can take now: the arguments of its next claim."""
    prefer: tuple[str, ...] = ()  # affinities to favour (models already loaded)
    only: list[str] | None = None  # None: any job of this engine's kind
    engine: bool = False  # takes exactly `only`: another engine's ("comfyui:…") jobs


class Control(Protocol):
    """The loop's side, as an engine sees it. Every method may be called from any thread
    and returns at once."""

    def step(self, runs: list[Run], node: str, step: int, total: int) -> None:
        """A step of these runs is done (progress for people)."""

    def stop_reason(self, run: Run) -> Stop | None:
        """Why this run must stop now, or None."""

    def preview_due(self, run: Run) -> bool:
        """Whether a picture of this run forming is wanted now ([executor]
        preview_interval; never once it is stopping). True reserves the turn: make the
        picture and hand it to `preview`."""

    def preview(self, run: Run, picture: Image.Image, step: int, total: int) -> None:
        """A picture of this run forming, at this step: made small on the calling thread,
        then sent to the service (never stored)."""

    def doing(self, what: dict[str, Any] | None) -> None:
        """What keeps the executor from its jobs now (building, loading, a server down),
        or None; the worker registry says it."""


class Engine(Protocol):
    kind: str  # "diffusers", "comfyui": the registry's engine
    max_batch: int  # jobs one generate call may take (a micro-batch)
    claims_ahead: bool  # worth holding the next group while one generates

    async def start(self, control: Control) -> None:
        """Before the first claim (demo models built; a server's templates read)."""

    async def ready(self) -> bool:
        """Whether it can run a job now; False: the loop waits `backoff()` and asks again."""

    def backoff(self) -> float: ...

    def wanted(self) -> Wanted | None:
        """What to claim; None: nothing it can run now."""

    def interrupted(self) -> asyncio.Future[Any] | None:
        """Something an idle loop should also wake for (a server's socket closing)."""

    def prepare(self, lease: Lease) -> Run:
        """The job decoded (once) into the engine's run of it."""

    async def generate(self, runs: list[Run]) -> None: ...

    async def finish(self, run: Run) -> None: ...

    async def after(self, runs: list[Run], taken: int) -> bool:
        """Between groups (memory hygiene); True: recycle the process."""

    def presence(self) -> dict[str, Any]:
        """Its part of the registry row: device, memory, models, allow, stats."""

    async def close(self, *, recycling: bool) -> None: ...
