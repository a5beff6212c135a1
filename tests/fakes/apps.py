"""An application layer (bot.app) on a real database with a fake clock, for the tests of
what it decides — iterating, sweeps — without a service, a chat platform or an executor."""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import UTC, datetime

from bot.app.application import App, load_templates
from bot.app.permissions import Who
from bot.intake.check import SheetFile
from storage import config as cfg
from storage.files import open_store
from storage.queue import open_queue
from tests.conftest import ROOT, FakeClock

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
ALICE, BOB, BOSS, VIC, REX = (Who("test", u, "C1")
                              for u in ("ALICE", "BOB", "BOSS", "VIC", "REX"))
PRODUCTS = SheetFile("p.csv", b"sku,product_image,prompt,steps\n"
                              b"A1,bottle.png,a bottle,4\nA2,bottle.png,a jar,4\n")


async def pictures(name: str) -> bytes | None:
    """The pictures a test sheet's rows name: bottle.png."""
    return BOTTLE if name == "bottle.png" else None


@asynccontextmanager
async def app_on(tmp_path, db_url, **sections):
    """BOSS an admin, VIC a viewer, REX a reviewer, ALICE and BOB submitters (100
    submissions a minute); `sections`: more of the config ({"deliver": {…}})."""
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "database": {"url": db_url}, **sections,
                            "chat": {"admins": ["test:BOSS"], "viewers": ["test:VIC"],
                                     "reviewers": ["test:REX"],
                                     "submitters": ["test:ALICE", "test:BOB"],
                                     "submitter_per_minute": 100}})
    clock = FakeClock(datetime(2026, 12, 5, 8, 0, tzinfo=UTC).timestamp())
    queue = await open_queue(config, clock=clock)
    try:
        yield App(config, queue, open_store(config), load_templates(config), clock=clock)
    finally:
        await queue.close()


async def second_version(app: App, name: str, param: str, default: object) -> None:
    """Every loaded template kept as version 1, and version 2 of `name` beside it: its
    `param` defaulting to `default` (what an A/B compares: NAME@1 NAME@2)."""
    import copy
    import json

    from templates.loader import version_of
    await app.record_versions("test")
    t = app.templates[name]
    source = copy.deepcopy(t.source)
    source["params"][param]["default"] = default
    await app.versions.record(name, version_of(json.dumps(source).encode(), t),
                              {"template": source, "workflow": None}, "test")
