"""The outage drill: PostgreSQL going away under a working fleet, the way genbot's fault
promises were checked from outside (issue 40).

A private cluster (tests/fakes/pgcluster.py); `genbot serve --no-executor` and two
`genbot worker`s as real processes; a batch of product_main rows on the demo models; and,
mid-batch, three faults in turn, each once a few more jobs have succeeded:

  cut        every connection to the server cut (pg_terminate_backend: a failover, a proxy)
  restart    `pg_ctl restart -m fast`
  crash      `pg_ctl stop -m immediate`, `down` seconds away — longer than a lease and
             than a statement's patience (10 s) — then started again

then every process is sent SIGTERM. `Drill.run()` returns what happened (`Outcome`): each
job's history from the event log (did every job succeed exactly once?), the attempts
each took, how long after the server came back from the crash the first job completed
and the batch finished, the processes' exit statuses, every traceback or error line in
their logs, and any job left unfinished on a live fleet (stranded). It asserts nothing:
tests/test_db_faults.py and bench/outage_bench.py say what must hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from storage import config as cfg
from storage.db import Database
from storage.queue import Queue, Submission
from storage.workers import Workers
from tests.conftest import PYTHON, ROOT, executor_config, free_port, python_env
from tests.fakes.jobs import example_jobs, with_generate
from tests.fakes.pgcluster import PgCluster
from tests.fakes.service import healthy

FAULTS = ("cut", "restart", "crash")


@dataclass
class Outcome:
    jobs: int
    histories: dict[int, list[str]]  # each job's transitions (progress left out), in order
    attempts: Counter  # jobs by how many attempts they took
    exits: dict[str, int | None]  # process -> exit status after SIGTERM (None: killed)
    tracebacks: list[str]  # "process: line" of every traceback or ERROR in the logs
    stranded: list[str]  # jobs not ended once the fleet had had its time
    recovery: float | None  # seconds from the server back (after the crash) until the
    drained: float | None   # first job completed, and until the batch had ended (polled)
    faults: dict[str, float] = field(default_factory=dict)  # fault -> when (Unix time)
    seconds: float = 0.0  # the whole drill, processes started to processes stopped

    @property
    def each_succeeded_once(self) -> bool:
        return len(self.histories) == self.jobs and all(
            kinds.count("succeeded") == 1 and kinds[-1] == "succeeded"
            and set(kinds) <= {"running", "queued", "succeeded"}
            for kinds in self.histories.values())

    @property
    def reruns(self) -> int:
        """Runs beyond the first: starts of a job after its first (an attempt used, a
        lease lost, or a claim handed back)."""
        return sum(kinds.count("running") - 1 for kinds in self.histories.values())

    @property
    def clean_exits(self) -> bool:
        return all(code == 0 for code in self.exits.values())

    @property
    def ok(self) -> bool:
        return (self.each_succeeded_once and self.clean_exits and not self.tracebacks
                and not self.stranded)

    def problems(self) -> list[str]:
        found = []
        if not self.each_succeeded_once:
            odd = {j: k for j, k in self.histories.items()
                   if k.count("succeeded") != 1 or k[-1] != "succeeded"}
            found.append(f"not each job succeeded exactly once: {odd} of {self.jobs}")
        if not self.clean_exits:
            found.append(f"exits on SIGTERM: {self.exits}")
        found += [f"traceback or error: {line}" for line in self.tracebacks[:10]]
        found += [f"stranded: {what}" for what in self.stranded]
        return found


class Drill:
    def __init__(self, folder: Path, demo_models: Path, *, cluster: PgCluster | None = None,
                 rows: int = 12, steps: int = 6, lease: float = 6.0, heartbeat: float = 1.5,
                 down: float = 12.0, every: int = 2, patience: float = 120.0):
        """`every`: jobs that succeed before each fault. `patience`: how long the fleet has,
        after the last fault, to end the batch before a job left counts as stranded."""
        self.folder, self.demo_models, self.cluster = folder, demo_models, cluster
        self.rows, self.steps, self.lease, self.heartbeat = rows, steps, lease, heartbeat
        self.down, self.every, self.patience = down, every, patience
        self.procs: dict[str, subprocess.Popen] = {}

    async def run(self) -> Outcome:
        own = self.cluster is None
        cluster = self.cluster or PgCluster()
        if own:
            await asyncio.to_thread(cluster.create)
        try:
            return await self.run_on(cluster)
        finally:
            if own:
                await asyncio.to_thread(cluster.cleanup)

    async def run_on(self, pg: PgCluster) -> Outcome:
        name = f"drill_{uuid.uuid4().hex[:8]}"
        await asyncio.to_thread(pg.sql, f"CREATE DATABASE {name}", database="postgres")
        url = pg.url.rsplit("/", 1)[0] + f"/{name}"
        config_file, config = self.configure(url)
        await (await Database(url).open()).close()  # migrated once, before anyone starts
        started = time.monotonic()
        faults: dict[str, float] = {}
        queue = Queue(await Database(url).open(), config[cfg.QueueConfig])
        try:
            self.start("service", "serve", "--no-executor", config_file=config_file)
            await healthy(f"http://127.0.0.1:{config.service.port}", timeout=120)
            for n in (1, 2):
                self.start(f"worker{n}", "worker", config_file=config_file)
            await self.idle_workers(queue, 2)
            template = (await example_jobs(config, "product_main"))[0]
            jobs = [with_generate(template, row=r, steps=self.steps, seed=r)
                    for r in range(2, 2 + self.rows)]
            batch = (await queue.enqueue(Submission("product_main", "drill:ops", jobs))
                     ).batch_id
            for number, fault in enumerate(FAULTS, 1):
                await self.until_succeeded(queue, batch, number * self.every)
                done = await self.succeeded(queue, batch)  # (none can succeed while it is down)
                faults[fault] = await self.inflict(pg, fault)
            stranded, seen = await self.until_ended(queue, batch, done)
        finally:
            self.stop_all()
            seconds = time.monotonic() - started
        try:
            return await self.outcome(queue, batch, faults, stranded, seen, seconds)
        finally:
            await queue.close()

    # --- the fleet ----------------------------------------------------------------------
    def configure(self, url: str) -> tuple[Path, cfg.Config]:
        data = self.folder / "data"
        executor_config(data, self.demo_models)  # links the demo models into the data folder
        path = self.folder / "genbot.toml"
        path.write_text(f"""
[service]
data_dir = "{data}"
port = {free_port()}
[database]
url = "{url}"
[queue]
lease_seconds = {self.lease}
heartbeat_seconds = {self.heartbeat}
poll_interval = 1.0
retry_backoff = 0.0
[executor]
max_batch = 1
drain_seconds = 20
""")
        return path, cfg.load(str(path), env={})

    def start(self, name: str, *command: str, config_file: Path) -> None:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        self.procs[name] = subprocess.Popen(
            [PYTHON, "-m", "bot.cli", *command, "--config", str(config_file)], cwd=ROOT,
            env=python_env(), stdout=log, stderr=subprocess.STDOUT)

    def stop_all(self) -> None:
        """SIGTERM to the workers, then to the service: each drains and exits."""
        for name in sorted(self.procs, key=lambda n: n == "service"):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                proc.returncode = None  # (said as killed)

    async def idle_workers(self, queue: Queue, n: int) -> None:
        workers = Workers.of(queue)
        async with asyncio.timeout(180):
            while len([w for w in await workers.all() if w.state == "idle"]) < n:
                self.check_alive()
                await asyncio.sleep(0.2)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n"
                                   f"{self.log(name)[-3000:]}")

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    # --- the faults ---------------------------------------------------------------------
    async def inflict(self, pg: PgCluster, fault: str) -> float:
        """The fault; when the server answered again (Unix time; the cut: when it was cut)."""
        if fault == "cut":
            await asyncio.to_thread(pg.terminate_connections)
            return time.time()
        if fault == "restart":
            await asyncio.to_thread(pg.restart, "fast")
        else:
            await asyncio.to_thread(pg.stop, "immediate")
            await asyncio.sleep(self.down)
            await asyncio.to_thread(pg.start)
        return pg.ready_at() or time.time()

    async def succeeded(self, queue: Queue, batch: int) -> int:
        progress = await queue.batch_progress(batch)
        return progress.counts.get("succeeded", 0) if progress is not None else 0

    async def until_succeeded(self, queue: Queue, batch: int, n: int) -> None:
        async with asyncio.timeout(self.patience):
            while True:
                with contextlib.suppress(Exception):  # (the drill's own reads may meet a fault)
                    if await self.succeeded(queue, batch) >= n:
                        return
                await asyncio.sleep(0.05)

    async def until_ended(self, queue: Queue, batch: int, before: int
                          ) -> tuple[list[str], tuple[float | None, float | None]]:
        """Once every job has ended: [] and when (Unix time) the drill saw the first job
        succeed past `before` and the last end. Else, after `patience`, the jobs left and
        who holds them. (Seen from here, polling: a job's own finished_at is when its
        executor first tried to record it, which may be during the outage.)"""
        first = None
        deadline = time.monotonic() + self.patience
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                progress = await queue.batch_progress(batch)
                if progress is not None:
                    if first is None and progress.counts.get("succeeded", 0) > before:
                        first = time.time()
                    if progress.done == self.rows:
                        return [], (first, time.time())
            await asyncio.sleep(0.05)
        workers = {w.id: w.state for w in await Workers.of(queue).all()}
        return [f"job {j.id} {j.status}, attempts {j.attempts}, held by {j.lease_owner} "
                f"({workers.get(j.lease_owner or '', 'no executor')})"
                for j in await queue.batch_jobs(batch)
                if j.status in ("queued", "running")], (first, None)

    # --- what happened -------------------------------------------------------------------
    async def outcome(self, queue: Queue, batch: int, faults: dict[str, float],
                      stranded: list[str], seen: tuple[float | None, float | None],
                      seconds: float) -> Outcome:
        rows = await queue.db.fetch(
            "SELECT job_id, kind, at FROM events WHERE batch_id = $1 AND job_id IS NOT NULL "
            "AND kind <> 'progress' ORDER BY seq", batch)
        histories: dict[int, list[str]] = {}
        for r in rows:
            histories.setdefault(r["job_id"], []).append(r["kind"])
        jobs = await queue.batch_jobs(batch)
        back, (first, last) = faults.get("crash"), seen
        return Outcome(
            jobs=self.rows, histories=histories, attempts=Counter(j.attempts for j in jobs),
            exits={name: proc.returncode for name, proc in self.procs.items()},
            tracebacks=[f"{name}: {line}" for name in self.procs
                        for line in self.log(name).splitlines()
                        if "Traceback" in line or " ERROR " in line],
            stranded=stranded, recovery=first - back if first and back else None,
            drained=last - back if last and back else None,
            faults=faults, seconds=seconds)
