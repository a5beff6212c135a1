"""A private PostgreSQL cluster for tests that stop, restart or cut the server itself.

The shared server (GENBOT_TEST_PG) serves every other test at once: it must never be
restarted. `PgCluster` makes one of its own under a temp folder with `initdb` (trust
auth, user postgres, fsync off: nothing here needs to survive a power loss), listening
on a free loopback port and on a Unix socket in that folder, and starts, stops and
restarts it with `pg_ctl`. As root (PostgreSQL refuses to run as root) the server runs
as the `postgres` system user where there is one, else `nobody`, owning the folder.

    with PgCluster() as pg:        # initdb + start (about half a second)
        db = Database(pg.url)      # postgres://postgres@127.0.0.1:PORT/genbot
        pg.restart("immediate")    # a crash: no shutdown checkpoint, recovery at start
        pg.terminate_connections() # a failover-like reset: every other backend cut

Without the binaries (`pg_config --bindir`, else /usr/lib/postgresql/*/bin) a test asking
for a cluster skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

STOP_MODES = ("smart", "fast", "immediate")


class PgClusterError(RuntimeError):
    """A cluster program failed; the message has what it printed and the server's log."""


def find_bindir() -> Path | None:
    """Where initdb, pg_ctl and postgres are: `pg_config --bindir`, else the newest of
    /usr/lib/postgresql/*/bin; None when neither has them."""
    candidates: list[str] = []
    if pg_config := shutil.which("pg_config"):
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
            candidates.append(out)
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit()) or (0,)
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for folder in candidates:
        if all((Path(folder) / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    return None


def require_bindir() -> Path:
    """The binaries' folder, or skip (fail under CI=true) without them."""
    found = find_bindir()
    if found is not None:
        return found
    why = "PostgreSQL server binaries (initdb, pg_ctl) not found: no pg_config --bindir " \
          "and no /usr/lib/postgresql/*/bin"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; they are required under CI=true")
    pytest.skip(why)


def _server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: None (ourselves) unless we are root, which initdb and
    postgres refuse; then $GENBOT_TEST_PG_OS_USER, `postgres` or `nobody`."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("GENBOT_TEST_PG_OS_USER"), "postgres", "nobody"):
        if not name:
            continue
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no non-root user (postgres, nobody) to run "
                       "PostgreSQL as: set GENBOT_TEST_PG_OS_USER")


class PgCluster:
    def __init__(self, *, database: str = "genbot", port: int | None = None,
                 bindir: Path | None = None, settings: dict[str, str] | None = None):
        """`database`: made at the first start, what `url` names. `settings`: more
        postgresql.conf lines."""
        self.bindir = bindir or require_bindir()
        self.database = database
        self.port = port or free_port()
        self.settings = settings or {}
        self.folder: Path | None = None
        self.running = False
        self._user = _server_user()

    # --- where -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        assert self.folder is not None, "the cluster is not made yet"
        return self.folder / "data"

    @property
    def log_file(self) -> Path:
        assert self.folder is not None, "the cluster is not made yet"
        return self.folder / "server.log"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except (OSError, AssertionError):
            return ""

    # --- life --------------------------------------------------------------------------
    def __enter__(self) -> PgCluster:
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def create(self) -> None:
        """initdb, start, and make `database`."""
        self.folder = Path(tempfile.mkdtemp(prefix="genbot-pg-"))
        try:
            if self._user is not None:
                os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                      "-E", "UTF8", "--no-sync", "--no-instructions")
            conf = {"listen_addresses": "'127.0.0.1'", "port": str(self.port),
                    "unix_socket_directories": f"'{self.folder}'", "fsync": "off",
                    "full_page_writes": "off",
                    "max_connections": "100", "shared_buffers": "32MB",
                    "log_min_messages": "warning", "log_timezone": "'UTC'",
                    "log_line_prefix": "'%m [%p] '", **self.settings}
            with open(self.data / "postgresql.conf", "a") as f:
                f.write("\n# genbot tests\n")
                f.writelines(f"{k} = {v}\n" for k, v in conf.items())
            self.start()
            if self.database != "postgres":
                self.sql(f'CREATE DATABASE "{self.database}"', database="postgres")
        except BaseException:
            self.cleanup()
            raise

    def start(self) -> None:
        """Start the server; returns once it accepts connections."""
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                  "-l", str(self.log_file))
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """fast: sessions ended, a clean shutdown; immediate: a crash (recovery at the
        next start); smart: waits for the sessions to end on their own."""
        if mode not in STOP_MODES:
            raise ValueError(f"stop mode is one of {STOP_MODES}, not {mode!r}")
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))
        self.running = False

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def ready_at(self) -> float | None:
        """When (Unix time, to the millisecond) the server last said it was ready to
        accept connections: what `pg_ctl start -w` saw up to 0.1 s later."""
        from datetime import UTC, datetime
        stamp = None
        for line in self.log_tail(1_000_000).splitlines():
            if "ready to accept connections" in line:
                stamp = line[:23]  # 2024-01-02 03:04:05.678 (UTC: log_timezone)
        if stamp is None:
            return None
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").replace(
            tzinfo=UTC).timestamp()

    def terminate_connections(self) -> int:
        """pg_terminate_backend of every other client backend (as a failover or a
        proxy's reset does to its clients); returns how many."""
        out = self.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
                       database="postgres")
        return int(out.strip() or 0)

    def sql(self, text: str, *, database: str | None = None) -> str:
        """Run one statement with psql over the Unix socket; its output, unaligned."""
        assert self.folder is not None
        return self._run("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                         "-h", str(self.folder), "-p", str(self.port), "-U", "postgres",
                         "-d", database or self.database, "-c", text)

    def cleanup(self) -> None:
        """Stop the server (immediate: nothing to keep) and remove the folder."""
        if self.folder is None:
            return
        if self.running or (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except (PgClusterError, subprocess.SubprocessError, OSError):
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the server accepts connections (pg_isready)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._run("pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port))
                return
            except PgClusterError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # --- running the tools -----------------------------------------------------------------
    def _run(self, tool: str, *args: str) -> str:
        """One of the cluster's programs, as the server's user; its stdout. Failing, the
        error says what it printed and the server's log."""
        user = self._user
        kw: dict = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = env.get("LC_ALL") or "C.UTF-8"
        if user is not None and tool not in ("psql", "pg_isready"):
            kw = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
            env["HOME"] = str(self.folder)
        try:
            done = subprocess.run([str(self.bindir / tool), *args], capture_output=True,
                                  text=True, timeout=120, env=env, cwd=self.folder or "/",
                                  check=True, **kw)
        except subprocess.CalledProcessError as e:
            raise PgClusterError(f"{tool} {' '.join(args)} exited {e.returncode}: "
                                 f"{(e.stderr or e.stdout or '').strip()[-2000:]}\n"
                                 f"--- server log ---\n{self.log_tail()}") from None
        return done.stdout
