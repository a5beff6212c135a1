"""A new image action is a few-file change: "mirror" (tests/fakes/mirror.py: a spec and its
derive, an op's signature and implementation, its words) appears on every front from the
tables alone — chat's command and its help in both languages, the buttons under an image,
the CLI's `genbot job mirror`, the API's action names in its OpenAPI document, GET
/vocabulary and each job's offered actions (the dashboard's buttons) — and an image
mirrored through the API is the parent's pixels flipped.

In a process of its own: the tables are read when the fronts are imported, as they are
when genbot starts."""

from __future__ import annotations

import subprocess

from tests.conftest import PYTHON, ROOT, python_env

SCRIPT = r'''
import asyncio, io, sys
from pathlib import Path

from tests.fakes.mirror import LOCALES  # the new action, before any front is imported

from PIL import Image, ImageOps

from bot.chat.commands import COMMANDS
from bot.cli.genbot import build_parser
from bot import i18n
from bot.messages import action_label
from templates.actions import offered
from templates.loader import load_templates
from tests.fakes.api import ALICE, BOTTLE, ApiWorld, api_config

tmp, demo = Path(sys.argv[1]), Path(sys.argv[2])
config = api_config(tmp, demo, i18n={"locales_dir": str(LOCALES)})
i18n.use(config)  # (as genbot does when it reads its config)

# chat: the command, its alias, its help in both languages; its button's label
spec = COMMANDS.specs["mirror"]
assert spec.line == "/mirror ROW|jJOB|bBATCH [--batch BATCH]", spec.line
assert COMMANDS.names["镜像"] == "mirror"
assert "/mirror" in COMMANDS.help(lang="en") and "左右翻转图片" in COMMANDS.help(lang="zh")
assert action_label("mirror", "zh") == "🪞 镜像"
# the CLI
args = build_parser().parse_args(["job", "mirror", "7"])
import contextlib
with contextlib.redirect_stdout(io.StringIO()) as shown, contextlib.suppress(SystemExit):
    build_parser().parse_args(["job", "--help"])
assert "mirror" in shown.getvalue() and "flipped left to right" in shown.getvalue()
assert (args.action, args.id) == ("mirror", ("job", 7))
# offered under any template's images (it needs no seed, no model)
templates = load_templates(Path("templates/shipped"))[0]
assert "mirror" in offered(templates["social_thumb"]) and "again" not in offered(
    templates["social_thumb"])


async def api():
    async with ApiWorld(config) as w:
        status, _ = await w.submit(1)
        assert status == 201, status
        w.start_executor()
        await w.finish()
        status, doc = await w.call("GET", "/openapi.json")
        enum = doc["components"]["schemas"]["ActionBody"]["properties"]["action"]["enum"]
        assert "mirror" in enum, enum
        count = doc["components"]["schemas"]["ActionBody"]["properties"]["count"]
        assert count["description"].startswith("again, vary:"), count  # (mirror takes none)
        verbs = {}
        for lang in ("en", "zh"):
            status, words = await w.call("GET", f"/vocabulary?lang={lang}")
            mirror = next(a for a in words["actions"] if a["name"] == "mirror")
            assert mirror["button"], mirror
            verbs[lang] = mirror["verb"]
        assert verbs == {"en": "Mirror", "zh": "镜像"}, verbs
        status, job = await w.call("GET", "/jobs/1")
        assert "mirror" in job["actions"] and "vary" not in job["actions"], job["actions"]
        status, acted = await w.call("POST", "/jobs/1/actions", json={"action": "mirror"})
        assert status == 201, acted
        await w.finish()
        status, parent = await w.call("GET", "/jobs/1/outputs/0")
        (child,) = acted["jobs"]
        status, made = await w.call("GET", f"/jobs/{child['id']}/outputs/0")
        assert status == 200, made
        a, b = Image.open(io.BytesIO(parent)), Image.open(io.BytesIO(made))
        assert ImageOps.mirror(a.convert("RGB")).tobytes() == b.convert("RGB").tobytes()
        status, job = await w.call("GET", f"/jobs/{child['id']}")
        assert (job["action"], job["parent_job_id"]) == ("mirror", 1)

asyncio.run(api())
print("mirror: every front")
'''


def test_a_new_image_action_reaches_every_front_from_the_tables(tmp_path, demo_models):
    done = subprocess.run([PYTHON, "-c", SCRIPT, str(tmp_path), str(demo_models)], cwd=ROOT,
                          env=python_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "mirror: every front" in done.stdout
