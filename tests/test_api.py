"""The REST API on the real service: tokens and roles, submitting (multipart and JSON rows),
reading, paging, cancel/retry/pause, outputs, the events WebSocket, the OpenAPI document."""

from __future__ import annotations

import asyncio
import io

import aiohttp
import pytest
from openpyxl import load_workbook
from PIL import Image

from bot.settings import IntakeConfig, assets_dir
from tests.conftest import ROOT, executor_config
from tests.fakes import media
from tests.fakes.api import ADMIN, ALICE, BOB, BOTTLE, REVIEWER, VIEWER, ApiWorld, api_config


@pytest.fixture
async def api(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        yield w


async def test_tokens_are_required_and_errors_are_json(api):
    status, body = await api.call("GET", "/queue", token=None)
    assert status == 401 and body["error"]["code"] == "unauthorized"
    status, body = await api.call("GET", "/queue", token="not-a-token-at-all")
    assert status == 401
    status, body = await api.call("GET", f"/queue?token={ALICE}", token=None)
    assert status == 401  # tokens in URLs end up in logs: only the WebSocket may
    status, body = await api.call("GET", "/batches/99")
    assert (status, body["error"]["code"]) == (404, "no_batch")
    status, body = await api.call("GET", "/jobs?limit=abc")
    assert (status, body["error"]["code"]) == (400, "bad_query")
    status, doc = await api.call("GET", "/openapi.json", token=None)  # public, like any docs
    assert status == 200 and doc["openapi"].startswith("3.")


async def test_the_vocabulary_is_every_word_of_the_dashboard_in_the_language_asked_for(api):
    """Public (the sign-in page needs words); ?lang=, else Accept-Language, else English;
    the states, priorities and actions in their registries' order."""
    from storage.records import ACTIVE, TERMINAL, Priority, Status
    status, en = await api.call("GET", "/vocabulary", token=None)
    assert status == 200 and en["language"] == "en"
    assert en["languages"] == [{"code": "en", "name": "English"}, {"code": "zh", "name": "中文"}]
    assert (en["words"]["sign_in"], en["words"]["batch"]) == ("Sign in", "Batch {id}")
    assert [(s["name"], s["active"], s["terminal"]) for s in en["states"]] == \
        [(s.value, s in ACTIVE, s in TERMINAL) for s in Status]
    assert [p["name"] for p in en["priorities"]] == [p.label for p in Priority]
    assert [a["name"] for a in en["actions"]][:2] == ["again", "vary"]
    # Words that follow a number, by plural category (as Intl.PluralRules selects them).
    assert en["plurals"]["n_jobs"] == {"one": "{count} job", "other": "{count} jobs"}
    for asked in ({"params": {"lang": "zh"}}, {"params": {"lang": "zh-CN"}},
                  {"headers": {"Accept-Language": "fr-FR, zh-TW;q=0.8, en;q=0.5"}}):
        status, zh = await api.call("GET", "/vocabulary", token=None, **asked)
        assert zh["language"] == "zh", asked
        assert (zh["words"]["sign_in"], zh["states"][0]["label"], zh["actions"][1]["verb"],
                zh["priorities"][0]["label"]) == ("登录", "排队中", "变体", "紧急")
        assert zh["words"].keys() == en["words"].keys() and zh["languages"] == en["languages"]
        assert zh["plurals"]["n_jobs"] == {"other": "{count} 个任务"}  # (one form: no plural)
    status, other = await api.call("GET", "/vocabulary?lang=fr", token=None)
    assert other["language"] == "en"  # (not offered: the source's words)


async def test_who_asks_is_known_before_anything_is_looked_up(api):
    """Without a token nothing says which batches, jobs or schedules exist: 401, not 404."""
    for method, path in (("POST", "/batches/99/cancel"), ("POST", "/batches/99/retry"),
                         ("POST", "/jobs/99/cancel"), ("DELETE", "/schedules/99"),
                         ("GET", "/batches/99"), ("GET", "/jobs/99"),
                         ("POST", f"/batches/{2**70}/cancel")):
        status, body = await api.call(method, path, token=None)
        assert (status, body["error"]["code"]) == (401, "unauthorized"), (method, path)
    status, body = await api.call("POST", "/batches/99/cancel", token=VIEWER)
    assert (status, body["error"]["code"]) == (403, "refused_role")  # nor to a viewer
    status, body = await api.call("POST", "/batches/99/cancel", token=ALICE)
    assert (status, body["error"]["code"]) == (404, "no_batch")


async def test_submit_read_page_and_download_a_batch(api):
    status, batch = await api.submit(3, key="nightly-42")
    assert status == 201 \
        and (batch["id"], batch["total"], batch["submitter"]) == (1, 3, "api:alice")
    again_status, again = await api.submit(3, key="nightly-42")  # a retried request
    assert again_status == 200 and again["id"] == 1
    status, page = await api.call("GET", "/jobs?limit=2")
    assert [j["row"] for j in page["jobs"]] == [4, 3] and page["next_cursor"] is not None
    status, rest = await api.call("GET", f"/jobs?limit=2&cursor={page['next_cursor']}")
    assert [j["row"] for j in rest["jobs"]] == [2] and rest["next_cursor"] is None
    status, not_yet = await api.call("GET", "/batches/1/files/results.xlsx")
    assert (status, not_yet["error"]["code"]) == (404, "not_yet")

    api.start_executor()
    await api.finish(timeout=60)
    status, done = await api.call("GET", "/batches/1")
    assert done["done"] == 3 and done["counts"] == {"succeeded": 3}
    status, job = await api.call("GET", "/jobs/1")
    assert job["status"] == "succeeded" and job["outputs"] == ["/api/v1/jobs/1/outputs/0"]
    status, image = await api.call("GET", "/jobs/1/outputs/0", token=VIEWER)
    assert status == 200 and Image.open(io.BytesIO(image)).size[0] == 1080
    async with api.http.get("/api/v1/batches/1/files/results.xlsx",
                            headers={"Authorization": f"Bearer {ALICE}"}) as r:
        results = await r.read()
        assert r.content_type == \
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        assert r.headers["Content-Disposition"] == ('attachment; filename="batch-1-results.xlsx"; '
                                                    "filename*=UTF-8''batch-1-results.xlsx")
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert load_workbook(io.BytesIO(results)).active.max_row == 4
    status, contact = await api.call("GET", "/batches/1/files/contact.png")
    assert status == 200 and Image.open(io.BytesIO(contact)).format == "PNG"


async def test_an_uploaded_sheet_naming_a_missing_picture_is_refused_at_its_cell(api):
    """Issue 42, item 5, through the upload the dashboard's Submit form sends: a workbook
    of one's own naming assets/bottle.png without the file is refused (row, column,
    file), not run on genbot's demo bottle; genbot's own example workbook still runs."""
    from openpyxl import Workbook

    from bot.intake.writer import write_example
    book = Workbook()
    book.active.append(["image", "title"])
    book.active.append(["assets/bottle.png", "Mine"])
    own = io.BytesIO()
    book.save(own)
    from templates.loader import load_templates
    templates, _ = load_templates(ROOT / "templates" / "shipped")
    status, body = await api.call("POST", "/batches", data=_form(own.getvalue()))
    assert status == 422 and body["error"]["problems"] == [{
        "row": 2, "column": "image", "code": "image_not_found",
        "message": 'row 2, column "image": no image "assets/bottle.png" among the files sent '
                   f'with the sheet or in the assets folder ({assets_dir(api.config)}): send it '
                   "with the sheet"}]
    status, body = await api.call("POST", "/batches",
                                  data=_form(write_example(templates["social_thumb"])))
    assert status == 201, body


def _form(sheet: bytes) -> aiohttp.FormData:
    """A workbook and a picture it does not name, as the dashboard's Submit sends them."""
    form = aiohttp.FormData()
    form.add_field("template", "social_thumb")
    form.add_field("sheet", sheet, filename="sheet.xlsx")
    form.add_field("pictures", BOTTLE, filename="other.png")
    return form


async def test_submissions_take_turns_off_the_event_loop(tmp_path, demo_models, monkeypatch):
    """Issue 42, item 13: a sheet being read holds its worker thread, not the event loop:
    /healthz answers meanwhile; and a second submission waits its turn ([intake] workers
    = 1) instead of piling its work beside the first, so the first in is answered first."""
    import threading

    from bot.intake import check, workers
    entered, release = threading.Event(), threading.Event()
    reading: list[str] = []
    real = check.read_sheet

    def held(filename, data, **kw):  # the real reader, once the test lets it go on
        reading.append(threading.current_thread().name)
        entered.set()
        release.wait(30)
        return real(filename, data, **kw)
    monkeypatch.setattr(check, "read_sheet", held)
    async with ApiWorld(api_config(tmp_path, demo_models, intake={"workers": 1})) as w:
        first = asyncio.create_task(w.submit(2))
        assert await asyncio.to_thread(entered.wait, 30)
        second = asyncio.create_task(w.submit(2))
        for _ in range(3000):  # until it has arrived and waits (or, wrongly, reads too)
            if workers.waiting() or len(reading) > 1:
                break
            await asyncio.sleep(0.01)
        assert reading == ["intake_0"] and workers.waiting() == 1
        async with w.http.get("/healthz") as r:
            assert r.status == 200  # answered while the sheet is held in its thread
        from prometheus_client import generate_latest

        from bot.web.metrics import Metrics
        from storage.outbox import Outbox
        metrics = Metrics(w.queue, Outbox(w.queue.db))  # as /metrics reads it, meanwhile
        await metrics.refresh_or_mark_down()
        assert b"\ngenbot_intake_waiting 1.0\n" in generate_latest(metrics.registry)
        assert not first.done() and not second.done()
        release.set()
        (status, body), (status2, body2) = await asyncio.gather(first, second)
        assert (status, status2) == (201, 201) and body["id"] < body2["id"]
        assert len(reading) == 2


async def test_json_rows_and_problems_by_row_and_column(api):
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"image": "bottle.png", "title": "A", "width": 12},
                                             {"image": "nope.png", "title": "B"}]})
    assert status == 422 and body["error"]["code"] == "invalid_sheet"
    problems = [(p["row"], p["column"], p["code"]) for p in body["error"]["problems"]]
    # JSON rows carry no files: images come from the assets folder or an allowed URL.
    assert problems == [(2, "image", "image_not_found"), (2, "width", "too_small"),
                        (3, "image", "image_not_found")]
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"title": "no image column"}], "dry_run": True})
    assert status == 422 and body["error"]["problems"][0]["code"] == "missing_column"
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"title": "x"}], "not_before": "yesterday"})
    assert (status, body["error"]["code"]) == (422, "bad_time")
    # Issue 42, item 5: genbot's example picture never stands in for a missing one.
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"image": "assets/bottle.png", "title": "A"}]})
    assert status == 422 and body["error"]["problems"] == [{
        "row": 2, "column": "image", "code": "image_not_found",
        "message": 'row 2, column "image": no image "assets/bottle.png" among the files sent '
                   f'with the sheet or in the assets folder ({assets_dir(api.config)}): send it '
                   "with the sheet"}]
    (assets_dir(api.config) / "assets").mkdir(parents=True)
    (assets_dir(api.config) / "assets" / "bottle.png").write_bytes(BOTTLE)
    # A layout on the channels' files: a row it cannot use is said by row and column.
    row = {"sku": "S1", "product_image": "assets/bottle.png", "prompt": "a", "headline": "新品"}
    status, body = await api.call("POST", "/batches", json={
        "template": "product_main", "rows": [{**row, "price": "九块九"}],
        "channels": ["douyin"], "layout": "launch"})
    assert status == 422 and [(p["row"], p["column"], p["code"])
                              for p in body["error"]["problems"]] == [(2, "price", "layout_price")]
    status, body = await api.call("POST", "/batches", json={
        "template": "product_main", "rows": [{**row, "price": 9.9}], "channels": ["douyin"],
        "layout": "launch", "dry_run": True})
    assert (status, body["jobs"]) == (200, 1)
    # A sweep: JSON's list of axes, or a multipart field once per axis; refused whole.
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"image": "assets/bottle.png", "title": "A"}],
        "vary": ["width=256,512", "aspect=1:1,4:5"], "dry_run": True})
    assert (status, body["jobs"]) == (200, 4)
    status, body = await api.submit(2, vary=["width=256..512:128", "比例=1:1,4:5"])
    assert status == 201 and body["total"] == 2 * 3 * 2 and body["meta"]["sweep"]["seeds"] == 1
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"image": "assets/bottle.png", "title": "A"}],
        "vary": ["width=12"]})
    assert (status, body["error"]["code"], body["error"]["message"]) == (
        422, "too_small", "--vary width: 12 is less than 64")
    status, body = await api.call("POST", "/batches", json={
        "template": "social_thumb", "rows": [{"image": "assets/bottle.png", "title": "A"}],
        "seeds": "many"})
    assert (status, body["error"]["code"]) == (422, "bad_field")
    status, body = await api.call("POST", "/batches", json={"template": "nope", "rows": []})
    assert (status, body["error"]["code"]) == (422, "no_template")
    status, body = await api.call("POST", "/batches", data=b"x",
                                  headers={"Content-Type": "text/plain"})
    assert status == 415


async def test_the_same_permission_rules_as_chat(api):
    status, body = await api.submit(1, token=VIEWER)
    assert (status, body["error"]["code"]) == (403, "refused_role")
    await api.submit(2, token=ALICE)
    status, body = await api.call("POST", "/batches/1/cancel", token=BOB)
    assert (status, body["error"]["code"]) == (403, "refused_not_owner")
    status, body = await api.call("POST", "/queue/pause", token=ALICE)
    assert (status, body["error"]["code"]) == (403, "refused_role")
    status, body = await api.call("POST", "/queue/pause", token=ADMIN)
    assert (status, body) == (200, {"paused": True, "changed": True})
    status, body = await api.call("GET", "/queue", token=VIEWER)
    assert body["paused"] is True and body["queued"] == 2
    status, body = await api.call("POST", "/jobs/1/cancel", token=ALICE)
    assert (status, body) == (200, {"ended": [1], "asked": []})
    status, body = await api.call("POST", "/batches/1/cancel", token=ADMIN)
    assert body == {"ended": [2], "asked": []}
    status, body = await api.call("POST", "/batches/1/retry", token=ALICE)
    assert (status, body["error"]["code"]) == (409, "nothing_to_retry")
    audit = [(a.user, a.action, a.allowed) for a in
             reversed(await api.core.access.audit_log())]
    assert ("vic", "gen", False) in audit and ("ops", "pause", True) in audit
    assert ("bob", "cancel", False) in audit and ("ops", "cancel", True) in audit


async def test_priority_is_a_privilege_through_the_api_the_client_and_genbot_submit(
        api, tmp_path):
    """GET /me says what each caller may use; a more urgent one is refused, saying which
    they may use and how an admin raises it — to a script and to `genbot submit` alike."""
    import asyncio

    from bot.client import AsyncClient, GenbotError
    from tests.conftest import PYTHON, python_env
    sheet = tmp_path / "work" / "s.csv"
    sheet.parent.mkdir()
    sheet.write_text("image,title\nbottle.png,A\n")
    (sheet.parent / "bottle.png").write_bytes(BOTTLE)
    status, me = await api.call("GET", "/me", ALICE)
    assert status == 200 and (me["user"], me["role"], me["priorities"], me["max_priority"]) \
        == ("api:alice", "submitter", ["normal", "low"], "normal")
    status, boss = await api.call("GET", "/me", ADMIN)
    assert boss["priorities"] == ["urgent", "high", "normal", "low"] and "pause" in boss["may"]
    status, viewer = await api.call("GET", "/me", VIEWER)
    assert (viewer["priorities"], viewer["max_priority"]) == ([], None)
    status, body = await api.submit(1, priority="urgent")
    assert (status, body["error"]["code"]) == (403, "refused_priority")
    assert body["error"]["message"] == ("you may use priority normal or lower, not urgent; an "
                                        "admin can raise yours: /grant api:alice submitter "
                                        "--priority urgent")
    status, urgent = await api.submit(1, token=ADMIN, priority="urgent")
    assert (status, urgent["priority"]) == (201, "urgent")
    async with AsyncClient(api.url, ALICE) as client:
        assert (await client.me())["priorities"] == ["normal", "low"]
        with pytest.raises(GenbotError) as refused:
            await client.submit("social_thumb", sheet, priority="high")
        assert (refused.value.status, refused.value.code) == (403, "refused_priority")
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "bot.cli", "submit", "social_thumb", str(sheet), "--priority",
        "high", "--server", api.url, cwd=ROOT, env=python_env() | {"GENBOT_TOKEN": ALICE},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 1 and "Traceback" not in err.decode()
    assert "you may use priority normal or lower, not high" in err.decode()
    assert await api.queue.batch(2) is None  # only the admin's urgent batch was queued


async def test_events_stream_and_resume_from_a_sequence_number(api):
    async with api.http.ws_connect(f"/api/v1/events?after=0&token={ALICE}") as ws:
        await api.submit(1)
        first = await ws.receive_json(timeout=10)
        assert (first["kind"], first["batch_id"]) == ("submitted", 1)
    await api.submit(1)
    async with api.http.ws_connect(f"/api/v1/events?after={first['seq']}&token={ALICE}") as ws:
        second = await ws.receive_json(timeout=10)  # only what came after
        assert (second["kind"], second["batch_id"]) == ("submitted", 2)
    with pytest.raises(aiohttp.WSServerHandshakeError):
        async with api.http.ws_connect("/api/v1/events"):
            pass


async def test_a_retried_submit_returns_its_batch_even_past_the_rate_limit(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models, submitter_per_minute=1)) as w:
        status, first = await w.submit(1, key="k-1")
        assert status == 201
        status, again = await w.submit(1, key="k-1")
        assert (status, again["id"]) == (200, first["id"])
        status, other = await w.submit(1, key="k-2")
        assert (status, other["error"]["code"]) == (429, "limit_rate")
        status, bad = await w.submit(1, key="x" * 151)
        assert (status, bad["error"]["code"]) == (400, "bad_idempotency_key")


async def test_genbot_submit_sends_the_sheet_and_its_pictures_and_waits(tmp_path, demo_models):
    import asyncio

    from tests.conftest import PYTHON, python_env
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        w.start_executor()

        async def genbot(*args: str, token: str = ALICE) -> tuple[int, str, str]:
            env = python_env() | {"GENBOT_TOKEN": token}
            proc = await asyncio.create_subprocess_exec(
                PYTHON, "-m", "bot.cli", "submit", *args, "--server", w.url, cwd=ROOT, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            return proc.returncode, out.decode(), err.decode()

        code, out, err = await genbot("social_thumb", "examples/social_thumb.xlsx", "--wait")
        assert code == 0, err
        assert out.splitlines()[0].startswith("batch 1: 2 social_thumb jobs")
        assert "batch 1: 2 of 2 succeeded" in out and "files/results.xlsx" in out
        assert out.rstrip().splitlines()[-1].startswith("images:  http")  # where to look
        jobs = await w.queue.batch_jobs(1)
        assert {j.status for j in jobs} == {"succeeded"}  # the pictures went along
        code, _, err = await genbot("social_thumb", "examples/social_thumb.xlsx", token=VIEWER)
        assert code == 1 and "needs the submitter role" in err
        code, _, err = await genbot("nope", "examples/social_thumb.xlsx")
        assert code == 1 and "no template 'nope'" in err


async def test_schedules_through_the_api(api):
    def form(cron: str) -> aiohttp.FormData:
        f = aiohttp.FormData()
        f.add_field("cron", cron)
        f.add_field("timezone", "Asia/Shanghai")
        f.add_field("template", "social_thumb")
        f.add_field("sheet", b"image,title\nbottle.png,Daily\n", filename="daily.csv")
        f.add_field("pictures", BOTTLE, filename="bottle.png")
        return f
    status, body = await api.call("POST", "/schedules", ALICE, data=form("0 9 * * 1-5"))
    assert (status, body["error"]["code"]) == (403, "refused_role")
    status, body = await api.call("POST", "/schedules", ADMIN, data=form("9am daily"))
    assert (status, body["error"]["code"]) == (422, "bad_cron")
    status, made = await api.call("POST", "/schedules", ADMIN, data=form("0 9 * * 1-5"))
    assert status == 201 and made["id"] == 1 and made["next"].endswith("T09:00:00+08:00")
    status, listing = await api.call("GET", "/schedules", VIEWER)
    (only,) = listing["schedules"]
    assert (only["cron"], only["timezone"], only["sheet"], only["submitter"]) == \
        ("0 9 * * 1-5", "Asia/Shanghai", "daily.csv", "api:ops")
    status, body = await api.call("DELETE", "/schedules/1", ADMIN)
    assert (status, body) == (200, {"removed": 1})
    status, body = await api.call("DELETE", "/schedules/1", ADMIN)
    assert (status, body["error"]["code"]) == (404, "no_schedule")


# --- every route against every role -------------------------------------------------------
NOBODY = "nobody-token-00001"
ROLES = {"anonymous": None, "none": NOBODY, "viewer": VIEWER, "reviewer": REVIEWER,
         "other": BOB, "owner": ALICE, "admin": ADMIN}
NO, ANY, V, R, S, OWNER, A = range(7)  # who gets past the permission check: anyone, signed in
# or not (a public route) … only admins
ROUTES = [  # method, path, who passes, the answer once past the check
    ("GET", "/queue", V, 200), ("GET", "/workers", V, 200), ("GET", "/platforms", V, 200),
    ("GET", "/templates", V, 200),
    ("GET", "/templates/social_thumb", V, 200), ("GET", "/batches", V, 200),
    ("GET", "/batches/1", V, 200), ("GET", "/batches/1/files/results.xlsx", V, 404),
    ("GET", "/jobs", V, 200), ("GET", "/jobs/1", V, 200), ("GET", "/jobs/1/outputs/0", V, 404),
    ("GET", "/schedules", V, 200), ("GET", "/vocabulary", NO, 200), ("GET", "/me", V, 200),
    ("POST", "/batches", S, 415), ("POST", "/batches/1/retry", OWNER, 409),
    ("POST", "/jobs/2/cancel", OWNER, 200), ("POST", "/batches/1/cancel", OWNER, 200),
    ("POST", "/queue/pause", A, 200), ("POST", "/queue/resume", A, 200),
    ("GET", "/queue/leases", A, 200), ("POST", "/queue/hand-back", A, 400),  # (no body)
    ("POST", "/schedules", A, 415), ("DELETE", "/schedules/9", A, 404),
    ("GET", "/jobs/1/lineage", V, 200), ("GET", "/batches/1/picks", V, 200),
    ("GET", "/batches/1/picks.xlsx", V, 200), ("GET", "/batches/1/picks.png", V, 404),
    ("POST", "/jobs/1/actions", S, 400), ("PUT", "/jobs/1/rating", R, 400),  # (no body)
    ("PUT", "/jobs/1/review", R, 400), ("PUT", "/jobs/1/stars", R, 400),
    ("POST", "/batches/1/signoff", R, 409), ("DELETE", "/batches/1/signoff", A, 409),
    ("POST", "/batches/1/move", A, 400), ("POST", "/jobs/1/move", A, 400),  # (no body)
    ("GET", "/channels", V, 200), ("GET", "/batches/1/renditions", V, 200),
    ("GET", "/renditions/1", V, 404), ("GET", "/batches/1/deliverables.zip", V, 404),
    ("GET", "/batches/1/sheet", V, 200),
]


async def test_every_route_answers_each_role_as_the_rules_say(tmp_path, demo_models):
    """Anonymous: 401. Below the route's role (or not the owner): 403 with a refusal code.
    At or above it: the route's own answer (which may be a 404 or 409 about the thing)."""
    config = api_config(tmp_path, demo_models, tokens=(f"{NOBODY}=nobody",), default_role="none",
                        submitters=["api:alice", "api:bob"])
    async with ApiWorld(config) as w:
        await w.submit(3, token=ALICE)
        rank = {"anonymous": NO, "none": ANY, "viewer": V, "reviewer": R, "other": S,
                "owner": OWNER, "admin": A}
        for method, path, needs, answer in ROUTES:
            for role, token in ROLES.items():
                await w.queue.resume()  # each call starts from the same state
                status, body = await w.call(method, path, token)
                passes = rank[role] >= needs and not (needs == OWNER and role == "other")
                expected = answer if needs == NO else 401 if role == "anonymous" else \
                    answer if passes else 403
                assert status == expected, (method, path, role, body)
                if status == 403:
                    assert body["error"]["code"].startswith("refused_"), body


async def test_listing_batches_paging_by_offset_thumbnails_and_pause_events(api):
    for rows in (2, 3):
        await api.submit(rows)
    status, listing = await api.call("GET", "/batches?limit=1", VIEWER)
    assert [(b["id"], b["total"], b["counts"]) for b in listing["batches"]] == \
        [(2, 3, {"queued": 3})] and listing["next_cursor"] == 2
    status, rest = await api.call("GET", "/batches?cursor=2", VIEWER)
    assert [b["id"] for b in rest["batches"]] == [1] and rest["next_cursor"] is None
    status, page = await api.call("GET", "/jobs?offset=1&limit=2", VIEWER)
    assert [j["id"] for j in page["jobs"]] == [4, 3] and page["total"] == 5
    status, page = await api.call("GET", "/jobs?offset=0&batch=1", VIEWER)
    assert [j["id"] for j in page["jobs"]] == [2, 1] and page["total"] == 2
    status, body = await api.call("GET", "/jobs?offset=1&cursor=3", VIEWER)
    assert (status, body["error"]["code"]) == (400, "bad_query")

    status, queue = await api.call("GET", "/queue", VIEWER)
    seq = queue["seq"]  # the stream from now on
    assert queue["workers"] == []  # no executor has started yet
    await api.call("POST", "/queue/pause", ADMIN)
    async with api.http.ws_connect(f"/api/v1/events?after={seq}&token={VIEWER}") as ws:
        paused = await ws.receive_json(timeout=10)
        await api.call("POST", "/queue/resume", ADMIN)
        resumed = await ws.receive_json(timeout=10)
    assert [(e["kind"], e["data"]) for e in (paused, resumed)] == \
        [("paused", {"by": "api:ops"}), ("resumed", {"by": "api:ops"})]

    api.start_executor()
    await api.finish(timeout=60)
    status, queue = await api.call("GET", "/queue", VIEWER)
    (worker,) = queue["workers"]
    assert (worker["id"], worker["device"], worker["jobs_run"]) == ("test-executor", "cpu", 5)
    await api.stop_executor()
    status, body = await api.call("GET", "/workers", VIEWER)
    assert [(x["id"], x["state"]) for x in body["workers"]] == [("test-executor", "stopped")]
    status, thumb = await api.call("GET", "/jobs/1/outputs/0?size=128", VIEWER)
    image = Image.open(io.BytesIO(thumb))
    assert status == 200 and image.format == "WEBP" and max(image.size) == 128
    assert api.service.core.store.path("outputs/batch_1").is_dir()
    status, again = await api.call("GET", "/jobs/1/outputs/0?size=128", VIEWER)
    assert again == thumb  # made once, then served
    headers = {"Authorization": f"Bearer {VIEWER}"}
    async with api.http.get("/api/v1/jobs/1/outputs/0?size=128", headers=headers) as r:
        etag = r.headers["ETag"]
    async with api.http.get("/api/v1/jobs/1/outputs/0?size=128",
                            headers={**headers, "If-None-Match": etag}) as r:
        assert r.status == 304  # a browser's cached copy is still right: no bytes sent
    for size in ("5000", "129", "16", "-1", "abc"):  # a few fixed sizes, each made once
        status, body = await api.call("GET", f"/jobs/1/outputs/0?size={size}", VIEWER)
        assert (status, body["error"]["code"]) == (400, "bad_query")
    status, thumb = await api.call("GET", "/jobs/1/outputs/0?size=256", VIEWER)
    assert status == 200 and max(Image.open(io.BytesIO(thumb)).size) == 256


# --- the dashboard's session: a cookie for a token, CSRF-safe ----------------------------
async def test_a_dashboard_session_acts_as_its_token_and_changes_need_the_csrf_token(api):
    async def sign_in(token, **headers):
        async with api.http.post("/dashboard/session", json={"token": token},
                                 headers=headers) as r:
            return r.status, await r.json(), r.cookies
    status, body, _ = await sign_in("wrong-token-123456")
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    status, body, _ = await sign_in(ADMIN, Origin="https://evil.example")
    assert (status, body["error"]["code"]) == (403, "csrf")
    status, me, cookies = await sign_in(ADMIN, Origin=api.url)
    assert status == 200 and (me["user"], me["role"]) == ("api:ops", "admin")
    assert "pause" in me["may"] and me["csrf"]
    cookie = cookies["genbot_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"

    async def with_cookie(method, path, **headers):
        async with api.http.request(method, f"/api/v1{path}", headers=headers) as r:
            return r.status, await r.json()
    assert (await with_cookie("GET", "/queue"))[0] == 200  # reading needs no CSRF token
    status, body = await with_cookie("POST", "/queue/pause")
    assert (status, body["error"]["code"]) == (403, "csrf")
    status, body = await with_cookie("POST", "/queue/pause", **{"X-CSRF-Token": "guess"})
    assert (status, body["error"]["code"]) == (403, "csrf")
    status, body = await with_cookie("POST", "/queue/pause", Origin="https://evil.example",
                                     **{"X-CSRF-Token": me["csrf"]})
    assert (status, body["error"]["code"]) == (403, "csrf")
    assert not await api.queue.paused()
    status, body = await with_cookie("POST", "/queue/pause", Origin=api.url,
                                     **{"X-CSRF-Token": me["csrf"]})
    assert (status, body["paused"]) == (200, True)
    audit = [(a.user, a.action, a.allowed) for a in await api.core.access.audit_log()]
    assert ("ops", "pause", True) in audit  # the cookie acted as the token's user

    with pytest.raises(aiohttp.WSServerHandshakeError):  # a cross-site page's WebSocket
        async with api.http.ws_connect("/api/v1/events", headers={"Origin": "https://evil.example"}):
            pass
    async with api.http.ws_connect("/api/v1/events?after=0", headers={"Origin": api.url}) as ws:
        assert (await ws.receive_json(timeout=10))["kind"] == "paused"

    async with api.http.delete("/dashboard/session") as r:
        assert r.status == 403  # signing out is a change too
    async with api.http.delete("/dashboard/session", headers={"X-CSRF-Token": me["csrf"]}) as r:
        assert r.status == 200
    async with api.http.get("/dashboard/session") as r:
        assert r.status == 401
    assert (await with_cookie("GET", "/queue"))[0] == 401


async def test_wrong_tokens_at_sign_in_are_slowed_down_but_a_right_one_always_signs_in(api):
    """Behind a proxy everyone shares one address: one guesser must not lock them out."""
    for _ in range(10):
        async with api.http.post("/dashboard/session", json={"token": "guess-0000000000"}) as r:
            assert r.status == 401
    async with api.http.post("/dashboard/session", json={"token": "guess-0000000001"}) as r:
        assert (r.status, r.headers["Retry-After"]) == (429, "60")
        assert (await r.json())["error"]["code"] == "too_many_tries"
    async with api.http.post("/dashboard/session", json={"token": ADMIN}) as r:
        assert r.status == 200 and (await r.json())["user"] == "api:ops"


async def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(api):
    async with api.http.post("/dashboard/session", json={"token": ALICE}) as r:
        me, cookie = await r.json(), r.cookies["genbot_session"].value
    copy = {"Cookie": f"genbot_session={cookie}"}
    async with aiohttp.ClientSession(api.url) as elsewhere:  # a copied cookie, another client
        async with elsewhere.get("/api/v1/queue", headers=copy) as r:
            assert r.status == 200
        async with api.http.delete("/dashboard/session",
                                   headers={"X-CSRF-Token": me["csrf"]}) as r:
            assert r.status == 200
        async with elsewhere.get("/api/v1/queue", headers=copy) as r:
            assert r.status == 401
        async with elsewhere.get("/dashboard/session", headers=copy) as r:
            assert r.status == 401
    async with api.http.post("/dashboard/session", json={"token": ALICE}) as r:
        assert r.status == 200  # signing in again makes a new session
    async with api.http.get("/api/v1/queue") as r:
        assert r.status == 200


async def test_the_dashboard_page_is_served_with_a_strict_policy(api):
    async with api.http.get("/", allow_redirects=False) as r:
        assert (r.status, r.headers["Location"]) == (302, "/dashboard/")
    async with api.http.get("/dashboard/") as r:
        page = await r.text()
        policy = r.headers["Content-Security-Policy"]
    assert '<script src="app.js"' in page and "frame-ancestors 'none'" in policy
    assert "script-src 'self'" in policy and "unsafe" not in policy
    for asset, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        async with api.http.get(f"/dashboard/{asset}") as r:
            assert r.status == 200 and r.content_type == kind
    async with api.http.get("/dashboard/../storage/config.py") as r:
        assert r.status == 404


async def test_a_fresh_install_without_tokens_gets_one_local_admin_token(tmp_path, demo_models):
    import stat
    cfg = executor_config(tmp_path / "data", demo_models, service={"port": 0})
    async with ApiWorld(cfg) as w:
        path = tmp_path / "data" / "local-admin.token"
        token = path.read_text().strip()
        assert len(token) >= 24 and stat.S_IMODE(path.stat().st_mode) == 0o600
        status, body = await w.call("POST", "/queue/pause", token)
        assert (status, body["paused"]) == (200, True)
        async with w.http.post("/dashboard/session", json={"token": token}) as r:
            assert (await r.json())["role"] == "admin"
    async with ApiWorld(cfg) as again:  # the same token after a restart
        assert (await again.call("GET", "/queue", token))[0] == 200
    async with ApiWorld(api_config(tmp_path / "other", demo_models)) as configured:
        assert (await configured.call("GET", "/queue", token))[0] == 401
        assert not (tmp_path / "other" / "data" / "local-admin.token").exists()


# --- hostile input: no header, cookie, query or body makes a 5xx ---------------------------
async def raw_http(port: int, head: bytes, body: bytes = b"") -> tuple[int, dict, bytes]:
    """One request written byte for byte (aiohttp's client refuses to send such headers)."""
    import asyncio
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                     + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=20)
    finally:
        writer.close()
    top, _, content = answer.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, content


HOSTILE_HEADERS = [
    b"Authorization: Bearer \xff\xfe", b"Authorization: Bearer \xc3\xa9t\xc3\xa9",
    b"Authorization: Bearer " + b"x" * 6000, b"Authorization: Basic \xff",
    b"Authorization: Bearer \xed\xa0\x80",  # an encoded lone surrogate
    b"Cookie: genbot_session=\xff\xfe", b"Cookie: genbot_session=\xc3\xa9.\xc3\xa9",
    b'Cookie: genbot_session="unterminated', b"Cookie: genbot_session=a.b.c; =; ;;",
    b"X-CSRF-Token: \xff\xfe", b"Origin: \xff", b"Origin: http://[", b"Origin: null",
    b"Idempotency-Key: \xff\xfe", b"Content-Type: multipart/form-data; boundary=\xff",
    b"Content-Type: application/json; charset=\xff", b"Content-Type: \xff",
    b"X-Forwarded-For: \xff", b"Accept-Language: \xff",
]
HOSTILE_QUERIES = ["?limit=\xb2", "?cursor=-1", "?cursor=%FF", "?offset=\u0663",
                   "?size=\xb2", "?after=\xff", "?status=%00", "?submitter=%ED%A0%80"]
HOSTILE_BODIES = [b'{"token": "\\ud800"}', b"\xff\xfe{", b'"x"', b"[]", b'{"token": 5}',
                  b'{"template": "\\udcff", "rows": [{"\\ud800": 1}]}',
                  b"--x\r\nContent-Disposition: form-data; name=\"\xff\"\r\n\r\n\xff\r\n--x--"]


async def test_hostile_bytes_in_every_header_and_field_never_make_a_5xx(api, caplog):
    import logging
    caplog.set_level(logging.ERROR)
    await api.submit(1)
    async with api.http.post("/dashboard/session", json={"token": ALICE}) as r:
        cookie = r.cookies["genbot_session"].value
    port = api.service.port
    paths = [(m, f"/api/v1{p}") for m, p, _, _ in ROUTES] + [
        ("GET", "/api/v1/events"), ("GET", "/dashboard/session"), ("POST", "/dashboard/session"),
        ("DELETE", "/dashboard/session"), ("GET", "/healthz"), ("GET", "/metrics"),
        ("GET", "/api/v1/nowhere"), ("GET", "/dashboard/")]
    seen = 0
    for method, path in paths:
        for credentials in (b"", b"Authorization: Bearer " + ALICE.encode(),
                            b"Cookie: genbot_session=" + cookie.encode()):
            for extra in HOSTILE_HEADERS:
                head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                head += b"".join(h + b"\r\n" for h in (credentials, extra) if h)
                status, headers, content = await raw_http(port, head)
                seen += 1
                assert status < 500, (method, path, credentials, extra, content[:300])
                if status >= 400 and not path.startswith("/dashboard/") or \
                        path == "/dashboard/session":
                    assert headers["content-type"].startswith("application/json"), \
                        (method, path, extra, content[:200])
        for query in HOSTILE_QUERIES:
            head = (f"{method} {path}".encode() + query.encode("utf-8", "surrogatepass")
                    + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                    + ADMIN.encode() + b"\r\n")
            status, _, content = await raw_http(port, head)
            assert status < 500, (method, path, query, content[:300])
        if method in ("POST", "PUT", "DELETE"):
            for body in HOSTILE_BODIES:
                for kind in (b"application/json", b"multipart/form-data; boundary=x"):
                    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
                            + b"Authorization: Bearer " + ADMIN.encode()
                            + b"\r\nContent-Type: " + kind + b"\r\n")
                    status, _, content = await raw_http(port, head, body)
                    assert status < 500, (method, path, body, content[:300])
    assert seen > 1000
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


# --- the API does what its document says ---------------------------------------------------
async def test_the_api_answers_as_its_openapi_document_says(api):
    status, doc = await api.call("GET", "/openapi.json", token=None)
    params = {p["name"]: p["schema"] for p in doc["paths"]["/api/v1/batches"]["get"]["parameters"]}
    assert params["limit"]["maximum"] == 500 and params["cursor"]["minimum"] == 0
    for path in ("/batches?limit=501", "/batches?limit=0", "/batches?cursor=-1",
                 "/jobs?limit=1001", "/jobs?cursor=-1", "/jobs?batch=-2", "/jobs?offset=-1",
                 "/jobs?cursor=1&offset=1"):
        status, body = await api.call("GET", path, VIEWER)
        assert (status, body["error"]["code"]) == (400, "bad_query"), path
    jobs = {p["name"]: p for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"]}
    assert "not with cursor" in jobs["offset"]["description"]
    status, body = await api.call("GET", "/batches?limit=500", VIEWER)
    assert status == 200
    for method, path in (("GET", "/nowhere"), ("POST", "/queue"), ("GET", "/batches/x")):
        status, body = await api.call(method, path, VIEWER)
        assert status in (404, 405) and body["error"]["code"] in ("not_found",
                                                                 "method_not_allowed")
    events = doc["paths"]["/api/v1/events"]["get"]
    assert "101" in events["responses"] and "200" not in events["responses"]
    status, body = await api.call("GET", "/events", VIEWER)  # a plain GET, no upgrade
    assert (status, body["error"]["code"]) == (426, "websocket_only")
    thumbs = {p["name"]: p for p in
              doc["paths"]["/api/v1/jobs/{id}/outputs/{index}"]["get"]["parameters"]}
    assert thumbs["size"]["schema"]["enum"] == [128, 256, 512]


# --- bodies as big as the limits say ---------------------------------------------------------
def big_png(megabytes: float) -> bytes:
    """A real PNG of about this many megabytes (noise does not compress)."""
    import os
    side = int((megabytes * 2**20 / 3) ** 0.5) + 1
    image = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=0)
    return out.getvalue()


async def test_a_picture_up_to_the_configured_limit_is_accepted_and_past_it_refused_plainly(
        tmp_path, demo_models):
    config = api_config(tmp_path, demo_models)
    config = config.replaced(IntakeConfig, max_image_mb=3, max_file_mb=1)
    async with ApiWorld(config) as w:
        picture = big_png(2.4)  # past aiohttp's default 1 MiB body
        assert 2.3 * 2**20 < len(picture) < 3 * 2**20
        form = aiohttp.FormData()
        form.add_field("template", "social_thumb")
        form.add_field("sheet", b"image,title\nbig.png,Big\n", filename="sheet.csv")
        form.add_field("pictures", picture, filename="big.png")
        status, body = await w.call("POST", "/batches", data=form)
        assert status == 201 and body["total"] == 1

        form = aiohttp.FormData()
        form.add_field("template", "social_thumb")
        form.add_field("sheet", b"image,title\nbig.png,Big\n", filename="sheet.csv")
        form.add_field("pictures", big_png(3.2), filename="big.png")
        status, body = await w.call("POST", "/batches", data=form)
        assert (status, body["error"]["code"]) == (413, "too_large")
        assert body["error"]["limit_key"] == "[intake] max_image_mb" \
            and body["error"]["limit_mb"] == 3 and "big.png" in body["error"]["message"]

        form = aiohttp.FormData()
        form.add_field("template", "social_thumb")
        form.add_field("sheet", b"image,title\n" + b"bottle.png,x\n" * 120_000,
                       filename="sheet.csv")
        status, body = await w.call("POST", "/batches", data=form)
        assert (status, body["error"]["limit_key"]) == (413, "[intake] max_file_mb")

        rows = [{"image": "bottle.png", "title": "x" * 1000}] * 40_000  # 40 MB of JSON
        status, body = await w.call("POST", "/batches", json={"template": "social_thumb",
                                                              "rows": rows})
        assert (status, body["error"]["code"]) == (413, "too_large")
        assert "31 MB" in body["error"]["message"]  # 1 + 10 × 3
        assert await w.queue.batch_progress(2) is None  # nothing more was queued


async def test_genbot_submit_prints_a_refusal_by_size_not_a_traceback(tmp_path, demo_models):
    import asyncio

    from tests.conftest import PYTHON, python_env
    config = api_config(tmp_path, demo_models)
    config = config.replaced(IntakeConfig, max_image_mb=1)
    async with ApiWorld(config) as w:
        folder = tmp_path / "work"
        folder.mkdir()
        (folder / "big.png").write_bytes(big_png(1.5))
        (folder / "sheet.csv").write_text("image,title\nbig.png,Big\n")
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "bot.cli", "submit", "social_thumb", str(folder / "sheet.csv"),
            "--server", w.url, cwd=ROOT, env=python_env() | {"GENBOT_TOKEN": ALICE},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
    assert proc.returncode == 1, err
    assert "Traceback" not in err.decode()
    assert "larger than 1 MB ([intake] max_image_mb)" in err.decode()


# --- /queue and /healthz under load ------------------------------------------------------
async def test_healthz_answers_without_the_database_and_queue_reads_its_own_writes(api):
    """Two hundred /queue calls cost a handful of computations, and /healthz never waits
    on the database: it answers while every database call hangs."""
    import asyncio
    await api.submit(2)
    computed = 0
    real = api.service.runner.app.router  # (the Api object holds the summary)
    summary = next(r.handler.__self__ for r in real.routes()
                   if r.resource and r.resource.canonical == "/healthz").summary
    compute = summary.compute

    async def counting():
        nonlocal computed
        computed += 1
        return await compute()
    summary.compute = counting
    answers = await asyncio.gather(*(api.call("GET", "/queue", VIEWER) for _ in range(200)))
    assert all(status == 200 and body["queued"] == 2 for status, body in answers)
    assert computed <= 4
    await api.call("POST", "/queue/pause", ADMIN)
    status, queue = await api.call("GET", "/queue", VIEWER)
    assert queue["paused"] is True  # read after the write, never a stale copy

    hang = asyncio.Event()
    fetch = api.queue.db.fetch

    async def stuck(*args, **kwargs):
        await hang.wait()
        return await fetch(*args, **kwargs)
    api.queue.db.fetch = stuck
    try:
        async with api.http.get("/healthz") as r:
            health = await asyncio.wait_for(r.json(), timeout=5)
        assert r.status == 200 and health["status"] == "ok" and health["paused"] is True
    finally:
        hang.set()
        api.queue.db.fetch = fetch


async def test_genbot_submit_tells_a_refused_token_from_an_unreachable_server(
        tmp_path, demo_models):
    import asyncio

    from tests.conftest import PYTHON, python_env
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        sheet = tmp_path / "s.csv"
        sheet.write_text("image,title\nbottle.png,A\n")

        async def submit(token: str, server: str = w.url) -> tuple[int, str]:
            proc = await asyncio.create_subprocess_exec(
                PYTHON, "-m", "bot.cli", "submit", "social_thumb", str(sheet), "--server",
                server, cwd=tmp_path, env=python_env() | {"GENBOT_TOKEN": token},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            _, err = await proc.communicate()
            return proc.returncode, err.decode()
        code, err = await submit("not-a-token-00000000")
        assert code == 3 and "local-admin.token" in err and "Traceback" not in err
        code, err = await submit(ALICE, server="http://127.0.0.1:9")  # nothing listens there
        assert code == 2 and "cannot reach" in err


# --- stored files: served as what their bytes are, never run on genbot's origin ----------
async def finished_with(api, files: dict[str, bytes]) -> None:
    """Job 1 of a new batch succeeded with these files (as a server may have left them,
    before outputs were checked): written to the store and recorded as its outputs."""
    status, _ = await api.submit(1)
    assert status == 201
    lease = await api.queue.claim("test-executor")
    store = api.service.core.store
    outputs = [store.write(f"outputs/batch_1/{name}", data) for name, data in files.items()]
    await api.queue.complete(lease, outputs)


@pytest.mark.parametrize(("name", "data", "kind", "inline"), [
    ("2.html", media.HTML, "application/octet-stream", False),  # a stored page: a download
    ("2.png", media.TEXT, "application/octet-stream", False),  # text named .png
    ("2.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
     "application/octet-stream", False),
    ("2.html", media.image("PNG"), "image/png", True),  # a PNG, whatever its name
    ("2.png", media.image("JPEG"), "image/jpeg", True),
    ("2.webp", media.image("WEBP"), "image/webp", True),
    ("2.gif", media.image("GIF"), "image/gif", True),
    ("2.webm", media.webm(), "video/webm", False),
    ("2.mp4", media.mp4(), "video/mp4", False)])
async def test_an_output_is_served_as_its_bytes_say_and_never_as_a_page(
        api, name, data, kind, inline):
    await finished_with(api, {name: data})
    async with api.http.get("/api/v1/jobs/1/outputs/0",
                            headers={"Authorization": f"Bearer {VIEWER}"}) as r:
        assert r.status == 200 and await r.read() == data
        assert r.content_type == kind
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
        if inline:
            assert "Content-Disposition" not in r.headers
        else:
            assert r.headers["Content-Disposition"] == \
                f"attachment; filename=\"{name}\"; filename*=UTF-8''{name}"


async def test_a_compressed_file_beside_an_output_is_not_sent_in_its_place(api):
    """aiohttp sends `x.png.gz` for `x.png` to a client that accepts gzip: not here."""
    import gzip
    await finished_with(api, {"2.png": media.image("PNG")})
    api.service.core.store.write("outputs/batch_1/2.png.gz", gzip.compress(media.HTML))
    async with api.http.get("/api/v1/jobs/1/outputs/0", headers={
            "Authorization": f"Bearer {VIEWER}", "Accept-Encoding": "gzip, br"}) as r:
        assert await r.read() == media.image("PNG") and r.content_type == "image/png"
        assert "Content-Encoding" not in r.headers


async def test_a_batch_file_is_served_as_its_bytes_say(api):
    """contact.png inline as a PNG; a file of other bytes under its name is a download."""
    await finished_with(api, {"2.png": media.image("PNG")})
    store = api.service.core.store
    store.write("outputs/batch_1/contact.png", media.HTML)
    async with api.http.get("/api/v1/batches/1/files/contact.png",
                            headers={"Authorization": f"Bearer {VIEWER}"}) as r:
        assert r.status == 200 and r.content_type == "application/octet-stream"
        assert r.headers["Content-Disposition"].startswith(
            'attachment; filename="batch-1-contact.png"')
        assert r.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    store.write("outputs/batch_1/contact.png", media.image("PNG"))
    async with api.http.get("/api/v1/batches/1/files/contact.png",
                            headers={"Authorization": f"Bearer {VIEWER}"}) as r:
        assert r.content_type == "image/png" and "Content-Disposition" not in r.headers
        assert r.headers["X-Content-Type-Options"] == "nosniff"


async def test_the_api_and_metrics_say_what_is_held_next_and_canceled(api):
    """An estimate says what it waits for (no executor, the pause); jobs an executor holds
    but is not on are next — in /queue and in genbot_jobs — not running; a batch canceled
    before any image offers no contact sheet (there is none to fetch)."""
    from prometheus_client.parser import text_string_to_metric_families

    from storage.workers import Workers

    async def jobs_gauge() -> dict[str, float]:
        async with api.http.get("/metrics") as r:
            text = await r.text()
        return {s.labels["status"]: s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name == "genbot_jobs" and s.labels["priority"] == "normal"}
    await api.submit(3)
    _, batch = await api.call("GET", "/batches/1")
    _, queue = await api.call("GET", "/queue")
    assert (batch["held"], queue["held"]) == ("no_executor", "no_executor")
    await Workers.of(api.queue).beat("gpu1:7", host="gpu1", pid=7, device="cuda:0",
                                     version="0.1.0", job=1)
    await api.call("POST", "/queue/pause", ADMIN)
    _, queue = await api.call("GET", "/queue")
    assert queue["held"] == "paused"
    await api.call("POST", "/queue/resume", ADMIN)
    first, second = await api.queue.claim_many("gpu1:7", 2)  # one group, on job 1 first
    await api.queue.claim("gpu1:7", ahead=True)  # job 3, claimed ahead
    _, queue = await api.call("GET", "/queue")
    assert queue["held"] is None
    assert [(j["id"], j["state"], j["executor"]) for j in queue["jobs"]] == [
        (1, "running", "gpu1:7"), (2, "next", "gpu1:7"), (3, "next", "gpu1:7")]
    counts = queue["counts"]
    assert (counts["queued"], counts["next"], counts["running"]) == ({}, {"normal": 2},
                                                                      {"normal": 1})
    gauge = await jobs_gauge()
    assert (gauge["queued"], gauge["next"], gauge["running"]) == (0, 2, 1)

    await api.submit(2)
    await api.call("POST", "/batches/2/cancel")
    _, canceled = await api.call("GET", "/batches/2")
    assert canceled["counts"] == {"canceled": 2} and canceled["held"] is None
    assert canceled["files"]["contact"] is None  # no image: no sheet, no dead link
    status, _ = await api.call("GET", canceled["files"]["results"].removeprefix("/api/v1"))
    assert status == 200
