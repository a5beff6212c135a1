"""Claiming ahead: the next group of jobs, held while the current one runs.

An executor keeps its GPU busy by holding the next group — a claim and its followers,
one micro-batch — while the current one generates, and starting it the moment the GPU
is free (docs/queue.md, "Claiming ahead"). This part owns that, apart from the loop:

  ahead      the group claimed ahead: leased to this executor, still queued, not started
  claiming   the claim ahead on its way (a task), at most one
  wanted     whether the next completion should carry the next claim (one round trip)
  gate       held by every claim on its way, and by the heartbeat's hand-back

and handing back: the group ahead when the executor drains or stops, and — at the
heartbeat (Queue.heartbeat_all with the owner) — whatever the executor holds a lease on
without knowing, such as a claim whose answer the database lost. That hand-back must
never overlap a claim on its way, whose fresh lease would look unknown: hence the gate.

What it holds is part of the loop's one invariant (Loop.problems): every lease the
executor renews is a run on its device or finishing, or in `ahead` — never both, no job
twice, nothing in `ahead` started. A group stays in `ahead` until the database has
answered its start: a start the database did not answer is tried again, not forgotten.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from executor.told import Told
from storage.queue import Claim, Lease, LeaseKey, Queue, Status

CLAIMING_AHEAD = "claiming the next job ahead"
FOLLOWERS = "claiming a micro-batch's other jobs"
HANDING_BACK = "handing back the jobs claimed ahead"


class Prefetch:
    def __init__(self, queue: Queue, *, max_batch: int, told: Told,
                 wanted: Callable[[bool], Claim | None], may_hold: Callable[[], bool],
                 taking: Callable[[], bool], landed: Callable[[list[Lease]], None]):
        """`wanted(ahead)`: the next claim's arguments, or None (the engine can run
        nothing now). `may_hold()`: whether the executor may hold a group ahead at all
        now (not draining, resting or about to recycle). `taking()`: whether it takes
        work at all (a group that lands after that goes straight back). `landed(leases)`:
        told of every group taken, before anything else runs."""
        self.queue, self.max_batch, self.told = queue, max_batch, told
        self.wanted_claim, self.may_hold, self.taking = wanted, may_hold, taking
        self.landed = landed
        self.ahead: list[Lease] = []
        self.claiming: asyncio.Task | None = None
        self.wanted = False
        self.gate = asyncio.Lock()  # a claim on its way, or the heartbeat's hand-back
        self.lock = asyncio.Lock()  # starting the group ahead, or handing it back

    def may_claim_ahead(self) -> bool:
        return self.may_hold() and not self.ahead and self.claiming is None

    # --- the group to run now -------------------------------------------------------
    async def take(self) -> list[Lease]:
        """The group to run now: the one claimed ahead, started (one statement), or else a
        fresh claim; [] when there is nothing (or nothing should be taken). Raises what
        the database raised: a group ahead stays held, to be started at the next try."""
        await self.settled()
        self.wanted = False
        async with self.lock:
            if self.ahead:
                started = await self.queue.start(self.ahead)
                self.ahead = []  # the rest were canceled, handed back or paused meanwhile
                if started:
                    return started
        if not self.taking():
            return []
        return await self.claim()

    async def claim(self, *, ahead: bool = False) -> list[Lease]:
        """A claim and its followers (a micro-batch of one batch and model)."""
        return await self.group(lambda: self.claim_one(ahead))

    async def claim_one(self, ahead: bool) -> Lease | None:
        want = self.wanted_claim(ahead)
        if want is None:
            return None
        return await self.queue.claim(want.owner, want.prefer, want.only, engine=want.engine,
                                      ahead=ahead)

    async def group(self, first: Callable[[], Awaitable[Lease | None]]) -> list[Lease]:
        """The first job of a group, then its followers, both behind the gate. The first is
        the executor's once taken: followers the database failed to give are left (the
        heartbeat hands back any it took without saying)."""
        async with self.gate:
            lease = await first()
            if lease is None or self.max_batch <= 1:
                return [lease] if lease is not None else []
            try:
                more = await self.queue.claim_followers(lease, self.max_batch - 1)
            except Exception as e:  # noqa: BLE001 - the group goes on with its first job
                self.told.failed(FOLLOWERS, e, job=lease.job_id)
                return [lease]
            self.told.worked(FOLLOWERS)
            return [lease, *more]

    # --- the next group, while this one runs -----------------------------------------
    def want_next(self, *, finishing: bool) -> None:
        """Hold the next group while this one runs: with the completion of a job being
        finished (one round trip for both), or, with none under way, now."""
        if not self.may_claim_ahead():
            return
        if finishing:
            self.wanted = True
            return
        self.wanted = False
        self.claiming = asyncio.create_task(self.hold(self.claim(ahead=True)))

    async def complete(self, lease: Lease, outputs: list[str]) -> Status | None:
        """Complete a job; when the next group is wanted, claim it ahead in the same round
        trip (its followers, for a micro-batch, come after). What the completion raises,
        this raises; the claim it carried is then simply not made."""
        want = self.wanted_claim(True) if self.wanted and self.may_claim_ahead() else None
        if want is None:
            return await self.queue.complete(lease, outputs)
        self.wanted = False
        done: asyncio.Future[Status | None] = asyncio.get_running_loop().create_future()

        async def first() -> Lease | None:
            try:
                status, taken = await self.queue.complete_and_claim(lease, outputs, want)
            except Exception as e:  # noqa: BLE001 - the completion's to raise, not the claim's
                done.set_exception(e)
                return None
            done.set_result(status)
            return taken
        self.claiming = asyncio.create_task(self.hold(self.group(first)))
        return await done

    async def hold(self, claim: Awaitable[list[Lease]]) -> None:
        """Keep what a claim ahead took as the group ahead (or hand it back: the executor
        stopped taking work meanwhile)."""
        try:
            leases = await claim
        except Exception as e:  # noqa: BLE001 - the next group is claimed when needed instead
            self.told.failed(CLAIMING_AHEAD, e)
            leases = []
        else:
            self.told.worked(CLAIMING_AHEAD)
        finally:
            self.claiming = None
        if not leases:
            return
        if not self.taking():
            await self.unclaim(leases)
            return
        self.ahead = leases
        self.landed(leases)

    async def settled(self) -> None:
        """Until the claim ahead on its way, if any, has landed."""
        if self.claiming is not None:
            await asyncio.wait({self.claiming})

    # --- handing back ------------------------------------------------------------------
    async def hand_back(self) -> None:
        """The group claimed ahead (or being claimed) goes back to the queue untouched."""
        await self.settled()
        async with self.lock:
            group, self.ahead = self.ahead, []
            await self.unclaim(group)

    async def unclaim(self, leases: list[Lease]) -> None:
        if not leases:
            return
        try:
            await self.queue.unclaim(leases)
        except Exception as e:  # noqa: BLE001 - the heartbeat's hand-back, or their leases running out, bring them back
            self.told.failed(HANDING_BACK, e, job=leases[0].job_id)
        else:
            self.told.worked(HANDING_BACK)

    def drop(self, gone: Collection[LeaseKey]) -> None:
        """Leases ahead the heartbeat found gone (canceled while they waited, or run out):
        no longer this executor's."""
        if gone:
            self.ahead = [lease for lease in self.ahead if lease.key not in gone]

    def state(self) -> dict[str, Any]:
        return {"ahead": [lease.job_id for lease in self.ahead]}
