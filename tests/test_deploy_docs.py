"""What docs/operations.md and docs/deploy.md tell an operator to run, checked against the
real genbot: each systemd unit's ExecStart read by genbot's own parser, each documented
config file passed through `genbot check-config`, its data where the unit's user can
write it and where the backup command reads it, every `genbot …` command the docs show
parsed, and `genbot serve --host/--port` listening where they say over the config."""

from __future__ import annotations

import asyncio
import configparser
import re
import shlex
import signal
import subprocess
import tomllib
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

from tests.conftest import PYTHON, ROOT, free_port, python_env
from tests.fakes.service import healthy, start_serve

DOCS = [ROOT / "docs" / "operations.md", ROOT / "docs" / "deploy.md"]
CONFIG = "/etc/genbot/config.toml"
FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"\s*([\w./-]*/)?genbot\s")
INLINE = re.compile(r"(?<!`)`((?:[\w./-]*/)?genbot\s[^`]+)`(?!`)")


def blocks(doc: Path, language: str) -> list[str]:
    return [body for lang, body in FENCED.findall(doc.read_text()) if lang == language]


def named(doc: Path, language: str) -> dict[str, str]:
    """The doc's code blocks that say which file they are (a first line "# /path")."""
    return {body.split("\n", 1)[0][2:].strip(): body for body in blocks(doc, language)
            if body.startswith("# /")}


def units(doc: Path) -> dict[str, configparser.ConfigParser]:
    found = {}
    for path, body in named(doc, "ini").items():
        unit = configparser.ConfigParser(interpolation=None, strict=False)
        unit.optionxform = str  # type: ignore[assignment,method-assign]  (keys keep their case)
        unit.read_string(body)
        found[path] = unit
    return found


@cache
def parser():
    from bot.cli.genbot import build_parser
    return build_parser()


def parsed(argv: list[str], where: str):
    try:
        return parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: genbot refuses `{shlex.join(argv)}`")


def documented_config(doc: Path) -> str:
    configs = named(doc, "toml")
    assert CONFIG in configs, f"{doc.name} runs --config {CONFIG} but does not show it"
    return configs[CONFIG]


def check_config(text: str, folder: Path) -> dict[str, str]:
    """`genbot check-config` on the config as documented, as its own process: what it
    prints, by label ("data dir", "listen" …)."""
    folder.mkdir()
    (folder / "config.toml").write_text(text)
    env = {k: v for k, v in python_env().items() if not k.startswith("GENBOT_")}
    done = subprocess.run([PYTHON, "-m", "bot.cli", "check-config", "--config",
                           str(folder / "config.toml")], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return {label.strip(): value.split("  (")[0].strip() for label, _, value in
            (line.partition(":") for line in done.stdout.splitlines()[1:])}


def test_each_unit_runs_a_command_genbot_takes_on_the_documented_config():
    seen = set()
    for doc in DOCS:
        for path, unit in units(doc).items():
            service = unit["Service"]
            where = f"{doc.name} {path}"
            for key, value in service.items():  # systemd reads "# …" after a value as the value
                assert " #" not in value, f"{where}: {key}= has a comment after its value"
            argv = shlex.split(service["ExecStart"].replace("%i", "0"))
            assert argv[0] == f"{service['WorkingDirectory']}/.venv/bin/genbot", where
            args = parsed(argv[1:], where)
            seen.add(args.command)
            assert args.config == CONFIG, where
            documented_config(doc)
            assert service["User"] == "genbot", where
    assert seen == {"serve", "worker"}


def test_each_documented_config_passes_check_config_with_its_data_where_the_unit_writes(
        tmp_path):
    for doc in DOCS:
        text = documented_config(doc)
        data_dir = tomllib.loads(text)["service"]["data_dir"]
        # Relative, it is read from /etc/genbot: a folder User=genbot cannot write.
        assert PurePosixPath(data_dir).is_absolute(), f"{doc.name}: data_dir {data_dir!r}"
        checked = check_config(text, tmp_path / doc.stem)
        assert checked["data dir"] == data_dir, checked
        for unit in units(doc).values():
            home = PurePosixPath(unit["Service"]["WorkingDirectory"])
            assert PurePosixPath(data_dir).is_relative_to(home), (doc.name, data_dir, home)
    (backup,) = [line for body in blocks(DOCS[0], "sh") for line in body.splitlines()
                 if line.startswith("sqlite3 ")]
    data_dir = tomllib.loads(documented_config(DOCS[0]))["service"]["data_dir"]
    assert shlex.split(backup)[1] == f"{data_dir}/genbot.sqlite3"  # the database it backs up


def commands(doc: Path) -> list[str]:
    """Every `genbot …` the doc shows: in code blocks (a shell line, or a console's `$ `
    line; after `&&`; with the venv's path) and inline. Diagrams (box drawing) are
    pictures, not commands."""
    text = doc.read_text()
    found = [" ".join(span.split()) for span in INLINE.findall(FENCED.sub("", text))]
    for lang, body in FENCED.findall(text):
        if lang not in ("", "sh", "console") or re.search("[│┌└─]", body):
            continue
        for line in body.splitlines():
            if lang == "console" and not line.startswith("$ "):
                continue  # what the command printed
            for part in line.removeprefix("$ ").split("&&"):
                if COMMAND.match(part):
                    found.append(shlex.join(shlex.split(part, comments=True)))
    return found


def test_every_genbot_command_the_docs_show_is_one_genbot_takes():
    for doc in [*DOCS, ROOT / "docs" / "first-week.md"]:
        shown = commands(doc)
        assert len(shown) >= 5, (doc.name, shown)
        for command in shown:
            parsed(shlex.split(command)[1:], doc.name)


@pytest.mark.slow
async def test_serve_host_and_port_override_the_documented_config(tmp_path):
    """The documented config (0.0.0.0:8080) served on loopback at a free port instead."""
    data = tmp_path / "data"
    text = documented_config(DOCS[0])
    (tmp_path / "config.toml").write_text(text.replace('"/srv/genbot/data"', f'"{data}"'))
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = await start_serve(tmp_path / "config.toml", log, "--no-executor",
                             "--host", "127.0.0.1", "--port", str(port))
    try:
        await healthy(f"http://127.0.0.1:{port}")
        assert (data / "genbot.sqlite3").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
        log.close()
    out = (tmp_path / "serve.log").read_text()
    assert f"genbot serving on http://127.0.0.1:{port}" in out and "Traceback" not in out


def test_serve_refuses_a_port_that_is_not_one(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "--port", "80800"])
    assert "argument --port: '80800' is not a port (a whole number from 0 to 65535)" in \
        capsys.readouterr().err
