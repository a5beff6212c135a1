"""genbot's configuration: one schema, read from TOML and the environment, checked whole
at start-up.

Every key is declared once, here, with its default and the reason it exists.
`config.example.toml` is rendered from these declarations (a test keeps the two
identical), so the documentation cannot drift from the code.

A bad file stops start-up with one line naming the file, the key and what was
expected; nothing starts half-configured.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

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


@dataclass(frozen=True)
class ServiceConfig:
    """The service process: where it listens and where it keeps its files."""

    host: str = key("127.0.0.1", "Bind address of the HTTP service; 0.0.0.0 accepts other hosts.")
    port: int = key(8080, "Port of the HTTP service (chat callbacks, API, dashboard, /healthz); "
                    "0 picks a free one (it is logged).", min=0, max=65535)
    data_dir: str = key("./data", "SQLite database, outputs and wake-up sockets live here "
                        "(relative to the config file's folder).")
    log_level: str = key("info", "How much the service and its executors log.",
                         choices=("debug", "info", "warning", "error"))
    log_format: str = key("plain", "Log lines as plain text with key=value fields, or one JSON "
                          "object per line (for a log collector).", choices=("plain", "json"))


@dataclass(frozen=True)
class DatabaseConfig:
    ("Where the queue lives. SQLite for one host; PostgreSQL when executors on many hosts "
     "share it.")

    url: str = key("", "Empty: SQLite at data_dir/genbot.sqlite3. Or sqlite:///path/file.sqlite3, "
                   "or postgres://user:password@host:5432/db (env GENBOT_DATABASE_URL).",
                   secret=True)
    pool_size: int = key(10, "PostgreSQL connections per process.", min=2, max=200)


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
    retention_days: float = key(0.0, "Forget batches finished more than this many days ago: "
                                "their jobs, events and output files (checked daily). 0 keeps "
                                "everything.", min=0, max=36_500)


@dataclass(frozen=True)
class TemplatesConfig:
    """Workflow templates: JSON files, checked at start-up and on demand."""

    dir: str = key("", "Folder of *.json templates. Empty: the templates/ shipped with genbot.")


@dataclass(frozen=True)
class IntakeConfig:
    """Spreadsheets and the images their rows name: limits and where images may come from."""

    max_file_mb: float = key(20.0, "Largest sheet accepted, in MB.", min=0.01, max=1024)
    max_unpacked_mb: float = key(200.0, "Largest uncompressed .xlsx/.ods content, in MB; a "
                                 "zip bomb is refused before it is parsed.", min=1, max=16_384)
    max_rows: int = key(10_000, "Rows one submission may have.", min=1, max=1_000_000)
    max_problems_shown: int = key(20, "Problems listed in a validation report; the rest are "
                                  "counted (\"…and 23 more\").", min=1, max=1000)
    assets_dir: str = key("./assets", "Image cells may name files under this folder (relative "
                          "to the config file's folder).")
    url_allowlist: list[str] = key((), "Hosts image cells may download from over http(s), e.g. "
                                   "[\"cdn.example.com\"]. Empty: no downloads.")
    allow_private_urls: bool = key(False, "Let allow-listed hosts resolve to private or "
                                   "loopback addresses (off: no requests into your network).")
    max_image_mb: float = key(20.0, "Largest image file an image cell may name, in MB.",
                              min=0.01, max=1024)
    max_image_pixels: int = key(50_000_000, "Largest image, in pixels (decompression-bomb "
                                "guard).", min=1, max=1_000_000_000)


@dataclass(frozen=True)
class ChatConfig:
    """What people reach through Slack, DingTalk or the terminal."""

    inbox_keep_hours: float = key(72.0, "How long a file sent to the bot stays available for a "
                                  "later /gen to name it, in hours.", min=0.1, max=8760)
    default_role: str = key("submitter", "Role of everyone not listed below and not given one by "
                            "/grant; none: they may only ask for /help.",
                            choices=("submitter", "viewer", "none"))
    admins: list[str] = key((), "Admins, as platform:user id, e.g. [\"slack:U024BE7LH\", "
                            "\"dingtalk:manager4220\"]. Always admins; /revoke cannot demote them.")
    submitters: list[str] = key((), "Submitters (platform:user id), when default_role is lower.")
    viewers: list[str] = key((), "Viewers (platform:user id): status only.")
    conversations: list[str] = key((), "Conversations the bot serves, as platform:conversation "
                                   "id. Empty: every conversation it is in.")
    submitter_max_rows: int = key(2000, "Rows one submission of a submitter may have (admins: "
                                  "[intake] max_rows).", min=1, max=1_000_000)
    submitter_max_queued: int = key(5000, "Queued and running jobs one submitter may have.",
                                    min=1, max=10_000_000)
    submitter_per_minute: int = key(5, "Submissions one submitter may make in a minute.",
                                    min=1, max=10_000)
    language: str = key("en", "Language of replies where neither languages below, the person's "
                        "own locale, nor the platform's default (DingTalk: zh) says otherwise.",
                        choices=("en", "zh"))
    languages: list[str] = key((), "Languages by person, conversation, workspace or platform, the "
                               "most specific winning: [\"slack:U024BE7LH=en\", "
                               "\"slack:C0123=zh\", \"slack:T0456=zh\", \"dingtalk=en\"].")
    timezone: str = key("UTC", "Time zone (IANA name, e.g. Asia/Shanghai) of times typed in "
                        "/gen --at, where the platform does not tell the person's own.")
    progress_every: float = key(3.0, "Least seconds between two edits of a batch's progress "
                                "message.", min=0.5, max=3600)
    delivery_attempts: int = key(12, "Tries to post one message (backing off, honouring "
                                 "Retry-After) before it is recorded as failed and reported.",
                                 min=1, max=1000)
    digest: str = key("", "Where a daily digest of the last 24 hours goes, as "
                      "platform:conversation (e.g. \"slack:C0123\"); empty: no digest.")
    digest_at: str = key("09:00", "When the digest is posted: HH:MM in [chat] timezone.")

    def language_at(self, *places: str | None) -> str | None:
        """The language [chat] languages gives the first of `places` it names."""
        given = {where: lang for where, _, lang in (e.rpartition("=") for e in self.languages)}
        return next((given[p] for p in places if p and p in given), None)


@dataclass(frozen=True)
class SlackConfig:
    """The Slack bot (docs/slack.md). Off until bot_token is set."""

    bot_token: str = key("", "Bot token (xoxb-…) of the Slack app; env GENBOT_SLACK_BOT_TOKEN.",
                         secret=True)
    signing_secret: str = key("", "Signing secret of the Slack app: every request to "
                              "/slack/events is checked with it.", secret=True)
    app_token: str = key("", "App-level token (xapp-…, scope connections:write): set it to use "
                         "Socket Mode, for a bot with no public URL (behind a firewall).",
                         secret=True)
    api_url: str = key("https://slack.com/api/", "Slack Web API base URL (a proxy, or a test "
                       "server).")
    channels: list[str] = key((), "Channel ids the bot serves, e.g. [\"C0123ABCD\"]; direct "
                              "messages always. Empty: every channel it is invited to.")


@dataclass(frozen=True)
class ApiConfig:
    """The REST API under /api/v1 (docs/api.md)."""

    tokens: list[str] = key((), "Bearer tokens, as \"TOKEN=USER\": a request with the token acts "
                            "as api:USER, whose role [chat] gives (admins = [\"api:ci\"]). "
                            "Empty: the API is closed. Use env GENBOT_API_TOKENS for real ones.",
                            secret=True)
    session_hours: float = key(12.0, "How long a dashboard sign-in lasts (a session cookie; "
                               "removing the token from `tokens` ends it at once).")
    session_secret: str = key("", "Key that signs dashboard sessions; empty: a random one kept "
                              "in data_dir/session.key. Env GENBOT_API_SESSION_SECRET.",
                              secret=True)
    metrics_token: str = key("", "Bearer token Prometheus must send to read /metrics "
                             "(authorization: credentials in its scrape config); empty: "
                             "/metrics is open, so keep the port private. Env "
                             "GENBOT_API_METRICS_TOKEN.", secret=True)
    max_body_mb: float = key(0.0, "Largest request body the API reads (a sheet and its "
                             "pictures), in MB; 0: [intake] max_file_mb plus 10 pictures at "
                             "[intake] max_image_mb.", min=0, max=65536)


@dataclass(frozen=True)
class DingTalkConfig:
    """The DingTalk bot (docs/dingtalk.md). Off until app_key is set."""

    app_key: str = key("", "AppKey (Client ID) of the DingTalk internal app whose robot this is.")
    app_secret: str = key("", "AppSecret (Client Secret); env GENBOT_DINGTALK_APP_SECRET.",
                          secret=True)
    robot_code: str = key("", "The robot's code; empty: the AppKey (as DingTalk sets it by "
                          "default).")
    mode: str = key("stream", "stream: genbot connects out to DingTalk (no public URL needed); "
                    "http: DingTalk posts to /dingtalk/callback.", choices=("stream", "http"))
    api_url: str = key("https://api.dingtalk.com", "DingTalk OpenAPI base URL (a proxy, or a "
                       "test server).")
    oapi_url: str = key("https://oapi.dingtalk.com", "DingTalk legacy API base URL (media "
                        "upload).")
    card_template_id: str = key("", "An interactive card template with a `text` variable: "
                                "progress is one card updated in place. Empty: milestone "
                                "messages at 25/50/75%.")
    platform_admins: bool = key(False, "DingTalk's own admins (isAdmin) are genbot admins.")


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


@dataclass(frozen=True)
class ExecutorConfig:
    """The GPU executor: its device, how it batches, caches models, and guards against leaks."""

    device: str = key("auto", "auto picks cuda, then mps, then cpu; or name one: cpu, cuda, "
                      "cuda:1, mps.")
    dtype: str = key("auto", "auto: bfloat16 on CUDA GPUs that support it, else float16; "
                     "float16 on mps; float32 on the CPU.",
                     choices=("auto", "float32", "float16", "bfloat16"))
    max_batch: int = key(4, "Images one pipeline call may make for jobs of one batch with the same "
                         "shape (model, size, steps, LoRAs). 1 turns micro-batching off.",
                         min=1, max=64)
    finish_threads: int = key(2, "Threads that finish jobs beside the GPU (pillow ops, encoding, "
                              "saving, uploading) while it makes the next image. 0: finish "
                              "each job on the GPU's own thread before the next one starts.",
                              min=0, max=16)
    models: list[str] = key((), "Models (names from [models]) this executor takes jobs for, e.g. "
                            "[\"sdxl\"] on a small GPU; empty: every model whose files fit its "
                            "device memory. Jobs for other models are left to other executors.")
    vram_budget_gb: float = key(0.0, "Memory the model cache may keep on the device; past it the "
                                "least recently used model moves to CPU RAM. 0: 85% of the "
                                "device's memory (no limit on the CPU).", min=0, max=4096)
    ram_budget_gb: float = key(16.0, "CPU RAM for models moved off the device; past it the least "
                               "recently used is dropped.", min=0, max=4096)
    job_timeout: float = key(900.0, "Seconds a job may run before it is stopped and failed.",
                             min=1, max=86_400)
    progress_interval: float = key(1.0, "Least seconds between two progress events of a job "
                                   "(the first and last step always go out).", min=0, max=600)
    memory_drift_mb: float = key(2048.0, "Growth of memory in use between jobs, beyond what it was "
                                 "after the models loaded, that drops and rebuilds the model "
                                 "cache (a leak guard). 0: off.", min=0, max=1_000_000)
    recycle_after_jobs: int = key(0, "Restart the executor process after this many jobs "
                                  "(0: never); the service starts a fresh one at once.",
                                  min=0, max=10_000_000)
    recycle_on_drift: bool = key(False, "On memory drift restart the executor process instead of "
                                 "rebuilding the cache.")
    restart_backoff_max: float = key(60.0, "Longest wait, in seconds, before the service restarts "
                                     "an executor that died; the wait doubles from 1 s.",
                                     min=0.1, max=3600)
    upscaler: str = key("", "Model (from [models]) the upscale op uses when a template names none. "
                        "Empty: high-quality resampling (Lanczos).")
    font: str = key("", "TrueType/OpenType font for text and watermarks. Empty: the bundled "
                    "WenQuanYi Micro Hei, which covers Chinese and Latin.")


@dataclass(frozen=True)
class ComfyUIConfig:
    """ComfyUI servers a team already runs: genbot queues, they generate (docs/comfyui.md)."""

    servers: list[str] = key((), "ComfyUI servers (http://host:8188) for templates with "
                             "\"engine\": \"comfyui\"; genbot serve runs one executor for each. "
                             "Empty: none (genbot worker --comfyui URL runs one anywhere).")
    connect_timeout: float = key(10.0, "Seconds to connect to a server before it counts as down.",
                                 min=0.1, max=600)
    backoff_max: float = key(60.0, "Longest wait, in seconds, between tries to reach a server "
                             "that is down; the wait doubles from 1 s.", min=0.1, max=3600)
    free_after_jobs: int = key(0, "Ask the server to unload its models and free memory (POST "
                               "/free) after this many jobs (0: never; [executor] "
                               "recycle_after_jobs applies too).", min=0, max=10_000_000)


@dataclass(frozen=True)
class ModelEntry:
    """A logical model name -> where its weights are, and defaults a sheet may leave empty."""

    path: str  # a diffusers folder, a .safetensors file, or "demo:<name>" (built by genbot)
    steps: int | None = None  # None: the model's own (a demo's genbot.json, else 30)
    guidance: float | None = None
    size: int | None = None  # None: the model's native resolution
    # For a single-file checkpoint: a diffusers folder of the same family to take the
    # configuration (and tokenizers) from. None: genbot's own for the family it detects
    # (executor.families); needed only for what genbot does not ship (a ControlNet file).
    config: str | None = None


# The demo models `genbot models demo` builds (tiny, random weights; images are noise).
# The shipped templates name these, so a fresh install runs every template on a CPU.
DEMO_MODELS = {
    "sd15": ModelEntry("demo:sd15"),
    "sdxl": ModelEntry("demo:sdxl"),
    "canny_sd15": ModelEntry("demo:canny_sd15"),
    "canny_sdxl": ModelEntry("demo:canny_sdxl"),
    "walnut": ModelEntry("demo:walnut"),
    "brushed_steel": ModelEntry("demo:brushed_steel"),
    "upscaler": ModelEntry("demo:upscaler"),  # used when [executor] upscaler = "upscaler"
}
MODEL_KEYS = ("path", "steps", "guidance", "size", "config")


@dataclass(frozen=True)
class Config:
    service: ServiceConfig = field(default_factory=ServiceConfig)
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    templates: TemplatesConfig = field(default_factory=TemplatesConfig)
    intake: IntakeConfig = field(default_factory=IntakeConfig)
    chat: ChatConfig = field(default_factory=ChatConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    dingtalk: DingTalkConfig = field(default_factory=DingTalkConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    comfyui: ComfyUIConfig = field(default_factory=ComfyUIConfig)
    models: dict[str, ModelEntry] = field(default_factory=lambda: dict(DEMO_MODELS),
                                          metadata={"table": True})
    # Where the values came from, for messages; the folder relative paths are resolved against.
    source: str = field(default="built-in defaults", metadata={"internal": True})
    base_dir: str = field(default=".", metadata={"internal": True})

    @property
    def data_dir(self) -> Path:
        return (Path(self.base_dir) / self.service.data_dir).resolve()

    @property
    def templates_dir(self) -> Path:
        if not self.templates.dir:
            return Path(__file__).resolve().parent.parent / "templates"
        return (Path(self.base_dir) / self.templates.dir).resolve()

    @property
    def assets_dir(self) -> Path:
        return (Path(self.base_dir) / self.intake.assets_dir).resolve()

    @property
    def models_dir(self) -> Path:
        """Where `genbot models demo` builds the demo models."""
        return self.data_dir / "models"

    def model_path(self, entry: ModelEntry) -> Path:
        if entry.path.startswith("demo:"):
            return self.models_dir / "demo" / entry.path.removeprefix("demo:")
        return (Path(self.base_dir) / entry.path).resolve()

    def demo_models(self, names: Any) -> list[str]:
        """Which of these model names are genbot's demo models (their images are noise)."""
        return sorted({n for n in names if n in self.models
                       and self.models[n].path.startswith("demo:")})

    @property
    def database_url(self) -> str:
        return self.database.url or f"sqlite:///{self.data_dir / 'genbot.sqlite3'}"


def sections() -> dict[str, type]:
    """Section name -> its dataclass, in file order."""
    # A section field's default factory is its dataclass.
    return {f.name: cast(type, f.default_factory) for f in dataclasses.fields(Config)
            if not f.metadata.get("internal") and not f.metadata.get("table")}


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


def _did_you_mean(word: str, options) -> str:
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
    known = sections()
    values: dict[str, Any] = {}
    data = dict(data)
    models = dict(DEMO_MODELS)
    models.update(_models(data.pop("models", {}), source))
    for name, raw in env.items():
        if name.startswith(f"{ENV_PREFIX}MODELS_"):
            model = name.removeprefix(f"{ENV_PREFIX}MODELS_").lower()
            models[model] = _model_entry(model, raw, f"environment {name}")
    for section, body in data.items():
        if section not in known:
            raise ConfigError(f"{source}: unknown section "
                              f"[{section}]{_did_you_mean(section, [*known, 'models'])}")
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a [{section}] table")
        fields = {f.name: f for f in dataclasses.fields(known[section])}
        checked = {}
        for name, value in body.items():
            if name not in fields:
                hint = _did_you_mean(name, fields)
                others = [s for s, cls in known.items() if s != section and
                          name in {f.name for f in dataclasses.fields(cls)}]
                if not hint and others:
                    hint = f" — it belongs in [{others[0]}]"
                raise ConfigError(f"{source}: unknown key [{section}] {name}{hint}")
            checked[name] = _check_value(fields[name], value, f"{source}: [{section}] {name}")
        values[section] = checked
    settable = {f"{ENV_PREFIX}{section}_{f.name}".upper()
                for section, cls in known.items() for f in dataclasses.fields(cls)}
    for name in env:
        if name.startswith(ENV_PREFIX) and name not in settable | OTHER_ENV \
                and not name.startswith(f"{ENV_PREFIX}MODELS_"):
            raise ConfigError(f"environment {name}: not a genbot setting"
                              f"{_did_you_mean(name, sorted(settable))} (a typo is ignored "
                              "silently otherwise; unset it)")
    for section, cls in known.items():
        for f in dataclasses.fields(cls):
            name = f"{ENV_PREFIX}{section}_{f.name}".upper()
            if name in env:
                parsed = _parse_env(f, env[name], name)
                values.setdefault(section, {})[f.name] = _check_value(
                    f, parsed, f"environment {name}")
    config = Config(**{s: known[s](**values.get(s, {})) for s in known}, models=models,
                    source=source, base_dir=base_dir)
    _check_relations(config)
    return config


def _models(body: Any, source: str) -> dict[str, ModelEntry]:
    if not isinstance(body, dict):
        raise ConfigError(f"{source}: models must be a [models] table of name = \"path\"")
    return {name: _model_entry(name, value, f"{source}: [models] {name}")
            for name, value in body.items()}


def _model_entry(name: str, value: Any, where: str) -> ModelEntry:
    if not name or not name.replace("_", "a").replace("-", "a").isalnum():
        raise ConfigError(f"{where}: a model name is letters, digits, _ and -")
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: expected "path" or {{ path = "...", steps = 30 }}')
    for k in value:
        if k not in MODEL_KEYS:
            raise ConfigError(f"{where}: unknown key {k}{_did_you_mean(k, MODEL_KEYS)}; "
                              f"expected {', '.join(MODEL_KEYS)}")
    path = value.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{where}: path: expected a diffusers folder, a .safetensors file "
                          'or "demo:<name>"')
    # key -> (the number types it takes, lowest, highest); type[float] admits int
    checks: dict[str, tuple[type[float] | tuple[type[float], ...], int, int]] = {
        "steps": (int, 1, 200), "guidance": ((int, float), 0, 50), "size": (int, 64, 8192)}
    for k, (kind, low, high) in checks.items():
        v = value.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kind)
                              or not low <= v <= high):
            raise ConfigError(f"{where}: {k} = {v!r}: expected a number from {low} to {high}")
    guidance = value.get("guidance")
    config = value.get("config")
    if config is not None and (not isinstance(config, str) or not config.strip()):
        raise ConfigError(f"{where}: config: expected the path of a diffusers folder")
    return ModelEntry(path, value.get("steps"), None if guidance is None else float(guidance),
                      value.get("size"), config)


def _check_relations(config: Config) -> None:
    q = config.queue
    if q.heartbeat_seconds * 2 > q.lease_seconds:
        raise ConfigError(
            f"{config.source}: [queue] heartbeat_seconds = {q.heartbeat_seconds:g}: expected at "
            f"most half of lease_seconds ({q.lease_seconds:g}), so one late heartbeat does not "
            "lose the lease")
    if q.retry_backoff > q.retry_backoff_max:
        raise ConfigError(
            f"{config.source}: [queue] retry_backoff = {q.retry_backoff:g}: expected at most "
            f"retry_backoff_max ({q.retry_backoff_max:g})")
    servers = config.comfyui.servers
    for url in servers:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
            raise ConfigError(f'{config.source}: [comfyui] servers: "{url}": expected a ComfyUI '
                              'server\'s address such as "http://127.0.0.1:8188"')
    if len({u.rstrip("/") for u in servers}) != len(servers):
        raise ConfigError(f"{config.source}: [comfyui] servers: a server is named twice (one "
                          "executor per server: it gets one prompt at a time)")
    chat = config.chat
    for entry in chat.languages:
        where, _, lang = entry.rpartition("=")
        if not where or lang not in ("en", "zh"):
            raise ConfigError(f'{config.source}: [chat] languages: "{entry}": expected '
                              '"platform:id=en" or "platform:id=zh" (or "platform=zh")')
    try:
        from zoneinfo import ZoneInfo
        ZoneInfo(chat.timezone)
    except (ValueError, KeyError, OSError):
        raise ConfigError(f'{config.source}: [chat] timezone = "{chat.timezone}": expected an '
                          "IANA time zone such as UTC or Asia/Shanghai") from None
    if chat.digest and not re.fullmatch(r"[a-z]+:\S+", chat.digest):
        raise ConfigError(f'{config.source}: [chat] digest = "{chat.digest}": expected '
                          '"platform:conversation", e.g. "slack:C0123"')
    if not re.fullmatch(r"([01]?\d|2[0-3]):[0-5]\d", chat.digest_at):
        raise ConfigError(f'{config.source}: [chat] digest_at = "{chat.digest_at}": expected a '
                          'time of day as HH:MM, e.g. "09:00"')
    slack = config.slack
    if slack.bot_token and not (slack.signing_secret or slack.app_token):
        raise ConfigError(f"{config.source}: [slack] bot_token is set: expected signing_secret "
                          "(for /slack/events) or app_token (for Socket Mode) too")
    for entry in config.api.tokens:
        token, _, user = entry.partition("=")
        if len(token) < 16 or not user or ":" in user:
            raise ConfigError(f"{config.source}: [api] tokens: expected \"TOKEN=USER\" with a "
                              "token of at least 16 characters and a user name without ':'")
    if config.storage.backend == "s3" and not config.storage.bucket:
        raise ConfigError(f"{config.source}: [storage] backend = \"s3\": expected bucket too")
    if config.dingtalk.app_key and not config.dingtalk.app_secret:
        raise ConfigError(f"{config.source}: [dingtalk] app_key is set: expected app_secret too")
    url = config.database.url
    if url and not url.startswith(("sqlite://", "postgres://", "postgresql://")):
        raise ConfigError(f"{config.source}: [database] url: expected sqlite:///path or "
                          "postgres://user@host:port/db")


def _toml_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


def render_example() -> str:
    """config.example.toml, generated from the declarations above."""
    out = ["# genbot configuration. Every key, its default, and why it exists.",
           "# Copy to config.toml (or pass --config / set GENBOT_CONFIG). Any key can also",
           "# come from the environment as GENBOT_<SECTION>_<KEY>, e.g. GENBOT_DATABASE_URL;",
           "# use that for secrets. Generated from storage/config.py: edit there.", ""]
    for section, cls in sections().items():
        assert cls.__doc__ is not None  # dataclasses always have one; ours are written
        out.append(f"# {cls.__doc__.strip()}")
        out.append(f"[{section}]")
        for f in dataclasses.fields(cls):
            out.append(f"# {f.metadata['why']}")
            out.append(f"{f.name} = {_toml_value(f.default)}")
        out.append("")
    out += [
        "# Logical model name -> weights: a diffusers folder (SD 1.5, SD 2.x or SDXL family, a",
        "# ControlNet, an upscaler), a single-file .safetensors checkpoint (its family told from",
        "# its tensors, no config needed), or a LoRA .safetensors file (kohya or diffusers).",
        "# Loaded strictly offline; `genbot models pull REPO --write` fetches and adds one",
        "# (docs/models.md). A table sets defaults a sheet may leave empty:",
        '#   sdxl = { path = "/models/sdxl-base", steps = 30, guidance = 5.0 }',
        '#   dreamshaper = "/models/checkpoints/dreamshaper_8.safetensors"',
        "# Names given here replace the defaults below, which are genbot's demo models: tiny,",
        "# random weights (their images are noise), built on first start or by",
        "# `genbot models demo`, so every shipped template runs on a CPU out of the box.",
        "[models]"]
    out += [f"{name} = {_toml_value(entry.path)}" for name, entry in DEMO_MODELS.items()]
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_example(), end="")
