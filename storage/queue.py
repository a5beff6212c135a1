"""The durable priority job queue. The only code that writes jobs, batches and the pause flag.

The promises it keeps are listed in docs/queue.md; in short:
- an accepted batch is committed whole before `enqueue` returns (or refused whole);
- a claim takes a lease; heartbeats extend it; every later write is fenced by the
  lease token, so a stale executor changes nothing;
- a lease that expires is taken back by the next claim and counts an attempt;
- claim order: priority class, round-robin among submitters, FIFO per submitter;
- cancel and pause are rows in the database, seen by every executor, surviving restarts;
- every transition is in the event log (written by triggers, see migration 0002).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from storage import queries as q
from storage.config import Config, DatabaseConfig, QueueConfig
from storage.db import Database
from storage.previews import Previews
from storage.reads import BatchProgress, QueueReads
from storage.records import (
    ACTIVE,
    TERMINAL,
    Priority,
    Status,
    decoded,
    encoded,
)
from storage.reviews import BY_CODE, MAX_STARS, REOPENED, SIGNED_OFF
from storage.wakeup import EventBell, Waker, waker_for

__all__ = ["ACTIVE", "TERMINAL", "BatchProgress", "CancelResult", "Claim", "Enqueued", "Lease",
           "LeaseKey", "LeaseState", "NewJob", "Priority", "Queue", "QueueFull", "Renewal",
           "Status", "Submission", "open_queue"]


ANALYZE_EVERY = 2000  # jobs this process enqueues between renewals of PostgreSQL's statistics


@dataclass(frozen=True)
class NewJob:
    row: int
    workflow: dict[str, Any]  # the bound workflow (templates.jobs.encode)
    affinity: str | None = None  # e.g. the model it needs; lets a claim prefer loaded models
    parent: int | None = None  # the job whose image it was made from (iteration)
    action: str | None = None  # how it was made from its parent (the caller's word)


@dataclass(frozen=True)
class Submission:
    template: str
    submitter: str
    jobs: Sequence[NewJob]
    platform: str = "cli"
    conversation: str | None = None
    thread: str | None = None
    priority: Priority = Priority.NORMAL
    idempotency_key: str | None = None  # e.g. the chat message id: a retried webhook is a no-op
    not_before: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Enqueued:
    batch_id: int
    jobs: int
    created: bool  # False: the idempotency key matched an existing batch


class QueueFull(Exception):
    """A submission bigger than the free room. Nothing of it was queued."""

    def __init__(self, requested: int, free: int, limit: int):
        self.requested, self.free, self.limit = requested, free, limit
        super().__init__(f"the queue has room for {free} more jobs (max_queue_size {limit}) "
                         f"but this submission has {requested}: nothing was queued")


LeaseKey = tuple[int, str]  # (job id, lease token): one lease, one run of a job


@dataclass(frozen=True)
class Lease:
    job_id: int
    batch_id: int
    token: str
    owner: str
    row: int
    workflow: dict[str, Any]
    attempts: int
    priority: Priority
    submitter: str
    affinity: str | None
    started: bool = True  # False: claimed ahead, still queued until `Queue.start`

    @classmethod
    def from_row(cls, row: dict[str, Any], *, token: str, owner: str,
                 started: bool = True) -> Lease:
        return cls(job_id=row["id"], batch_id=row["batch_id"], token=token, owner=owner,
                   row=row["row"], workflow=decoded(row["workflow"]), attempts=row["attempts"],
                   priority=Priority(row["priority"]), submitter=row["submitter"],
                   affinity=row["affinity"], started=started)

    @property
    def key(self) -> LeaseKey:
        """What the lease is known by: a later lease of the same job has another token."""
        return self.job_id, self.token


@dataclass(frozen=True)
class Claim:
    """What a claim asks for (the arguments of `Queue.claim`), so a completion can carry
    the next claim in the same round trip (`Queue.complete_and_claim`)."""
    owner: str
    prefer: Sequence[str] = ()
    only: Sequence[str] | None = None
    engine: bool = False
    ahead: bool = False


@dataclass(frozen=True)
class LeaseState:
    held: bool  # False: the lease expired and the job is no longer this executor's
    cancel_requested: bool


@dataclass(frozen=True)
class Renewal:
    """What a heartbeat found: each lease's state, and the jobs handed back because their
    executor held them without knowing (`heartbeat_all`)."""
    states: dict[LeaseKey, LeaseState]
    handed_back: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CancelResult:
    ended: list[int]  # queued jobs, canceled now
    asked: list[int]  # running jobs, told to stop at their next step


class Queue(QueueReads):
    def __init__(self, db: Database, settings: QueueConfig, *,
                 clock: Callable[[], float] = time.time, waker: Waker | None = None):
        self.db = db
        self.settings = settings
        self.clock = clock
        self.waker = waker or self._default_waker(db)
        self.enqueued_since_analyze = 0
        # Busy executors listen here: a cancel of a running job rings it.
        self.cancel_bell = self._default_waker(db, "cancel")
        # Readers of the event log (the notifier, the API's stream) wait on this.
        self.bell = EventBell(None if db.dialect == "sqlite" else db.url)
        # Pictures of running jobs, executors to the service (never stored).
        self.previews = Previews(db)

    @staticmethod
    def _default_waker(db: Database, topic: str = "wake") -> Waker:
        return waker_for(db, topic, prefix="genbot_queue" if topic == "wake"
                         else f"genbot_{topic}")

    async def close(self) -> None:
        await self.waker.close()
        await self.cancel_bell.close()
        await self.bell.close()
        await self.previews.close()
        await self.db.close()

    def _sql(self, text: str) -> str:
        return q.for_dialect(text, self.db.dialect)

    # --- Submitting ---------------------------------------------------------------

    async def enqueue(self, sub: Submission) -> Enqueued:
        """Insert the batch and all its jobs in one transaction, or refuse it whole."""
        if not sub.jobs:
            raise ValueError("a submission needs at least one job")
        n = len(sub.jobs)
        now = self.clock()
        prio = int(sub.priority)
        jobs = encoded([{"row": job.row, "workflow": job.workflow, "affinity": job.affinity,
                         "parent": job.parent, "action": job.action} for job in sub.jobs])
        # What the submission's statements take, by name (each reads the ones it names).
        given: dict[str, Any] = {
            "key": sub.idempotency_key, "priority": prio, "submitter": sub.submitter,
            "now": now, "template": sub.template, "platform": sub.platform,
            "conversation": sub.conversation, "thread": sub.thread, "total": n,
            "meta": encoded(sub.meta), "not_before": float(sub.not_before), "jobs": jobs}
        async with self.db.transaction() as tx:
            if self.db.dialect == "postgres":
                await self.db.fetch(q.LOCK_QUEUE_STATE, client=tx)
            if sub.idempotency_key:
                row = await self.db.fetchrow(q.BATCH_BY_IDEMPOTENCY_KEY, given, client=tx)
                if row:
                    return Enqueued(row["id"], row["total_jobs"], created=False)
            counts = await self.db.fetchrow(q.ACTIVE_COUNTS, client=tx)
            assert counts is not None  # an aggregate without GROUP BY returns one row
            active = sum(counts.values())
            limit = self.settings.max_queue_size
            if active + n > limit:
                raise QueueFull(n, max(0, limit - active), limit)
            turn = await self.db.fetchval(q.CLASS_TURN, given, client=tx)
            if turn is None:
                turn = await self.db.fetchval(q.CLASS_TURN_AFTER_ALL, given, client=tx)
            own = await self.db.fetchval(q.SUBMITTER_LAST_TURN, given, client=tx)
            given["start"] = turn if own is None else max(turn, own + 1)
            given["batch"] = await self.db.fetchval(q.INSERT_BATCH, given, client=tx)
            await self.db.execute(self._sql(q.INSERT_JOBS), given, client=tx)
            await self.db.execute(q.INSERT_EVENT, given | {
                "at": now, "kind": "submitted", "job": None, "data": encoded({
                    "template": sub.template, "submitter": sub.submitter, "jobs": n,
                    "priority": sub.priority.label})}, client=tx)
        await self.waker.notify()
        self.enqueued_since_analyze += n
        if self.enqueued_since_analyze >= ANALYZE_EVERY and self.db.dialect == "postgres":
            # A burst reshapes the queue faster than autovacuum's next look (up to a
            # minute): with stale statistics a claim sorts every queued job instead of
            # reading the queue's index in order, and does so for every claim until then.
            # (About 50 ms per 2,000 jobs enqueued.)
            self.enqueued_since_analyze = 0
            await self.db.execute(q.ANALYZE_JOBS)
        return Enqueued(given["batch"], n, created=True)

    # --- Executing ----------------------------------------------------------------

    async def claim(self, owner: str, prefer: Sequence[str] = (),
                    only: Sequence[str] | None = None, *, engine: bool = False,
                    ahead: bool = False) -> Lease | None:
        """Take the next job under a lease, or None when nothing is claimable (or paused).

        `prefer`: affinities (e.g. loaded models) to favour within the current
        submitter's turn, so a resident model is reused without breaking fairness.
        `only`: the affinities this worker can run (its model allow-list, what fits its
        memory); jobs needing another model are left to other workers. None: any.
        `engine`: this worker is another engine's ("comfyui:…" affinities, see
        queries.placed): it takes exactly the affinities in `only`, nothing else.
        `ahead`: claim the job *ahead* — leased to this executor but still queued, no
        attempt used — to `start` the moment the current one leaves the GPU.

        Expired leases are taken back by claims, in one statement on the common path:
        a claim that saw an expired lease sweeps it back to the queue after taking its
        own job; a claim that found nothing sweeps and looks once more.
        """
        want = Claim(owner, tuple(prefer), only, engine, ahead)
        now = self.clock()
        sql, args, token = self._claim_statement(want, now)
        row = await self.db.fetchrow(sql, args)
        if row is None and await self.db.fetchval(q.ANY_LEASE_EXPIRED, {"now": now}):
            await self._sweep(now)
            sql, args, token = self._claim_statement(want, now)
            row = await self.db.fetchrow(sql, args)
        return await self._taken(want, row, token, now)

    def _claim_statement(self, want: Claim, now: float) -> tuple[str, dict[str, Any], str]:
        """The claim statement `want` needs, its parameters and the new lease's token."""
        if want.engine and want.only is None:
            raise ValueError("an engine's claim names the affinities it takes (only=)")
        token = uuid.uuid4().hex
        args = self._lease_args(want.owner, token, now, want.only)
        if not want.prefer:
            sql = q.CLAIM_AHEAD if want.ahead else q.CLAIM
        else:
            args["prefer"] = encoded(list(want.prefer))
            sql = q.CLAIM_AHEAD_PREFERRING if want.ahead else q.CLAIM_PREFERRING
        return self._placed(sql, want.only, want.engine), args, token

    def _lease_args(self, owner: str, token: str, now: float,
                    only: Sequence[str] | None) -> dict[str, Any]:
        """What every claim statement takes: who, the new lease, now, and the
        affinities it may take (:only, read only by a placement that names them)."""
        return {"owner": owner, "token": token, "expires": now + self.settings.lease_seconds,
                "now": now, "only": None if only is None else encoded(list(only))}

    def _placed(self, sql: str, only: Sequence[str] | None, engine: bool) -> str:
        """A claim statement for its placement (queries.ANYTHING, ALLOWED, ENGINE_ONLY)."""
        placement = q.ANYTHING if only is None else q.ENGINE_ONLY if engine else q.ALLOWED
        return self._sql(q.placed(sql, placement))

    async def _taken(self, want: Claim, row: dict | None, token: str,
                     now: float) -> Lease | None:
        """A claim statement's row as a lease, after the follow-ups it asked for."""
        if row is None:
            return None
        if row.get("out_of_turn"):
            await self.db.execute(q.GIVE_BACK_TURN, {"rank": row["fair_rank"],
                                                     "priority": row["priority"],
                                                     "submitter": row["submitter"], "now": now})
        if row["expired_seen"]:
            await self._sweep(now)
        return Lease.from_row(row, token=token, owner=want.owner, started=not want.ahead)

    async def _sweep(self, now: float) -> None:
        await self.db.execute(q.EXPIRE_LEASES, {"now": now,
                                                "max_attempts": self.settings.max_attempts})
        await self.db.execute(q.EXPIRE_AHEAD, {"now": now})

    async def claim_many(self, owner: str, limit: int, only: Sequence[str] | None = None, *,
                         engine: bool = False) -> list[Lease]:
        """Up to `limit` jobs in claim order, in one statement (SKIP LOCKED beside other
        claimers), under one lease token: for executors of many quick jobs, where one
        round trip per job would be the bottleneck. Priorities, turns, placement (`only`,
        `engine` as for `claim`), leases and the pause as for `claim`; each job started."""
        if limit <= 0:
            return []
        now = self.clock()
        sql, args, token = self._many_statement(owner, limit, only, engine, now)
        rows = await self.db.fetch(sql, args)
        if not rows and await self.db.fetchval(q.ANY_LEASE_EXPIRED, {"now": now}):
            await self._sweep(now)
            sql, args, token = self._many_statement(owner, limit, only, engine, now)
            rows = await self.db.fetch(sql, args)
        return await self._taken_many(owner, rows, token, now)

    def _many_statement(self, owner: str, limit: int, only: Sequence[str] | None,
                        engine: bool, now: float) -> tuple[str, dict[str, Any], str]:
        if engine and only is None:
            raise ValueError("an engine's claim names the affinities it takes (only=)")
        token = uuid.uuid4().hex
        args = self._lease_args(owner, token, now, only) | {"limit": limit}
        return self._placed(q.CLAIM_MANY, only, engine), args, token

    async def _taken_many(self, owner: str, rows: list[dict], token: str,
                          now: float) -> list[Lease]:
        rows = [r for r in rows if r.get("id") is not None]
        if any(r["expired_seen"] for r in rows):
            await self._sweep(now)
        rows.sort(key=lambda r: (r["priority"], r["fair_rank"], r["id"]))
        return [Lease.from_row(r, token=token, owner=owner) for r in rows]

    async def complete_many(self, done: Sequence[tuple[Lease, Sequence[Any]]]
                            ) -> dict[int, Status]:
        """Record many successes (lease, outputs) in one statement: {job id: status}
        (canceled where a cancel came first); a job whose lease was lost is missing."""
        if not done:
            return {}
        rows = await self.db.fetch(self._sql(q.COMPLETE_MANY), {"done": self._done_list(done),
                                                                "now": self.clock()})
        return {r["id"]: Status(r["status"]) for r in rows}

    async def complete_many_and_claim(self, done: Sequence[tuple[Lease, Sequence[Any]]],
                                      owner: str, limit: int,
                                      only: Sequence[str] | None = None, *,
                                      engine: bool = False
                                      ) -> tuple[dict[int, Status], list[Lease]]:
        """`complete_many` and `claim_many` in one round trip: one statement on
        PostgreSQL, one transaction on SQLite. Finding nothing, it does not look again
        (as `complete_and_claim`)."""
        now = self.clock()
        sql, args, token = self._many_statement(owner, limit, only, engine, now)
        finished = {"done": self._done_list(done), "now": now}
        if self.db.dialect == "postgres":
            rows = await self.db.fetch(self._sql(q.complete_many_then(sql)), finished | args)
            statuses = {int(d["id"]): Status(d["status"])
                        for d in decoded(rows[0]["done"])} if rows else {}
        else:
            async with self.db.transaction() as tx:
                ended = await self.db.fetch(self._sql(q.COMPLETE_MANY), finished, client=tx)
                rows = await self.db.fetch(sql, args, client=tx)
            statuses = {r["id"]: Status(r["status"]) for r in ended}
        return statuses, await self._taken_many(owner, rows, token, now)

    @staticmethod
    def _done_list(done: Sequence[tuple[Lease, Sequence[Any]]]) -> str:
        return encoded([{"id": lease.job_id, "token": lease.token, "outputs": list(outputs)}
                        for lease, outputs in done])

    async def claim_followers(self, lease: Lease, limit: int) -> list[Lease]:
        """Up to `limit` more queued jobs of `lease`'s batch with its affinity, next in
        order, under one more lease token: what the executor may run as one micro-batch.
        Claimed ahead, like `lease`, when it was."""
        if limit <= 0 or lease.affinity is None:
            return []
        now = self.clock()
        token = uuid.uuid4().hex
        sql = q.CLAIM_FOLLOWERS if lease.started else q.CLAIM_FOLLOWERS_AHEAD
        rows = await self.db.fetch(self._sql(sql), self._lease_args(lease.owner, token, now, None)
                                   | {"batch": lease.batch_id, "affinity": lease.affinity,
                                      "limit": limit})
        rows.sort(key=lambda r: (r["fair_rank"], r["id"]))
        return [Lease.from_row(r, token=token, owner=lease.owner, started=lease.started)
                for r in rows]

    async def start(self, leases: Sequence[Lease]) -> list[Lease]:
        """Start jobs claimed ahead (a claim and its followers); their attempt counts now.
        Returns those started. The others were canceled (they ended at once), handed
        back, or the queue was paused: whatever is left of their claims is dropped.
        Sent again after its answer was lost, it finds its jobs started: the same."""
        if not leases:
            return []
        now = self.clock()
        held = self._lease_list(leases)
        rows = await self.db.fetch(self._sql(q.START), {
            "leases": held, "now": now, "expires": now + self.settings.lease_seconds})
        attempts = {r["id"]: r["attempts"] for r in rows}
        if len(attempts) < len(leases):
            for r in await self.db.fetch(self._sql(q.RUNNING_UNDER), {"leases": held}):
                attempts.setdefault(r["id"], r["attempts"])
        if len(attempts) < len(leases):
            await self.db.execute(self._sql(q.UNCLAIM_AHEAD), {"leases": held, "now": now})
        return [replace(lease, attempts=attempts[lease.job_id], started=True)
                for lease in leases if lease.job_id in attempts]

    async def unclaim(self, leases: Sequence[Lease]) -> int:
        """Hand jobs claimed ahead back to the queue, untouched (no attempt was used)."""
        if not leases:
            return 0
        return await self.db.execute(self._sql(q.UNCLAIM_AHEAD), {
            "leases": self._lease_list(leases), "now": self.clock()})

    @staticmethod
    def _lease_list(leases: Sequence[Lease]) -> str:
        return encoded([{"id": lease.job_id, "token": lease.token} for lease in leases])

    async def heartbeat(self, lease: Lease) -> LeaseState:
        """Extend the lease; also tells the executor whether a cancel was asked for."""
        row = await self.db.fetchrow(q.HEARTBEAT, {
            "job": lease.job_id, "lease": lease.token,
            "expires": self.clock() + self.settings.lease_seconds})
        if row is None:
            return LeaseState(held=False, cancel_requested=False)
        return LeaseState(held=True, cancel_requested=bool(row["cancel_requested"]))

    async def heartbeat_all(self, leases: Sequence[Lease], *,
                            owner: str | None = None) -> Renewal:
        """Extend every lease an executor holds, each fenced by its job and token: the
        state of each. With `owner`, also hand back whatever else that executor holds a
        lease on, in the same statement on PostgreSQL and the same transaction on
        SQLite, so the leases an executor renews are exactly the ones it knows of
        (queries.HAND_BACK_UNHELD says what that catches). The caller must have no claim
        on its way meanwhile: the lease that claim takes would look unknown."""
        now = self.clock()
        held, expiry = self._lease_list(leases), now + self.settings.lease_seconds
        rows: list[dict]
        if owner is None:
            rows = await self.db.fetch(self._sql(q.HEARTBEAT_ALL), {"leases": held,
                                                                    "expires": expiry}) \
                if leases else []
        else:
            reason = f"handed back: executor {owner} held it without knowing " \
                "(a claim whose answer was lost)"
            args = {"leases": held, "expires": expiry, "owner": owner, "now": now,
                    "why": reason}
            if self.db.dialect == "postgres":
                rows = await self.db.fetch(self._sql(q.HEARTBEAT_AND_HAND_BACK), args)
            else:
                async with self.db.transaction() as tx:
                    rows = await self.db.fetch(self._sql(q.HEARTBEAT_ALL), {"leases": held,
                                                                            "expires": expiry},
                                               client=tx) if leases else []
                    handed = await self.db.fetch(self._sql(q.HAND_BACK_UNHELD), args,
                                                 client=tx)
                rows += [{**r, "handed_back": True} for r in handed]
        renewed = {(r["id"], r["token"]): bool(r["cancel_requested"]) for r in rows
                   if not r.get("handed_back")}
        return Renewal({lease.key: LeaseState(lease.key in renewed, renewed.get(lease.key, False))
                        for lease in leases},
                       sorted(r["id"] for r in rows if r.get("handed_back")))

    async def hand_back(self, job_ids: Sequence[int], reason: str) -> list[int]:
        """An operator's hand-back of stuck jobs: those of `job_ids` still leased go back to
        the queue (claimed ahead: untouched; running: queued again, no attempt used;
        canceled if asked), and whoever held them finds the lease gone. Returns those."""
        if not job_ids:
            return []
        rows = await self.db.fetch(self._sql(q.HAND_BACK_JOBS), {
            "jobs": encoded(list(job_ids)), "now": self.clock(), "why": reason})
        if rows:
            await self.waker.notify()
        return sorted(r["id"] for r in rows)

    async def complete(self, lease: Lease, outputs: Sequence[Any] = ()) -> Status | None:
        """Record success (or canceled, if a cancel came first). None: the lease was lost."""
        row = await self.db.fetchrow(q.COMPLETE, {"job": lease.job_id, "lease": lease.token,
                                                  "outputs": encoded(list(outputs)),
                                                  "now": self.clock()})
        return Status(row["status"]) if row else None

    async def complete_and_claim(self, lease: Lease, outputs: Sequence[Any],
                                 then: Claim) -> tuple[Status | None, Lease | None]:
        """`complete` and `claim` in one round trip: one statement on PostgreSQL, one
        transaction (one commit) on SQLite. The claim's follow-ups (a turn given back, a
        sweep of expired leases) run after it, as `claim`'s do; finding nothing, it does
        not look again: the caller's next `claim` does."""
        now = self.clock()
        sql, args, token = self._claim_statement(then, now)
        done = {"job": lease.job_id, "lease": lease.token, "outputs": encoded(list(outputs)),
                "now": now}
        claimed: dict | None
        if self.db.dialect == "postgres":
            row = await self.db.fetchrow(q.complete_then(sql), done | args)
            assert row is not None  # the SELECT always yields its one row
            status, claimed = row["done_status"], row if row["id"] is not None else None
        else:
            async with self.db.transaction() as tx:
                finished = await self.db.fetchrow(q.COMPLETE, done, client=tx)
                claimed = await self.db.fetchrow(sql, args, client=tx)
            status = finished["status"] if finished else None
        taken = await self._taken(then, claimed, token, now)
        return (Status(status) if status else None), taken

    async def fail(self, lease: Lease, error: str, *, retry: bool = True) -> Status | None:
        """Record a failed attempt: back to queued with backoff while attempts remain
        (and `retry`), else failed; canceled if a cancel was asked. An executor that
        stops because of a cancel calls this too. None: the lease was lost."""
        now = self.clock()
        s = self.settings
        backoff = min(s.retry_backoff * 2 ** max(0, lease.attempts - 1), s.retry_backoff_max)
        row = await self.db.fetchrow(q.FAIL, {
            "job": lease.job_id, "lease": lease.token, "retry": retry, "error": error,
            "max_attempts": s.max_attempts, "retry_at": now + backoff, "now": now})
        return Status(row["status"]) if row else None

    async def release(self, lease: Lease, reason: str) -> Status | None:
        """Hand a running job back to the queue without using an attempt (the executor
        is stopping); canceled if a cancel was asked. None: the lease was lost."""
        row = await self.db.fetchrow(q.RELEASE, {"job": lease.job_id, "lease": lease.token,
                                                 "why": reason, "now": self.clock()})
        return Status(row["status"]) if row else None

    async def owner_died(self, owner: str) -> int:
        """`owner` is gone for sure (its supervisor saw it exit): its jobs are taken back by
        the next claim instead of when their leases would have run out. Returns how many."""
        ended = await self.db.execute(q.END_LEASES_OF, {"owner": owner, "now": self.clock()})
        if ended:
            await self.waker.notify()
        return ended

    async def progress(self, lease: Lease, data: dict[str, Any]) -> bool:
        """A progress event (e.g. {"node", "step", "total"}) for a job this lease holds."""
        return await self.progress_all([(lease, data, self.clock())]) > 0

    async def progress_all(self, updates: Sequence[tuple[Lease, dict[str, Any], float]]) -> int:
        """Progress events of several jobs in one statement: (lease, data, when) each, in
        order; each job's `progressed_at` moves with them. Returns how many were recorded
        (a job no longer held records nothing)."""
        if not updates:
            return 0
        rows = encoded([{"id": lease.job_id, "token": lease.token, "at": at, "data": data}
                        for lease, data, at in updates])
        if self.db.dialect == "postgres":
            return len(await self.db.fetch(self._sql(q.PROGRESS_ALL_PG), {"updates": rows}))
        async with self.db.transaction() as tx:
            written = await self.db.fetch(self._sql(q.PROGRESS_ALL), {"updates": rows}, client=tx)
            await self.db.execute(self._sql(q.PROGRESSED), {"updates": rows}, client=tx)
        return len(written)

    async def cancels_asked(self, owner: str) -> set[int]:
        """Jobs running under `owner` that someone asked to cancel."""
        return {r["id"] for r in await self.db.fetch(q.CANCELS_ASKED, {"owner": owner})}

    async def wait_for_work(self, timeout: float | None = None) -> bool:
        """Sleep until new work is signalled, something falls due, or the poll interval ends."""
        delay = self.settings.poll_interval if timeout is None else timeout
        now = self.clock()
        due = await self.db.fetchval(q.NEXT_DUE, {"now": now})
        if due is not None:
            delay = min(delay, max(0.0, due - now))
        return await self.waker.wait(delay)

    # --- Controlling --------------------------------------------------------------

    async def cancel(self, *, job: int | None = None, batch: int | None = None,
                     submitter: str | None = None, everything: bool = False,
                     by: str = "") -> CancelResult:
        """Cancel by job, batch, submitter or everything. A canceled job never runs again."""
        scopes = [(q.CANCEL_JOB, job), (q.CANCEL_BATCH, batch),
                  (q.CANCEL_SUBMITTER, submitter), (q.CANCEL_ALL, everything or None)]
        chosen = [(sql, arg) for sql, arg in scopes if arg is not None]
        if len(chosen) != 1:
            raise ValueError("cancel exactly one of: job, batch, submitter, everything")
        sql, arg = chosen[0]
        rows = await self.db.fetch(sql, {"now": self.clock(), "target": arg,
                                         "why": f"canceled by {by or 'unknown'}"})
        result = CancelResult(
            ended=sorted(r["id"] for r in rows if r["status"] == Status.CANCELED),
            asked=sorted(r["id"] for r in rows if r["status"] == Status.RUNNING))
        if result.asked:
            await self.cancel_bell.notify()
        return result

    async def rate(self, job_id: int, rating: int | None, by: str, note: str | None = None) -> bool:
        """Set (or, with None, clear) a finished image's review (a code of
        storage.reviews) and its reason or note. False: no such job succeeded (nothing
        else has an image to review), or its batch is signed off."""
        if rating not in BY_CODE:
            raise ValueError(f"a rating is one of {sorted(BY_CODE, key=str)}, not {rating!r}")
        return await self.db.fetchrow(q.RATE, {"job": job_id, "rating": rating, "by": by,
                                               "note": note or None,
                                               "now": self.clock()}) is not None

    async def star(self, job_id: int, stars: int | None, by: str) -> bool:
        """Grade a finished image 1-5 (None: no grade). False as `rate`."""
        if stars is not None and not 1 <= stars <= MAX_STARS:
            raise ValueError(f"stars are 1 to {MAX_STARS} or None, not {stars!r}")
        return await self.db.fetchrow(q.STAR, {"job": job_id, "stars": stars, "by": by,
                                               "now": self.clock()}) is not None

    async def sign_off(self, batch_id: int, by: str) -> bool:
        """Record that `by` approved the batch, with an event ("signed_off"), if every
        image it made is reviewed and none of its jobs is still to run. False: it is
        not (storage.reads.review_counts says why), or it was signed off already."""
        now = self.clock()
        async with self.db.transaction() as tx:
            if await self.db.fetchrow(q.SIGN_OFF, {"batch": batch_id, "by": by, "now": now},
                                      client=tx) is None:
                return False
            await self.db.execute(q.INSERT_EVENT, {
                "at": now, "kind": SIGNED_OFF, "batch": batch_id, "job": None,
                "data": encoded({"by": by})}, client=tx)
        return True

    async def reopen(self, batch_id: int, by: str) -> bool:
        """Take a batch's sign-off back (its images may be reviewed again), with an event
        ("reopened"). False: it was not signed off."""
        now = self.clock()
        async with self.db.transaction() as tx:
            if await self.db.fetchrow(q.REOPEN, {"batch": batch_id}, client=tx) is None:
                return False
            await self.db.execute(q.INSERT_EVENT, {
                "at": now, "kind": REOPENED, "batch": batch_id, "job": None,
                "data": encoded({"by": by})}, client=tx)
        return True

    async def move(self, *, batch: int | None = None, job: int | None = None,
                   to: str = "front") -> int:
        """Move a batch's waiting jobs (or one job) to the front or the back of its
        submitter's waiting jobs in its priority class: those jobs' turns (fair_rank) are
        dealt out again in the new order, so round-robin between submitters is untouched —
        no one else waits longer or shorter — and only this submitter's own order changes.
        Jobs claimed ahead stay where they are. Returns how many were moved (0: nothing of
        it waits)."""
        if (batch is None) == (job is None) or to not in ("front", "back"):
            raise ValueError("move a batch or a job, to the front or the back")
        async with self.db.transaction() as tx:
            if self.db.dialect == "postgres":
                await self.db.fetch(q.LOCK_QUEUE_STATE, client=tx)
            which = await self.db.fetchrow(q.QUEUED_OF_BATCH, {"batch": batch}, client=tx) \
                if batch is not None else await self.db.fetchrow(q.JOB, {"job": job}, client=tx)
            if which is None or (job is not None and (which["status"] != Status.QUEUED
                                                      or which["lease_token"])):
                return 0
            waiting = await self.db.fetch(q.SUBMITTER_WAITING, {
                "priority": which["priority"], "submitter": which["submitter"]}, client=tx)
            chosen = [r for r in waiting if (r["batch_id"] == batch if job is None
                                             else r["id"] == job)]
            rest = [r for r in waiting if r not in chosen]
            order = chosen + rest if to == "front" else rest + chosen
            turns = sorted(r["fair_rank"] for r in waiting)
            await self.db.execute(self._sql(q.SET_TURNS), {"ranks": encoded(
                [{"id": r["id"], "rank": t} for r, t in zip(order, turns, strict=True)])},
                client=tx)
        await self.waker.notify()
        return len(chosen)

    async def forget_finished(self, before: float, limit: int = 500,
                              ids: Sequence[int] | None = None) -> list[int]:
        """Delete batches wholly finished before `before`, with their jobs, events and
        renditions (retention), each batch in a transaction of its own (no lock on the queue);
        returns their ids, for their output files to go too. `ids`: these batches
        only (still only if wholly finished before `before`)."""
        old = await self.finished_before(before, limit)
        still = set(old)
        ids = old if ids is None else [i for i in ids if i in still]
        for batch_id in ids:
            async with self.db.transaction() as tx:
                for sql in (q.FORGET_EVENTS, q.FORGET_RENDITIONS, q.FORGET_JOBS,
                            q.FORGET_BATCH):
                    await self.db.execute(sql, {"batch": batch_id}, client=tx)
        return ids

    async def finished_before(self, before: float, limit: int = 500) -> list[int]:
        """Batches wholly finished before `before` (what `forget_finished` would take),
        oldest first, without forgetting them."""
        return [r["id"] for r in await self.db.fetch(q.OLD_BATCHES, {"before": before,
                                                                     "limit": limit})]

    async def batch_record(self, batch_id: int) -> dict[str, Any] | None:
        """A batch with its jobs and events, as rows: what an archive keeps of it."""
        batch = await self.db.fetchrow(q.BATCH, {"batch": batch_id})
        if batch is None:
            return None
        return {"batch": batch, "jobs": await self.db.fetch(q.BATCH_JOBS, {"batch": batch_id}),
                "events": await self.db.fetch(q.BATCH_EVENTS, {"batch": batch_id})}

    async def forget_loose_events(self, before: float, limit: int = 5000) -> int:
        """Delete events of no batch (pause, resume, lost workers) older than `before`,
        `limit` at a time (each a short transaction); returns how many."""
        total = 0
        while n := await self.db.execute(q.FORGET_LOOSE_EVENTS, {"before": before, "limit": limit}):
            total += n
        return total

    async def pause(self, by: str = "") -> bool:
        """Stop claiming (running jobs finish). Persisted. Returns False if already paused.
        Jobs claimed ahead go back to waiting at once, untouched."""
        now = self.clock()
        async with self.db.transaction() as tx:
            changed = await self.db.execute(q.SET_PAUSED, {"paused": True, "by": by, "now": now},
                                            client=tx) > 0
            await self.db.execute(q.UNCLAIM_ALL_AHEAD, {"now": now}, client=tx)
        return changed

    async def resume(self, by: str = "") -> bool:
        changed = await self.db.execute(q.SET_PAUSED, {"paused": False, "by": by,
                                                       "now": self.clock()}) > 0
        if changed:
            await self.waker.notify()
        return changed


async def open_queue(config: Config, *, clock: Callable[[], float] = time.time,
                     migrate: bool = True, wait: float | None = None) -> Queue:
    """Open the configured database (applying migrations) and return its queue. `wait`:
    seconds to wait for a PostgreSQL server not reachable yet (None: a few seconds; the
    long-running processes pass [database] open_wait)."""
    db = Database(config.database_url, pool_size=config[DatabaseConfig].pool_size)
    await db.open(migrate=migrate, wait=wait)
    return Queue(db, config[QueueConfig], clock=clock)
