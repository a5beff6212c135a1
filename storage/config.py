"""genbot's configuration: one loader for every layer's sections, read from TOML and the
environment, checked whole at start-up.

Each layer declares its own sections next to its code (storage: service, database,
queue, storage — here; templates: templates, models, comfyui — templates.settings;
executor: executor — executor.settings; bot: intake, chat, api, slack, dingtalk —
bot.settings), each key once, with its default and the reason it exists. The layers'
modules are found through the `genbot.settings` entry points, so this loader knows
none of them by name. Code reads a section by its class: `config[QueueConfig]`.
`config.example.toml` is rendered from the declarations (a test keeps the two
identical), so the documentation cannot drift from the code.

A bad file stops start-up with one line naming the file, the key and what was
expected; nothing starts half-configured.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, TypeVar

from storage import service_links

ENV_PREFIX = "GENBOT_"
# GENBOT_ variables that are not [section] keys: read by genbot's commands and tests.
OTHER_ENV = {"GENBOT_CONFIG", "GENBOT_TOKEN", "GENBOT_SERVER", "GENBOT_SUPERVISOR_PID",
             "GENBOT_TEST_PG", "GENBOT_REALSHEETS"}
CONFIG_ENV = "GENBOT_CONFIG"
DEFAULT_FILE = "config.toml"


class ConfigError(Exception):
    """A configuration problem, already phrased for the person who wrote the file."""


def key(default: Any, why: str, *, min: float | None = None, max: float | None = None,
        choices: tuple[str, ...] | None = None, secret: bool = False,
        expected: str | None = None) -> Any:
    """Declare a config key: its default, a one-line why, and what values are valid."""
    meta = {"why": why, "min": min, "max": max, "choices": choices, "secret": secret,
            "expected": expected}
    return field(default=default, metadata=meta)



S = TypeVar("S")
SECTIONS: dict[str, type] = {}  # [name] -> its dataclass, as the layers declared them
ORDER: dict[str, float] = {}  # [name] -> where it goes in the file


def section(name: str, *, order: float) -> Callable[[type[S]], type[S]]:
    """Register the decorated dataclass as the table [name]. A section may define
    `check(self, source)` for rules between its keys (raise ConfigError)."""
    def register(cls: type[S]) -> type[S]:
        SECTIONS[name], ORDER[name] = cls, order
        return cls
    return register


class Table(Protocol):
    """A section of free-form names (such as [models]): parsed by itself."""

    @classmethod
    def parse(cls, body: Any, source: str, env: Mapping[str, str]) -> Table: ...

    @classmethod
    def env_prefix(cls) -> str: ...

    @classmethod
    def example(cls) -> list[str]: ...


TABLES: dict[str, type[Table]] = {}


T = TypeVar("T", bound=type[Table])


def table(name: str, *, order: float) -> Callable[[T], T]:
    """Register the decorated class as the free-form table [name] (see Table)."""
    def register(cls: T) -> T:
        TABLES[name], ORDER[name] = cls, order
        return cls
    return register


def discover() -> None:
    """Import every layer's settings module (the `genbot.settings` entry points), so
    their sections are registered; the storage sections below always are."""
    for entry in entry_points(group="genbot.settings"):
        entry.load()


@section("service", order=10)
@dataclass(frozen=True)
class ServiceConfig:
    """The service process: where it listens and where it keeps its files."""

    host: str = key("127.0.0.1", "Bind address of the HTTP service; 0.0.0.0 accepts other hosts.")
    port: int = key(8080, "Port of the HTTP service (chat callbacks, API, dashboard, /healthz); "
                    "0 picks a free one (it is logged).", min=0, max=65535)
    data_dir: str = key("./data", "SQLite database, outputs and wake-up sockets live here "
                        "(relative to the config file's folder; ~ is the home folder).")
    log_level: str = key("info", "How much the service and its executors log.",
                         choices=("debug", "info", "warning", "error"))
    log_format: str = key("plain", "Log lines as plain text with key=value fields, or one JSON "
                          "object per line (for a log collector).", choices=("plain", "json"))
    restart_backoff_max: float = key(60.0, "Longest wait, in seconds, before `genbot serve` "
                                     "restarts an executor that died; the wait doubles from 1 s.",
                                     min=0.1, max=3600)

    def check(self, source: str) -> None:
        try:
            home_path(self.data_dir)
        except ValueError as e:
            raise ConfigError(f"{source}: [service] data_dir = {self.data_dir!r}: {e}") from None


def home_path(path: str) -> str:
    """`path` with a leading `~` or `~user` as that home folder — never a folder named
    `~` — or ValueError when there is no such home to read it as."""
    if not path.startswith("~"):
        return path
    try:
        return str(Path(path).expanduser())
    except RuntimeError:  # (pathlib's word for "no such home")
        raise ValueError("~ names a home folder, and this one is unknown here "
                         "(HOME unset or no such user): give the full path") from None


@section("database", order=20)
@dataclass(frozen=True)
class DatabaseConfig:
    ("Where the queue lives. SQLite for one host; PostgreSQL when executors on many hosts "
     "share it.")

    url: str = key("", "Empty: SQLite at data_dir/genbot.sqlite3. Or sqlite:///path/file.sqlite3, "
                   "or postgres://user:password@host:5432/db (env GENBOT_DATABASE_URL).",
                   secret=True)
    pool_size: int = key(10, "PostgreSQL connections per process.", min=2, max=200)
    open_wait: float = key(60.0, "Seconds `genbot serve` and `genbot worker` wait at start for a "
                           "PostgreSQL server not reachable yet (starting, failing over), "
                           "trying again with backoff; then they exit with one line. Other "
                           "commands wait a few seconds.", min=0, max=3600)

    def check(self, source: str) -> None:
        if self.url and not self.url.startswith(("sqlite://", "postgres://", "postgresql://")):
            raise ConfigError(f"{source}: [database] url: expected sqlite:///path or "
                              "postgres://user@host:port/db")


@section("queue", order=30)
@dataclass(frozen=True)
class QueueConfig:
    """The job queue: how much it accepts, how jobs are paced, leased and retried."""

    max_queue_size: int = key(10_000, "Queued+running jobs allowed; a submission that would exceed "
                              "it is refused whole, never truncated.", min=1, max=10_000_000)
    batch_delay: float = key(0.0, "Seconds the executor rests between jobs (lets a hot GPU cool; "
                             "0.5-2 s on consumer cards).", min=0, max=3600)
    parallel_runs: int = key(1, "Jobs one executor runs at once. Only 1 is valid: models stay "
                             "resident on its GPU; add executors (one per GPU) to run more.",
                             min=1, max=1,
                             expected="1 — one executor runs one job at a time so its models "
                             "stay resident on its GPU; to run more jobs at once, run one executor "
                             "per GPU (`genbot worker`)")
    auto_save: bool = key(True, "Keep every finished image in the output folder; false deletes "
                          "a chat batch's images once they and its summary have been delivered "
                          "(the contact sheet and results sheet stay).")
    lease_seconds: float = key(60.0, "A claimed job belongs to its executor this long without a "
                               "heartbeat; then another executor may take it over.",
                               min=2, max=86_400)
    heartbeat_seconds: float = key(10.0, "How often a running executor renews its lease "
                                   "(less than half of lease_seconds).", min=0.1, max=43_200)
    max_attempts: int = key(3, "Runs a job gets (crashes and retryable errors count); then it "
                            "fails with its last error.", min=1, max=100)
    retry_backoff: float = key(10.0, "Seconds before the first retry of a failed job; doubles "
                               "with each further attempt.", min=0, max=86_400)
    retry_backoff_max: float = key(600.0, "Longest wait between retries, in seconds.",
                                   min=0, max=604_800)
    poll_interval: float = key(5.0, "Fallback polling of an idle executor, in seconds; new work "
                               "normally wakes it at once.", min=0.05, max=3600)
    stuck_after: float = key(600.0, "Seconds a leased job may show no sign of life (claimed "
                             "ahead and not started, or running without a progress step) before "
                             "`genbot queue doctor`, /doctor and the API call it stuck.",
                             min=1, max=604_800)
    retention_days: float = key(0.0, "Forget batches finished more than this many days ago: "
                                "their jobs, events and output files (checked daily). 0 keeps "
                                "everything.", min=0, max=36_500)

    def check(self, source: str) -> None:
        if self.heartbeat_seconds * 2 > self.lease_seconds:
            raise ConfigError(
                f"{source}: [queue] heartbeat_seconds = {self.heartbeat_seconds:g}: expected at "
                f"most half of lease_seconds ({self.lease_seconds:g}), so one late heartbeat does "
                "not lose the lease")
        if self.retry_backoff > self.retry_backoff_max:
            raise ConfigError(
                f"{source}: [queue] retry_backoff = {self.retry_backoff:g}: expected at most "
                f"retry_backoff_max ({self.retry_backoff_max:g})")


@section("storage", order=40)
@dataclass(frozen=True)
class StorageConfig:
    """Outputs and stored inputs: a folder, or an S3 bucket many hosts share (docs/deploy.md)."""

    backend: str = key("local", "local: files under data_dir. s3: an S3-compatible bucket, with "
                       "data_dir as each host's cache of it (pip install 'genbot[s3]').",
                       choices=("local", "s3"))
    bucket: str = key("", "The bucket (s3).")
    prefix: str = key("", "Key prefix inside the bucket, e.g. \"genbot/\" (s3).")
    endpoint: str = key("", "The store's URL, e.g. http://minio:9000; empty: AWS S3 (s3).")
    region: str = key("us-east-1", "Region (s3).")
    access_key: str = key("", "Access key id; empty: the usual AWS sources (env, profile, role). "
                          "Env GENBOT_STORAGE_ACCESS_KEY.", secret=True)
    secret_key: str = key("", "Secret access key; env GENBOT_STORAGE_SECRET_KEY.", secret=True)
    attempts: int = key(10, "Tries per upload or download while the store is unavailable, "
                        "backing off up to 20 s between them (about 2 minutes in all).",
                        min=1, max=100)

    def check(self, source: str) -> None:
        if self.backend == "s3" and not self.bucket:
            raise ConfigError(f"{source}: [storage] backend = \"s3\": expected bucket too")





# --- the whole configuration ---------------------------------------------------------------

class Config:
    """Every section, as its layer declared it: `config[QueueConfig]`. Where the values
    came from (`source`, for messages) and the folder relative paths are read from."""

    def __init__(self, values: dict[type, Any], *, source: str = "built-in defaults",
                 base_dir: str = "."):
        self._values = values
        self.source, self.base_dir = source, base_dir

    def __getitem__(self, kind: type[S]) -> S:
        try:
            return self._values[kind]
        except KeyError:
            raise KeyError(f"{kind.__name__} is not a registered section") from None

    def __getattr__(self, name: str) -> Any:
        """A section by its table's name (`config` dot `queue`): for reading in tests and
        scripts; product code reads `config[QueueConfig]`, which is typed."""
        kind = SECTIONS.get(name) or TABLES.get(name)
        if kind is None or kind not in self.__dict__.get("_values", {}):
            raise AttributeError(name)
        return self._values[kind]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and other._values == self._values

    __hash__ = None  # type: ignore[assignment]

    def replaced(self, kind: type[S], **changes: Any) -> Config:
        """A copy with some keys of one section changed (checked as in a file)."""
        values = dict(self._values)
        values[kind] = dataclasses.replace(self._values[kind], **changes)
        return Config(values, source=self.source, base_dir=self.base_dir)

    @property
    def data_dir(self) -> Path:
        return self.path(self[ServiceConfig].data_dir)

    @property
    def database_url(self) -> str:
        return self[DatabaseConfig].url or f"sqlite:///{self.data_dir / 'genbot.sqlite3'}"

    def path(self, relative: str) -> Path:
        """A path the config names, read from the config file's folder; `~` is the
        home folder (checked at load: `home_path`)."""
        return (Path(self.base_dir) / home_path(relative)).resolve()


def sections() -> dict[str, type]:
    """Section name -> its dataclass, in file order (tables not included)."""
    discover()
    return {name: SECTIONS[name] for name in sorted(SECTIONS, key=ORDER.__getitem__)}


def tables() -> dict[str, type[Table]]:
    discover()
    return {name: TABLES[name] for name in sorted(TABLES, key=ORDER.__getitem__)}


def _expected(f: dataclasses.Field) -> str:
    m = f.metadata
    if m["expected"]:
        return m["expected"]
    kind = _type_of(f)
    if m["choices"]:
        return "one of " + ", ".join(f'"{c}"' for c in m["choices"])
    noun = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            list: "a list of strings"}[kind]
    if m["min"] is not None and m["max"] is not None:
        return f"{noun} from {_num(m['min'])} to {_num(m['max'])}"
    if m["min"] is not None:
        return f"{noun} of at least {_num(m['min'])}"
    return noun


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else f"{x}"


def _type_of(f: dataclasses.Field) -> type:
    return {"int": int, "float": float, "bool": bool, "str": str, "list[str]": list}[str(f.type)]


def _is_kind(value: Any, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):  # TOML true is not the integer 1
        return kind is bool and isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float))
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, kind)


def _check_value(f: dataclasses.Field, value: Any, where: str) -> Any:
    kind, m = _type_of(f), f.metadata
    ok = _is_kind(value, kind)
    if ok and kind in (int, float):
        ok = (m["min"] is None or value >= m["min"]) and (m["max"] is None or value <= m["max"])
    if ok and m["choices"]:
        ok = value in m["choices"]
    if not ok:
        shown = "***" if m["secret"] else _toml_value(value) if _tomlable(value) else repr(value)
        raise ConfigError(f"{where} = {shown}: expected {_expected(f)}")
    return float(value) if kind is float else tuple(value) if kind is list else value


def _tomlable(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str, list, tuple))


def _parse_env(f: dataclasses.Field, raw: str, name: str) -> Any:
    kind = _type_of(f)
    try:
        if kind is bool:
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        if kind is list:  # comma-separated
            return [part.strip() for part in raw.split(",") if part.strip()]
    except ValueError:
        shown = "***" if f.metadata["secret"] else repr(raw)
        raise ConfigError(f"environment {name}={shown}: expected {_expected(f)}") from None
    return raw


def env_name(section: str, key: str, spelling: str = "_") -> str:
    """The variable that sets [section] key: GENBOT_SECTION_KEY, or with "__" between
    the two (GENBOT_SERVICE__HOST: a spelling no Kubernetes service link can take)."""
    return f"{ENV_PREFIX}{section}{spelling}{key}".upper()


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" — did you mean {close[0]}?" if close else ""


def locate(cli_path: str | None = None,
           env: Mapping[str, str] | None = None) -> Path | None:
    """The file to read: --config, else $GENBOT_CONFIG, else ./config.toml if present."""
    env = os.environ if env is None else env
    for chosen, label in ((cli_path, "--config"), (env.get(CONFIG_ENV), CONFIG_ENV)):
        if chosen:
            path = Path(chosen)
            if not path.is_file():
                raise ConfigError(f"{path}: config file not found (named by {label})")
            return path
    default = Path(DEFAULT_FILE)
    return default if default.is_file() else None


def load(cli_path: str | None = None, env: dict[str, str] | None = None) -> Config:
    """Read and validate the whole configuration, or raise ConfigError with one line."""
    env = dict(os.environ if env is None else env)
    path = locate(cli_path, env)
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot read: {e}") from None
    return from_dict(data, source=str(path) if path else "built-in defaults",
                     base_dir=str(path.parent) if path else ".", env=env)


def from_dict(data: dict[str, Any], *, source: str = "built-in defaults", base_dir: str = ".",
              env: dict[str, str] | None = None) -> Config:
    env = {} if env is None else env
    known, free = sections(), tables()
    values: dict[str, Any] = {}
    data = dict(data)
    parsed_tables = {cls: cls.parse(data.pop(name, {}), source, env)
                     for name, cls in free.items()}
    for name, body in data.items():
        if name not in known:
            raise ConfigError(f"{source}: unknown section "
                              f"[{name}]{_did_you_mean(name, [*known, *free])}")
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {name} must be a [{name}] table")
        fields = {f.name: f for f in dataclasses.fields(known[name])}
        checked = {}
        for key_name, value in body.items():
            if key_name not in fields:
                hint = _did_you_mean(key_name, fields)
                others = [s for s, cls in known.items() if s != name and
                          key_name in {f.name for f in dataclasses.fields(cls)}]
                if not hint and others:
                    hint = f" — it belongs in [{others[0]}]"
                raise ConfigError(f"{source}: unknown key [{name}] {key_name}{hint}")
            checked[key_name] = _check_value(fields[key_name], value,
                                             f"{source}: [{name}] {key_name}")
        values[name] = checked
    settable = {env_name(name, f.name, spelling)
                for name, cls in known.items() for f in dataclasses.fields(cls)
                for spelling in ("_", "__")}
    prefixes = tuple(cls.env_prefix() for cls in free.values())
    for var in env:
        if var.startswith(ENV_PREFIX) and var not in settable | OTHER_ENV \
                and not var.startswith(prefixes) \
                and not service_links.ignored(var, env, setting=False):
            raise ConfigError(f"environment {var}: not a genbot setting"
                              f"{_did_you_mean(var, sorted(settable))} (a typo is ignored "
                              "silently otherwise; unset it)")
    for name, cls in known.items():
        for f in dataclasses.fields(cls):
            for var in (env_name(name, f.name), env_name(name, f.name, "__")):  # "__" wins
                if var in env and not service_links.ignored(var, env, setting=True):
                    parsed = _parse_env(f, env[var], var)
                    values.setdefault(name, {})[f.name] = _check_value(
                        f, parsed, f"environment {var}")
    made = {cls: cls(**values.get(name, {})) for name, cls in known.items()}
    for made_section in made.values():
        check = getattr(made_section, "check", None)
        if check is not None:
            check(source)
    return Config({**made, **parsed_tables}, source=source, base_dir=base_dir)


def _toml_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


def render_example() -> str:
    """config.example.toml, generated from every layer's declarations."""
    out = ["# genbot configuration. Every key, its default, and why it exists.",
           "# Copy to config.toml (or pass --config / set GENBOT_CONFIG). Any key can also",
           "# come from the environment as GENBOT_<SECTION>_<KEY> (or GENBOT_<SECTION>__<KEY>),",
           "# e.g. GENBOT_DATABASE_URL; use that for secrets. Generated from each layer's",
           "# settings (storage/config.py, templates/settings.py, executor/settings.py,",
           "# bot/settings.py): edit there.", ""]
    known, free = sections(), tables()
    for name in sorted([*known, *free], key=ORDER.__getitem__):
        if name in free:
            out += free[name].example()
            out.append("")
            continue
        cls = known[name]
        assert cls.__doc__ is not None  # dataclasses always have one; ours are written
        out.append(f"# {cls.__doc__.strip()}")
        out.append(f"[{name}]")
        for f in dataclasses.fields(cls):
            out.append(f"# {f.metadata['why']}")
            out.append(f"{f.name} = {_toml_value(f.default)}")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":  # (as storage.config, the module the layers register into)
    from storage import config as registry
    print(registry.render_example(), end="")
