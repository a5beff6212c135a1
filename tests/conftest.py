"""Shared fixtures: real SQLite files, real PostgreSQL databases and schemas, a clock tests
can move. The databases tests get start migrated, as copies of one template per test
process (migrated_sqlite, make_migrated_pg_database): migrations cost CPU a test of the
queue need not pay each time.

PostgreSQL comes from $GENBOT_TEST_PG (default: 127.0.0.1:5432, database test).
Tests that need it skip when it is unreachable, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from storage.config import QueueConfig
from storage.db import Database
from storage.queue import Queue

# Some machines (this project's CI among them) set PYTHONDONTWRITEBYTECODE. The suite starts
# hundreds of Python processes (services, executors, CLIs, bench smokes); without cached
# bytecode each compiles every module it imports, torch's included, again. The install
# compiles nothing (README's command: --no-compile): the libraries are compiled as the
# whole suite starts (compile_libraries), genbot's own modules as they are first imported.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist each test process shares the cores with another: torch (here and
    # in the processes tests start, which inherit this) runs on one thread, not one per
    # core; two OpenMP pools spinning on two cores slow each other down many times over.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

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


def pg_database_url(name: str, schema: str | None = None) -> str:
    """PG_URL with another database (and a schema) in it."""
    from urllib.parse import urlsplit, urlunsplit
    parts = urlsplit(PG_URL)
    query = "&".join(q for q in (parts.query, f"schema={schema}" if schema else "") if q)
    return urlunsplit(parts._replace(path=f"/{name}", query=query))


MIGRATED_SCHEMA = "gt_migrated"
_pg_template: list[str] = []  # the migrated template database of this test process


def _make_pg_template() -> str:
    import threading
    name = f"gt_template_{uuid.uuid4().hex[:12]}"  # dropped by _templates
    asyncio.run(_pg_exec(f"CREATE DATABASE {name}"))

    async def migrate() -> None:
        import asyncpg
        conn = await asyncpg.connect(pg_database_url(name).replace("postgres://",
                                                                   "postgresql://", 1))
        try:
            await conn.execute(f"CREATE SCHEMA {MIGRATED_SCHEMA}")
        finally:
            await conn.close()
        await (await Database(pg_database_url(name, MIGRATED_SCHEMA)).open()).close()
    worker = threading.Thread(target=asyncio.run, args=(migrate(),))  # maybe inside a loop
    worker.start()
    worker.join()
    return name


def make_migrated_pg_database() -> tuple[str, str]:
    """An empty PostgreSQL database with every migration applied, in a schema of it: a copy
    of a template this test process migrated once (CREATE DATABASE ... TEMPLATE: tenths of
    a second, where a new schema and its migrations take the best part of one). The same
    tables, rows and schema version as a first open makes. Returns (url, database)."""
    require_pg()
    if not _pg_template:
        _pg_template.append(_make_pg_template())
    name = f"gt_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_exec(f"CREATE DATABASE {name} TEMPLATE {_pg_template[0]}"))
    return pg_database_url(name, MIGRATED_SCHEMA), name


def drop_pg_database(name: str) -> None:
    asyncio.run(_pg_exec(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


_migrated: list[Path] = []  # the SQLite template of this test process, once made


def _make_migrated_template() -> Path:
    import tempfile
    import threading
    folder = Path(tempfile.mkdtemp(prefix="genbot-migrated-"))  # removed by _templates
    template = folder / "genbot.sqlite3"

    async def migrate() -> None:
        await (await _OPEN(Database(f"sqlite:///{template}"))).close()
    # A thread of its own: callers may be inside a running event loop.
    worker = threading.Thread(target=asyncio.run, args=(migrate(),))
    worker.start()
    worker.join()
    assert template.is_file() and not template.with_name(template.name + "-wal").exists()
    return template


def migrated_sqlite(url: str) -> str:
    """Where `url` names a SQLite file not made yet, put there an empty database with every
    migration applied: a copy of one this test process migrated once. Opening it then
    migrates nothing; the tables, rows and schema version are those a first open makes,
    without its half second of CPU per database (hundreds of them in a run). The
    migrations themselves are tested from an empty file in tests/test_migrations.py and
    wherever a test opens a database it did not go through here. Returns `url`."""
    import shutil
    if not url.startswith("sqlite://"):
        return url
    from storage.db import sqlite_path
    path = sqlite_path(url)
    if not path.exists():
        if not _migrated:
            _migrated.append(_make_migrated_template())
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated[0], path)
    return url


_OPEN = Database.open  # the product's own, which migrates a new file step by step


async def _open_migrated(self: Database, *, migrate: bool = True,
                         wait: float | None = None) -> Database:
    """Database.open, where a SQLite file it would make and migrate starts as a copy of the
    migrated template (migrated_sqlite): the same tables, rows and schema version."""
    if migrate and self.dialect == "sqlite":
        migrated_sqlite(self.url)
    return await _OPEN(self, migrate=migrate, wait=wait)


@pytest.fixture(autouse=True)
def _new_databases_start_migrated(request, monkeypatch):
    """In the test process, a SQLite database opened for the first time (by the code under
    test: a CLI's main, an application, a queue over a config's data folder) starts
    migrated, as db_url's do: replaying every migration costs half a second of CPU, and
    the suite opened ~300 new files (a sixth of its CPU). The migrations themselves run
    from empty files in tests/test_migrations.py (marked fresh_database), for tests taking
    empty_db_url, and in every process a test starts (serve, run, worker)."""
    if "empty_db_url" in request.fixturenames or request.node.get_closest_marker(
            "fresh_database"):
        return
    monkeypatch.setattr(Database, "open", _open_migrated)


@pytest.fixture(scope="session", autouse=True)
def _templates():
    """At the end of the run, the migrated templates of this test process go."""
    yield
    import shutil
    for template in _migrated:
        shutil.rmtree(template.parent, ignore_errors=True)
    for name in _pg_template:
        drop_pg_database(name)


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    """A database URL for each backend, empty and migrated: a SQLite file (migrated_sqlite)
    or a PostgreSQL database of its own (make_migrated_pg_database)."""
    if request.param == "sqlite":
        yield migrated_sqlite(f"sqlite:///{tmp_path / 'genbot.sqlite3'}")
    else:
        url, name = make_migrated_pg_database()
        yield url
        drop_pg_database(name)


@pytest.fixture(params=BACKENDS)
def empty_db_url(request, tmp_path):
    """As db_url, but untouched by any migration (a SQLite file not made yet, an empty
    PostgreSQL schema): for tests of the migrations themselves."""
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
def pg_database():
    """An empty PostgreSQL database of its own (no schema given: public), for a test that
    cuts every connection to its database (pg_terminate_backend) while others run beside
    it in theirs. Its URL; dropped afterwards."""
    require_pg()
    name = f"gt_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_exec(f"CREATE DATABASE {name}"))
    yield pg_database_url(name)
    drop_pg_database(name)


@pytest.fixture
def quick_retries(monkeypatch):
    """The outbox retries a failed send after 0.25 s, doubling (the product's first wait is
    2 s): a test of sends refused and tried again waits tenths of seconds, not tens. The
    retries themselves, their order and their count are the product's."""
    from storage.outbox import Outbox
    init = Outbox.__init__

    def quick(self, db, *, backoff: float = 0.25, **kw) -> None:
        init(self, db, backoff=backoff, **kw)
    monkeypatch.setattr(Outbox, "__init__", quick)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder with no config.toml: the CLI runs on built-in defaults, data under ./data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENBOT_CONFIG", raising=False)
    monkeypatch.delenv("GENBOT_DATABASE_URL", raising=False)
    return tmp_path


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

# The demo models are built once for the whole run, under a lock in the folder the run's
# workers share. When the whole suite runs under pytest-xdist, the controller starts the
# build as the session starts, while its workers start and collect (each worker waited up
# to 20 s on the lock at its first test); it takes the lock before anything heavy, so no
# worker builds them too. (A run of a few files builds them only if a test needs them.)
BUILD_DEMOS = """
import sys
from filelock import FileLock
root = sys.argv[1]
with FileLock(root + "/demo-models.lock"):
    from pathlib import Path
    from executor.models import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    demo.build(Path(root) / "demo-models" / "demo")
"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow tests first, each file's in their order: pytest-xdist hands tests out in
    collection order, and a 40-s test (a fleet of processes, a bench) that started last
    kept one worker busy while the others had nothing left to run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# The libraries' modules are byte-compiled once, on every core, before the test processes
# start (the install compiles nothing: README's --no-compile). Otherwise the three workers
# compile the same modules side by side as they collect (lark-oapi alone is 10,700
# files), and that cost the suite's first clean run about 90 s of its 2 cores. Skipped:
# what no test imports (the model families transformers has beyond those genbot loads).
UNIMPORTED = re.compile(r"/site-packages/(pip|setuptools|mypy|mypyc|cfnlint|transformers/"
                        r"models/(?!(auto|clip|clipseg|t5|qwen2|qwen2_vl|qwen2_5_vl|qwen3|"
                        r"mistral|mistral3|pixtral|siglip|llama)/)[^/]+)/")


def compile_libraries() -> None:
    """Byte-compile the installed libraries, once per set of installed distributions."""
    import compileall
    import hashlib
    import sysconfig
    libraries = Path(sysconfig.get_paths()["purelib"])
    installed = hashlib.sha256(" ".join(sorted(
        p.name for p in libraries.glob("*.dist-info"))).encode()).hexdigest()
    stamp = libraries / ".genbot-compiled"
    if stamp.exists() and stamp.read_text() == installed:
        return
    compileall.compile_dir(libraries, quiet=2, workers=0, rx=UNIMPORTED)
    stamp.write_text(installed)


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    if whole and getattr(config.option, "numprocesses", None) and \
            not hasattr(config, "workerinput"):
        compile_libraries()  # (before pytest-xdist starts its workers: its hook runs last)
        root = config._tmp_path_factory.getbasetemp()
        config._demo_build = subprocess.Popen(
            [sys.executable, "-c", BUILD_DEMOS, str(root)], env=python_env(),
            stdout=subprocess.DEVNULL)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (build := getattr(session.config, "_demo_build", None)) is not None:
        build.terminate()  # (done by now, unless the run was cut short)
        build.wait()


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory, worker_id) -> Path:
    """The demo models, built once for the whole run (about 10 s of CPU; nothing
    downloaded): by the controller's build (above) or the first worker to need them,
    while the others wait on the lock (each building its own cost 20 s)."""
    from filelock import FileLock

    from executor.models import demo
    from executor.worker import quiet_libraries
    quiet_libraries()
    root = tmp_path_factory.getbasetemp()
    root = root.parent if worker_id != "master" else root  # (the run's, not the worker's)
    with FileLock(str(root / "demo-models.lock")):
        demo.build(root / "demo-models" / "demo")  # (what is missing; each renamed into place)
    return root / "demo-models" / "demo"


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
        if isinstance(table, list):  # an array of tables: [[webhooks]]
            data[name] = table
        else:
            data.setdefault(name, {}).update(table)
    if db_url:
        data["database"] = {"url": db_url}
    if models:
        data["models"] = models
    return cfg.from_dict(data)

