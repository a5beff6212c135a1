"""/metrics for Prometheus (prometheus-client), read fresh at each scrape.

Queue depth and delivery state come from the database; job durations and waits are
observed from the event log as jobs end (from the service's start on: counters start
at zero after a restart, which Prometheus handles); executors' memory and model cache
come from their heartbeats in the worker registry (storage.workers), whatever host they
run on; the chat platforms' health from the platforms themselves (bot.web.platforms), so
it is told with the database down too.
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import (
    Counter as Total,
)

from bot.app.leases import leases
from bot.intake import workers as intake
from bot.web.platforms import Healths, nothing, up
from storage.config import QueueConfig
from storage.db import connection_lost
from storage.outbox import Outbox
from storage.queue import TERMINAL, Priority, Queue, Status
from storage.states import NEXT
from storage.webhooks import Webhooks
from storage.workers import STATES, Workers

TABLE_SIZES_EVERY = {"postgres": 0.0, "sqlite": 300.0}  # seconds between reads of the sizes
PING_TIMEOUT = 1.0  # seconds a scrape waits to learn whether the database answers
CACHE_KINDS = ("loads", "hits", "promotions", "offloads", "evictions", "lora_loads", "lora_hits",
               "clears")


class Metrics:
    def __init__(self, queue: Queue, outbox: Outbox, restarts: Callable[[], int] = lambda: 0,
                 token: str = "",
                 webhooks: tuple[Webhooks, Counter[tuple[str, str]]] | None = None,
                 stuck_after: float = QueueConfig().stuck_after, platforms: Healths = nothing):
        """`webhooks`: the deliveries' table and the deliverer's tries by (endpoint,
        outcome), counted since the service started. `stuck_after`: [queue] stuck_after.
        `platforms`: how each chat platform the service runs is doing."""
        self.queue, self.outbox, self.restarts, self.token = queue, outbox, restarts, token
        self.platforms = platforms
        self.webhooks = webhooks
        r = self.registry = CollectorRegistry()
        self.deliveries = Gauge("genbot_webhook_deliveries", "Webhook deliveries by endpoint "
                                "and state (failed: given up, or refused)",
                                ["endpoint", "status"], registry=r)
        self.tries = Total("genbot_webhook_attempts", "Webhook delivery tries by endpoint and "
                           "outcome (delivered, retried, failed, gone) since the service "
                           "started", ["endpoint", "outcome"], registry=r)
        self._tries_seen: Counter[tuple[str, str]] = Counter()
        self.jobs = Gauge("genbot_jobs", "Jobs by status and priority; next: held by an "
                          "executor (claimed ahead, or started with its group) that is not on "
                          "it yet, counted there and not as queued or running",
                          ["status", "priority"], registry=r)
        self.paused = Gauge("genbot_queue_paused", "1 while the queue is paused", registry=r)
        self.intake_waiting = Gauge("genbot_intake_waiting", "Submissions waiting for their "
                                    "turn to be checked ([intake] workers at a time)",
                                    registry=r)
        self.outbox_messages = Gauge("genbot_outbox_messages", "Chat messages owed, by state "
                                     "(failed: given up after retries)", ["platform", "status"],
                                     registry=r)
        self.platform_up = Gauge("genbot_chat_platform_up", "1 while a chat platform this "
                                 "service runs is signed in and, where it keeps a connection "
                                 "open, connected; 0 otherwise", ["platform"], registry=r)
        self.platform_connected = Gauge("genbot_chat_platform_connected", "1 while the "
                                        "connection a chat platform keeps open (a gateway, a "
                                        "stream, Socket Mode) is up; only platforms that keep "
                                        "one", ["platform"], registry=r)
        self.duration = Histogram("genbot_job_duration_seconds", "Run time of finished jobs",
                                  ["status"], registry=r,
                                  buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
        self.wait = Histogram("genbot_job_wait_seconds", "Time from enqueue to start of jobs "
                              "that ran", registry=r,
                              buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400))
        self.executor_restarts = Gauge("genbot_executor_restarts", "Times the supervised "
                                       "executor died and was started again", registry=r)
        self.cache = Gauge("genbot_model_cache", "Model cache events since the executor started "
                           "(loads, hits, evictions …)", ["executor", "kind"], registry=r)
        self.memory = Gauge("genbot_executor_memory_bytes", "Device memory of an executor: in "
                            "use, held by resident models, total", ["executor", "device", "what"],
                            registry=r)
        self.executor_seen = Gauge("genbot_executor_report_time", "When an executor last "
                                   "reported (Unix time)", ["executor"], registry=r)
        self.workers_by_state = Gauge("genbot_workers", "Executors in the registry by state "
                                      "(lost: silent for a lease)", ["state"], registry=r)
        self.placed = Gauge("genbot_placement_jobs", "Jobs by where they can run (engine; "
                            "affinity: model or template, empty for any) and state: ready "
                            "(claimable now, 0 while paused), ahead (claimed ahead), running, "
                            "delayed (retry backoff). What an autoscaler sizes pools by",
                            ["engine", "affinity", "state"], registry=r)
        self.oldest_ready = Gauge("genbot_oldest_ready_seconds", "How long the oldest ready "
                                  "job of a placement has waited", ["engine", "affinity"],
                                  registry=r)
        self.executors = Gauge("genbot_executors", "Live executors by engine, what they may "
                               "take (affinity; * for anything) and state (idle, busy)",
                               ["engine", "affinity", "state"], registry=r)
        self.table_bytes = Gauge("genbot_table_bytes", "Each table's size on disk, its indexes "
                                 "included", ["table"], registry=r)
        self.table_rows = Gauge("genbot_table_rows", "Rows per table, live and dead (not yet "
                                "vacuumed): PostgreSQL's estimates", ["table", "state"],
                                registry=r)
        self.sizes_read = -TABLE_SIZES_EVERY["sqlite"]  # (monotonic) when last read
        self.oldest_snapshot = Gauge(
            "genbot_oldest_snapshot_seconds", "PostgreSQL: how long the oldest open "
            "transaction snapshot on genbot's database has been held; while it is, vacuum "
            "frees nothing younger and the queue slows (alert past a few minutes)",
            registry=r)
        self.database_up = Gauge("genbot_database_up", "1 while the database answers this "
                                 "service, 0 while it cannot be reached (the series read from "
                                 "it then keep their last values)", registry=r)
        self.oldest_ahead = Gauge(
            "genbot_oldest_ahead_seconds", "How long the job claimed ahead longest ago (leased "
            "to an executor, not started) has waited; one is normally started within one "
            "job's run (0: none)", registry=r)
        self.stalest_running = Gauge(
            "genbot_stalest_running_seconds", "Seconds since the running job that has gone "
            "longest without progress last showed some (a step, or its start; 0: none)",
            registry=r)
        self.stuck_jobs = Gauge(
            "genbot_stuck_jobs", "Leased jobs that look stuck: quiet past [queue] stuck_after, "
            "or held by an executor that is gone (genbot queue doctor lists them)",
            ["state"], registry=r)
        self.stuck_after = stuck_after
        self.workers = Workers.of(queue)
        self.seq: int | None = None  # the event log read so far (from the start on)

    async def start(self) -> None:
        self.seq = await self.queue.last_event_seq()

    async def handler(self, request: web.Request) -> web.Response:
        if self.token and not hmac.compare_digest(
                request.headers.get("Authorization", "").encode(), f"Bearer {self.token}".encode()):
            raise web.HTTPUnauthorized(text="genbot /metrics: send Authorization: Bearer "
                                       "<[api] metrics_token>\n",
                                       headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
        await self.refresh_or_mark_down()
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def refresh_or_mark_down(self) -> None:
        """`refresh`; with the database unreachable, genbot_database_up 0 and what needs
        no database (executor restarts, the chat platforms) instead of an error: a scrape
        still answers, within PING_TIMEOUT, and says what is wrong."""
        self.executor_restarts.set(self.restarts())
        self.intake_waiting.set(intake.waiting())
        self.read_platforms()
        if not await self.queue.db.ping(PING_TIMEOUT):
            self.database_up.set(0)
            return
        try:
            await self.refresh()
        except Exception as e:
            if not connection_lost(e):
                raise
            self.database_up.set(0)
            return
        self.database_up.set(1)

    async def refresh(self) -> None:
        counts = await self.queue.counts(next_apart=True)
        for status in [s.value for s in Status] + [NEXT]:  # every pair, zeros included:
            for priority in Priority:                      # a series never just vanishes
                name = priority.name.lower()
                self.jobs.labels(status, name).set(counts[status].get(name, 0))
        self.paused.set(1 if await self.queue.paused() else 0)
        self.outbox_messages.clear()
        for (platform, state), n in (await self.outbox.counts_by_platform()).items():
            if not platform.startswith("webhook:"):  # (deliveries have their own, below)
                self.outbox_messages.labels(platform, state).set(n)
        if self.webhooks is not None:
            table, tries = self.webhooks
            self.deliveries.clear()
            for (endpoint, state), n in (await table.counts()).items():
                self.deliveries.labels(endpoint, state).set(n)
            for (endpoint, outcome), n in list(tries.items()):
                if grown := n - self._tries_seen[(endpoint, outcome)]:
                    self.tries.labels(endpoint, outcome).inc(grown)
                    self._tries_seen[(endpoint, outcome)] = n
        self.executor_restarts.set(self.restarts())
        await self.read_placement()
        await self.read_leases()
        await self.read_table_sizes()
        await self.observe_ended_jobs()
        await self.read_workers()

    def read_platforms(self) -> None:
        """Each platform the service runs now, and no other (cleared first)."""
        self.platform_up.clear()
        self.platform_connected.clear()
        for health in self.platforms():
            self.platform_up.labels(health.platform).set(up(health))
            if health.connected is not None:
                self.platform_connected.labels(health.platform).set(health.connected)

    async def observe_ended_jobs(self) -> None:
        if self.seq is None:
            await self.start()
        while events := await self.queue.events_after(self.seq or 0, 1000):
            for event in events:
                self.seq = event.seq
                if event.kind in TERMINAL and event.job_id:
                    job = await self.queue.job(event.job_id)
                    if job and job.started_at and job.finished_at:
                        self.duration.labels(str(job.status)).observe(
                            job.finished_at - job.started_at)
                        self.wait.observe(max(0.0, job.started_at - job.enqueued_at))

    async def read_placement(self) -> None:
        self.placed.clear()
        self.oldest_ready.clear()
        for p in await self.queue.placement():
            for state in ("ready", "ahead", "running", "delayed"):
                self.placed.labels(p.engine, p.affinity, state).set(getattr(p, state))
            self.oldest_ready.labels(p.engine, p.affinity).set(p.oldest_ready_seconds)

    async def read_leases(self) -> None:
        """What a stuck-job alert reads (docs/operations.md): a few rows, at any history."""
        found = await leases(self.queue, self.stuck_after)
        self.oldest_ahead.set(max((x.job.idle_seconds for x in found if x.job.ahead),
                                  default=0.0))
        self.stalest_running.set(max((x.job.idle_seconds for x in found if not x.job.ahead),
                                     default=0.0))
        for state in ("ahead", "running"):
            self.stuck_jobs.labels(state).set(sum(
                x.stuck and x.job.ahead == (state == "ahead") for x in found))

    async def read_table_sizes(self) -> None:
        """Cheap on PostgreSQL (statistics views): every scrape. SQLite must read every
        page for them: at most every five minutes."""
        now = time.monotonic()
        if now - self.sizes_read < TABLE_SIZES_EVERY[self.queue.db.dialect]:
            return
        self.sizes_read = now
        if (held := await self.queue.oldest_snapshot()) is not None:
            self.oldest_snapshot.set(held)
        for row in await self.queue.table_sizes():
            self.table_bytes.labels(row["name"]).set(row["bytes"] or 0)
            for state in ("live", "dead"):
                if row[state] is not None:
                    self.table_rows.labels(row["name"], state).set(row[state])

    async def read_workers(self) -> None:
        rows = await self.workers.all()
        for state in STATES:
            self.workers_by_state.labels(state).set(sum(w.state == state for w in rows))
        self.executors.clear()
        pools: Counter[tuple[str, str, str]] = Counter()
        for w in rows:
            if w.live:
                engine = str(w.stats.get("engine") or "diffusers")
                for taken in ("*",) if w.allow is None else w.allow:
                    pools[(engine, taken.removeprefix(f"{engine}:"), w.state)] += 1
        for (engine, affinity, state), n in pools.items():
            self.executors.labels(engine, affinity, state).set(n)
        for w in rows:
            name = w.id
            self.executor_seen.labels(name).set(w.seen_at)
            cache = w.stats.get("cache", {})
            for kind in CACHE_KINDS:
                self.cache.labels(name, kind).set(cache.get(kind, 0))
            for what, value in (("in_use", w.memory_used), ("total", w.memory_total),
                                ("models", w.stats.get("models_resident"))):
                if value is not None:
                    self.memory.labels(name, w.device, what).set(value)
