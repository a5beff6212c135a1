"""Configuration: where it is read from, and one clear line for each kind of mistake."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from storage import config as cfg
from tests.conftest import PYTHON, ROOT, python_env


def load_text(tmp_path: Path, text: str, env: dict | None = None) -> cfg.Config:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return cfg.load(str(path), env=env or {})


def error_of(tmp_path: Path, text: str, env: dict | None = None) -> str:
    with pytest.raises(cfg.ConfigError) as err:
        load_text(tmp_path, text, env)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text, expected", [
    ("[queue]\nmax_queue_sise = 5\n",
     "config.toml: unknown key [queue] max_queue_sise — did you mean max_queue_size?"),
    ("[queu]\nmax_queue_size = 5\n", "config.toml: unknown section [queu] — did you mean queue?"),
    ("[service]\nmax_attempts = 5\n",
     "config.toml: unknown key [service] max_attempts — it belongs in [queue]"),
    ("[queue]\nmax_queue_size = \"lots\"\n",
     'config.toml: [queue] max_queue_size = "lots": expected an integer from 1 to 10000000'),
    ("[queue]\nmax_attempts = true\n",
     "config.toml: [queue] max_attempts = true: expected an integer from 1 to 100"),
    ("[queue]\nmax_attempts = 2.5\n",
     "config.toml: [queue] max_attempts = 2.5: expected an integer from 1 to 100"),
    ("[service]\nport = 70000\n",
     "config.toml: [service] port = 70000: expected an integer from 0 to 65535"),
    ("[queue]\nbatch_delay = -1\n",
     "config.toml: [queue] batch_delay = -1: expected a number from 0 to 3600"),
    ("[queue]\nauto_save = \"yes\"\n",
     'config.toml: [queue] auto_save = "yes": expected true or false'),
    ("[service]\nlog_level = \"verbose\"\n",
     'config.toml: [service] log_level = "verbose": expected one of "debug", "info", '
     '"warning", "error"'),
    ("[queue]\nlease_seconds = 10\nheartbeat_seconds = 6\n",
     "config.toml: [queue] heartbeat_seconds = 6: expected at most half of lease_seconds (10), "
     "so one late heartbeat does not lose the lease"),
    ("[queue]\nretry_backoff = 100\nretry_backoff_max = 50\n",
     "config.toml: [queue] retry_backoff = 100: expected at most retry_backoff_max (50)"),
    ("[database]\nurl = \"mysql://x\"\n",
     "config.toml: [database] url: expected sqlite:///path or postgres://user@host:port/db"),
    ("queue = 5\n", "config.toml: queue must be a [queue] table"),
    ('[models]\nflux = { path = "x", preview = "taef1" }\n',
     'config.toml: [models] flux: preview = "taef1" names no model in [models] (a tiny VAE '
     'such as TAESD: `genbot models pull madebyollin/taesd`, then [models] taesd = …)'),
    ('[models]\nflux = { path = "x", preview = 3 }\n',
     "config.toml: [models] flux: preview: expected the name of a tiny VAE in [models]"),
])
def test_each_mistake_gets_one_line_naming_file_key_and_expectation(tmp_path, text, expected):
    message = error_of(tmp_path, text)
    assert message.endswith(expected)
    assert message.startswith(str(tmp_path))


def test_parallel_runs_other_than_one_explains_how_to_scale(tmp_path):
    message = error_of(tmp_path, "[queue]\nparallel_runs = 2\n")
    assert "[queue] parallel_runs = 2: expected 1" in message
    assert "one executor per GPU" in message and "genbot worker" in message


def test_invalid_toml_names_the_file_and_line(tmp_path):
    message = error_of(tmp_path, "[queue\nmax_attempts = 3\n")
    assert "config.toml: not valid TOML" in message and "line 1" in message


def test_secrets_are_not_echoed(tmp_path):
    message = error_of(tmp_path, "[database]\nurl = 5\n")
    assert message.endswith("[database] url = ***: expected a string")


def test_where_config_comes_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cfg.load(env={}).source == "built-in defaults"
    (tmp_path / "config.toml").write_text("[queue]\nmax_attempts = 4\n")
    assert cfg.load(env={}).queue.max_attempts == 4  # ./config.toml
    other = tmp_path / "other.toml"
    other.write_text("[queue]\nmax_attempts = 5\n")
    assert cfg.load(env={"GENBOT_CONFIG": str(other)}).queue.max_attempts == 5
    named = tmp_path / "named.toml"
    named.write_text("[queue]\nmax_attempts = 6\n")
    assert cfg.load(str(named), env={"GENBOT_CONFIG": str(other)}).queue.max_attempts == 6
    with pytest.raises(cfg.ConfigError,
                       match=r"missing.toml: config file not found \(named by --config\)"):
        cfg.load(str(tmp_path / "missing.toml"), env={})
    with pytest.raises(cfg.ConfigError, match="named by GENBOT_CONFIG"):
        cfg.load(env={"GENBOT_CONFIG": str(tmp_path / "gone.toml")})


def test_defaults_need_no_file_and_put_sqlite_under_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = cfg.load(env={})
    assert config.queue.parallel_runs == 1 and config.queue.max_queue_size == 10_000
    assert config.data_dir == (tmp_path / "data").resolve()
    assert config.database_url == f"sqlite:///{tmp_path.resolve() / 'data' / 'genbot.sqlite3'}"


def test_relative_data_dir_is_relative_to_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "etc" / "genbot.toml"
    conf.parent.mkdir()
    conf.write_text('[service]\ndata_dir = "../var"\n')
    monkeypatch.chdir("/")
    assert cfg.load(str(conf), env={}).data_dir == (tmp_path / "var").resolve()


def test_environment_overrides_and_secrets(tmp_path):
    env = {"GENBOT_DATABASE_URL": "postgres://u:pw@db:5432/genbot",
           "GENBOT_QUEUE_MAX_ATTEMPTS": "7", "GENBOT_QUEUE_AUTO_SAVE": "false",
           "GENBOT_QUEUE_BATCH_DELAY": "1.5"}
    config = load_text(tmp_path, "[queue]\nmax_attempts = 2\n", env)
    assert config.database.url == "postgres://u:pw@db:5432/genbot"
    assert config.queue.max_attempts == 7 and config.queue.auto_save is False
    assert config.queue.batch_delay == 1.5
    message = error_of(tmp_path, "", {"GENBOT_QUEUE_MAX_ATTEMPTS": "many"})
    assert message == \
        "environment GENBOT_QUEUE_MAX_ATTEMPTS='many': expected an integer from 1 to 100"
    message = error_of(tmp_path, "", {"GENBOT_QUEUE_MAX_ATTEMPTS": "500"})
    assert message == \
        "environment GENBOT_QUEUE_MAX_ATTEMPTS = 500: expected an integer from 1 to 100"


def test_example_file_documents_every_key_and_matches_the_schema():
    text = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    assert text == cfg.render_example(), \
        "regenerate: python -m storage.config > config.example.toml"
    parsed = cfg.load(str(ROOT / "config.example.toml"), env={})
    assert parsed.queue == cfg.QueueConfig() and parsed.service == cfg.ServiceConfig()
    for _section, cls in cfg.sections().items():
        for f in cls.__dataclass_fields__.values():
            assert f"\n{f.name} = " in text and f.metadata["why"]


def test_check_config_cli_prints_the_line_and_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[queue]\nparallel_runs = 4\n")
    done = subprocess.run([PYTHON, "-m", "bot.cli", "check-config", "--config", str(bad)],
                          capture_output=True, text=True, env=python_env(), cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.startswith(f"genbot: {bad}: [queue] parallel_runs = 4: expected 1")
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    good = subprocess.run([PYTHON, "-m", "bot.cli", "check-config"], capture_output=True,
                          text=True, env=python_env(), cwd=tmp_path)
    assert good.returncode == 0 and "config OK (built-in defaults)" in good.stdout


def test_digest_settings_are_checked(tmp_path):
    assert error_of(tmp_path, '[chat]\ndigest = "C0123"\n', {}).endswith(
        '[chat] digest = "C0123": expected "platform:conversation", e.g. "slack:C0123"')
    assert error_of(tmp_path, '[chat]\ndigest_at = "9am"\n', {}).endswith(
        '[chat] digest_at = "9am": expected a time of day as HH:MM, e.g. "09:00"')
    config = load_text(tmp_path, '[chat]\ndigest = "dingtalk:cid42"\ndigest_at = "7:05"\n', {})
    assert (config.chat.digest, config.chat.digest_at) == ("dingtalk:cid42", "7:05")


def test_comfyui_servers_are_addresses_each_named_once(tmp_path):
    assert error_of(tmp_path, '[comfyui]\nservers = ["gpu-a:8188"]\n', {}).endswith(
        '[comfyui] servers: "gpu-a:8188": expected a ComfyUI server\'s address such as '
        '"http://127.0.0.1:8188"')
    assert "a server is named twice" in error_of(
        tmp_path, '[comfyui]\nservers = ["http://a:8188", "http://a:8188/"]\n', {})
    config = load_text(tmp_path, '[comfyui]\nservers = ["http://a:8188", "https://b"]\n', {})
    assert list(config.comfyui.servers) == ["http://a:8188", "https://b"]


def test_a_misspelled_environment_variable_or_section_gets_a_did_you_mean():
    with pytest.raises(cfg.ConfigError) as e:
        cfg.from_dict({}, env={"GENBOT_QUEUE_MAX_QUEUE_SISE": "5"})
    assert "GENBOT_QUEUE_MAX_QUEUE_SISE: not a genbot setting — did you mean " \
        "GENBOT_QUEUE_MAX_QUEUE_SIZE?" in str(e.value)
    with pytest.raises(cfg.ConfigError) as e:
        cfg.from_dict({"modles": {"x": "demo:sd15"}})
    assert "unknown section [modles] — did you mean models?" in str(e.value)
    assert cfg.from_dict({}, env={"GENBOT_TOKEN": "t", "GENBOT_MODELS_MINE": "demo:sd15"})


# What Kubernetes injects into every pod of a namespace with a Service named `genbot`
# (enableServiceLinks, on by default), and one named `genbot-worker`.
SERVICE_LINKS = {
    "GENBOT_PORT": "tcp://10.96.0.11:80", "GENBOT_PORT_80_TCP": "tcp://10.96.0.11:80",
    "GENBOT_PORT_80_TCP_ADDR": "10.96.0.11", "GENBOT_PORT_80_TCP_PORT": "80",
    "GENBOT_PORT_80_TCP_PROTO": "tcp", "GENBOT_SERVICE_HOST": "10.96.0.11",
    "GENBOT_SERVICE_PORT": "80", "GENBOT_SERVICE_PORT_HTTP": "80",
    "GENBOT_WORKER_PORT": "tcp://10.96.0.12:9100", "GENBOT_WORKER_SERVICE_HOST": "10.96.0.12",
    "GENBOT_WORKER_SERVICE_PORT": "9100", "GENBOT_WORKER_PORT_9100_TCP_PORT": "9100"}


def test_kubernetes_service_links_are_not_settings_and_do_not_move_the_service(tmp_path,
                                                                               caplog):
    config = load_text(tmp_path, '[service]\nhost = "0.0.0.0"\nport = 8080\n', SERVICE_LINKS)
    assert (config.service.host, config.service.port) == ("0.0.0.0", 8080)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("GENBOT_SERVICE_HOST=10.96.0.11 ignored" in m and "GENBOT_SERVICE__HOST" in m
               for m in said), said
    # The double-underscore spelling always sets the key, whatever the cluster injects.
    config = load_text(tmp_path, "", {**SERVICE_LINKS, "GENBOT_SERVICE__HOST": "0.0.0.0",
                                      "GENBOT_SERVICE__PORT": "9000"})
    assert (config.service.host, config.service.port) == ("0.0.0.0", 9000)
    # Without the cluster's signature the plain spelling is the setting, as always.
    config = load_text(tmp_path, "", {"GENBOT_SERVICE_HOST": "0.0.0.0",
                                      "GENBOT_SERVICE_PORT": "9000"})
    assert (config.service.host, config.service.port) == ("0.0.0.0", 9000)
    # A Service named genbot-service gives GENBOT_SERVICE_PORT an address: not a port.
    config = load_text(tmp_path, "", {"GENBOT_SERVICE_PORT": "tcp://10.96.0.13:80",
                                      "GENBOT_SERVICE_SERVICE_HOST": "10.96.0.13"})
    assert config.service.port == 8080


@pytest.mark.parametrize("var, value", [
    ("GENBOT_SERVCE_PORT", "9000"),  # a typo with a port: not the shape of a link's value
    ("GENBOT_QUEUE_PORT", "9"), ("GENBOT_PORT", "8080"), ("GENBOT_WORKER_SERVICE_HOST", "gpu")])
def test_a_typo_shaped_like_a_service_link_is_still_refused(tmp_path, var, value):
    assert error_of(tmp_path, "", {var: value}).startswith(f"environment {var}: not a genbot")


def test_the_service_starts_on_its_configured_address_inside_a_kubernetes_pod(tmp_path):
    from tests.conftest import free_port
    port = free_port()
    conf = tmp_path / "genbot.toml"
    conf.write_text(f'[service]\nport = {port}\ndata_dir = "{tmp_path / "data"}"\n')
    proc = subprocess.Popen([PYTHON, "-m", "bot.cli", "serve", "--no-executor", "--config",
                             str(conf)], env={**python_env(), **SERVICE_LINKS},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path)
    try:
        import time
        import urllib.request
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() >= deadline:
                    proc.terminate()  # (its output can be read only once it has ended)
                    out, _ = proc.communicate(timeout=30)
                    raise AssertionError(f"/healthz never answered:\n{out[-3000:]}") from None
                time.sleep(0.2)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "GENBOT_SERVICE_PORT=80 ignored" in out and "Traceback" not in out, out


def test_data_dir_under_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = load_text(tmp_path, '[service]\ndata_dir = "~/genbot-data"\n')
    assert config.data_dir == (tmp_path / "home" / "genbot-data").resolve()
    assert config.database_url.endswith(f"{tmp_path}/home/genbot-data/genbot.sqlite3")
    assert "~" not in str(config.path("~/models"))
    assert error_of(tmp_path, '[service]\ndata_dir = "~nobody-such-user-here/d"\n').endswith(
        "~ names a home folder, and this one is unknown here (HOME unset or no such user): "
        "give the full path")
