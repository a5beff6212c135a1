"""Shared fixtures: real SQLite files, real PostgreSQL schemas, a clock tests can move.

PostgreSQL comes from $GENBOT_TEST_PG (default: 127.0.0.1:5432, database test).
Tests that need it skip when it is unreachable, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import pytest

from storage.config import QueueConfig
from storage.db import Database
from storage.queue import Queue

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("GENBOT_TEST_PG", "postgres://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

_pg_reachable: bool | None = None


def pg_available() -> bool:
    global _pg_reachable
    if _pg_reachable is None:
        async def probe() -> bool:
            import asyncpg
            try:
                conn = await asyncpg.connect(PG_URL.replace("postgres://", "postgresql://", 1),
                                             timeout=3)
            except Exception:
                return False
            await conn.close()
            return True
        _pg_reachable = asyncio.run(probe())
    return _pg_reachable


def require_pg() -> None:
    if pg_available():
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required under CI=true but {PG_URL} is unreachable")
    pytest.skip(f"PostgreSQL unreachable at {PG_URL}")


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


async def _pg_exec(sql: str) -> None:
    import asyncpg
    conn = await asyncpg.connect(PG_URL.replace("postgres://", "postgresql://", 1))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def make_pg_schema() -> tuple[str, str]:
    """A fresh schema; returns (url, schema)."""
    require_pg()
    schema = f"gt_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_exec(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}schema={schema}", schema


def drop_pg_schema(schema: str) -> None:
    asyncio.run(_pg_exec(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    """A database URL for each backend: an empty SQLite file, or an empty PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'genbot.sqlite3'}"
    else:
        url, schema = make_pg_schema()
        yield url
        drop_pg_schema(schema)


@pytest.fixture
def pg_url():
    """An empty PostgreSQL schema of its own (skipped without PostgreSQL, except in CI)."""
    require_pg()
    url, schema = make_pg_schema()
    yield url
    drop_pg_schema(schema)


@pytest.fixture
def clock():
    return FakeClock()


def queue_settings(**overrides) -> QueueConfig:
    base = dict(max_queue_size=1000, lease_seconds=10.0, heartbeat_seconds=2.0, max_attempts=3,
                retry_backoff=5.0, retry_backoff_max=20.0, poll_interval=0.2)
    base.update(overrides)
    return QueueConfig(**base)


@pytest.fixture
async def queue(db_url, clock):
    db = await Database(db_url).open()
    queue = Queue(db, queue_settings(), clock=clock)
    yield queue
    await queue.close()


def python_env() -> dict[str, str]:
    """Environment for child Python processes that import the project from the checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


PYTHON = sys.executable


def free_port() -> int:
    """A loopback port nobody listens on (for a service started in a child process)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the executor: demo models built once per run, configs pointing at them ------------

@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> Path:
    """The demo models, built once for the whole run (about 10 s; nothing downloaded)."""
    from executor import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    folder = tmp_path_factory.mktemp("models") / "demo"
    demo.build(folder)
    return folder


def executor_config(data_dir: Path, demo_folder: Path, *, db_url: str | None = None,
                    executor: dict | None = None, queue: dict | None = None,
                    models: dict | None = None, **sections: dict):
    """A config whose data folder links the session's demo models; `sections` add tables
    such as chat={...}."""
    from storage import config as cfg
    (data_dir / "models").mkdir(parents=True, exist_ok=True)
    link = data_dir / "models" / "demo"
    if not link.exists():
        link.symlink_to(demo_folder, target_is_directory=True)
    data = {"service": {"data_dir": str(data_dir)},
            "queue": {"poll_interval": 0.1, "heartbeat_seconds": 1.0, "lease_seconds": 10.0,
                      "retry_backoff": 0.0, **(queue or {})},
            "executor": {"progress_interval": 0.0, **(executor or {})}}
    for name, table in sections.items():
        data.setdefault(name, {}).update(table)
    if db_url:
        data["database"] = {"url": db_url}
    if models:
        data["models"] = models
    return cfg.from_dict(data)
