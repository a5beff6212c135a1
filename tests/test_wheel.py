"""A built wheel is a working genbot: installed (not the checkout), run from a folder
that knows nothing of the source tree, it lists the shipped templates, writes an
example and runs it to images — templates, fonts, static files, model families,
migrations and the docs all come from the wheel. Its words point a wheel user only at
what the wheel has: `genbot docs TOPIC`, `genbot template example NAME`, never a file of
the checkout (README, docs/, examples/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from a copy of this checkout, unpacked as pip installs it. A copy:
    setuptools builds in the source's own build/ folder, where a module since moved or
    deleted would still lie and go into the wheel."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "data", "*.egg-info", "__pycache__",
        ".pytest_cache", ".hypothesis"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-build-isolation", "-w", str(out / "dist"), str(source)],
                           capture_output=True, text=True, cwd=out)
    assert build.returncode == 0, build.stderr
    (wheel,) = (out / "dist").glob("genbot-*.whl")
    site = out / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return site


def genbot(site, folder, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # Only the installed copy is importable first; the checkout is neither the working
    # folder nor on PYTHONPATH (the executor child inherits this environment).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENBOT_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True,
                          text=True, cwd=folder, env=env, timeout=timeout)


@pytest.mark.slow
def test_the_wheel_runs_the_shipped_templates_from_another_folder(installed, tmp_path):
    where = subprocess.run(
        [sys.executable, "-c", "import bot, executor, storage, templates; "
         "print(*(m.__file__ for m in (bot, executor, storage, templates)))"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ,
                                                            "PYTHONPATH": str(installed)})
    assert all(path.startswith(str(installed)) for path in where.stdout.split()), where.stdout

    listed = genbot(installed, tmp_path, "template", "list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == \
        ["edit_instruction", "material_swap", "poster_zh", "product_main", "social_thumb"]

    example = genbot(installed, tmp_path, "template", "example", "product_main")
    assert example.returncode == 0, example.stderr
    assert (tmp_path / "product_main.xlsx").is_file()
    # The catalogs and the dashboard's fonts are package data: Chinese from the wheel.
    chinese = genbot(installed, tmp_path, "template", "example", "product_main", "--lang",
                     "zh", "-o", "zh.xlsx")
    assert chinese.returncode == 0, chinese.stderr
    from openpyxl import load_workbook
    assert load_workbook(tmp_path / "zh.xlsx").sheetnames == ["数据", "说明"]
    assert {p.name for p in (installed / "bot" / "web" / "static" / "fonts").iterdir()} == \
        {"OFL.txt", "genbot-cjk.woff2", "genbot-cjk-names.woff2"}
    assert (installed / "bot" / "locales" / "zh_Hans" / "LC_MESSAGES" / "genbot.po").is_file()
    assert (tmp_path / "assets" / "bottle.png").is_file()

    run = genbot(installed, tmp_path, "run", "product_main", "product_main.xlsx",
                 "--out", "out")
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == \
        ["BTL-001", "BTL-002", "contact.png"]
    assert "Traceback" not in run.stdout + run.stderr
    assert "note: demo model (sdxl) — images are noise; for real ones: genbot docs models" \
        in run.stdout

    # What the words point at, run from the wheel: the chat banner's example sheet, the
    # docs topics, and the one the demo note names.
    sheet = genbot(installed, tmp_path, "template", "example", "social_thumb", "-o",
                   "social_thumb.xlsx")
    assert sheet.returncode == 0 and (tmp_path / "social_thumb.xlsx").is_file(), sheet.stderr
    topics = genbot(installed, tmp_path, "docs")
    assert topics.returncode == 0, topics.stderr
    assert {"models", "operations", "deploy", "api", "chat", "templates"} <= \
        {line.split()[0] for line in topics.stdout.splitlines() if line.strip()}
    models = genbot(installed, tmp_path, "docs", "models")
    assert models.returncode == 0, models.stderr
    assert models.stdout.startswith("# Models: from demo noise to real images\n")
    assert "genbot models pull" in models.stdout


POINTER = re.compile(r"genbot (docs|template example) (\w+)")


def test_what_genbot_says_points_at_what_the_wheel_ships():
    """Every message, in every shipped language: no README, docs/ or examples/ path (a
    wheel has none), and each `genbot docs TOPIC` or `genbot template example NAME` it
    names is a topic or template that ships."""
    from babel.messages.pofile import read_po

    from bot import i18n
    from bot.cli.docs import topics
    from bot.messages import CATALOG, PLURALS
    shipped = {p.stem for p in (ROOT / "templates" / "shipped").glob("*.json")}
    named = {"docs": set(topics()), "template example": shipped}
    texts = [(("en", code), english) for code, english in [*CATALOG.items(), *PLURALS.items()]]
    for locale, (po,) in i18n.catalogs((i18n.SHIPPED,)).items():
        with po.open("rb") as f:
            for m in read_po(f):  # (en's catalog leaves them empty: the source is English)
                forms = m.string if isinstance(m.string, tuple) else (m.string,)
                texts += [((locale, m.context), form) for form in forms if m.id and form]
    pointers = []
    for (locale, code), text in texts:
        for lacking in ("README", "docs/", "examples/"):
            assert lacking not in text, f"{locale} {code}: a wheel has no {lacking}: {text}"
        for kind, name in POINTER.findall(text):
            assert name in named[kind], f"{locale} {code}: genbot {kind} {name}: no such one"
            pointers.append(code)
    assert {"chat_banner", "demo_note", "dash_demo_note"} <= set(pointers)
