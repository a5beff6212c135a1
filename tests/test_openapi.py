"""The OpenAPI document against the live API: every route served is documented and every
documented one served, and every answer is what the document says it is — schemathesis'
response checks (status, content type, schema) on requests it generates from the
document, with a token of each role and without one, and on a tour that reaches every
documented status of every operation.

One service for the module, its first batch run by the executor (so there are images,
results and an executor to list); the tour runs first, then the generated requests."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil

import msgspec
import pytest
import pytest_asyncio
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bot.settings import IntakeConfig
from bot.webhooks.payloads import EVENTS
from storage.config import QueueConfig
from templates.settings import TemplatesConfig, shipped_dir
from tests.fakes.api import ADMIN, ALICE, BOB, BOTTLE, REVIEWER, VIEWER, ApiWorld, api_config
from tests.fakes.chat import SteeredPlatform
from tests.fakes.jobs import finish_all
from tests.fakes.webhooks import Receiver
from tests.fakes.workflows import TXT2IMG

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOBODY = "nobody-token-00001"  # a token whose user has no role
WITH = {"admin": ADMIN, "submitter": ALICE, "other": BOB, "viewer": VIEWER, "none": NOBODY}
WITHOUT = {"anonymous": None, "wrong": "not-a-token-0000000"}
PUBLIC = ("/api/v1/openapi.json", "/api/v1/vocabulary")  # no credentials needed (the
# vocabulary: the sign-in page's words)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
QUEUE_SIZE, IMAGE_MB = 10, 1


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory, demo_models):
    from bot.webhooks.endpoints import new_secret
    hook = await Receiver(new_secret()).start()  # "tour" takes deliveries; "down" refuses
    config = api_config(tmp_path_factory.mktemp("openapi"), demo_models,
                        tokens=(f"{NOBODY}=nobody",), default_role="none",
                        submitters=["api:alice", "api:bob"], submitter_per_minute=1,
                        webhooks=[{"name": "tour", "url": hook.url, "secret": hook.secret},
                                  {"name": "down", "url": "http://127.0.0.1:9/gone",
                                   "secret": hook.secret, "events": ["batch.canceled"]}])
    folder = tmp_path_factory.mktemp("templates")  # imports go here, beside the shipped ones
    shutil.copytree(shipped_dir(), folder, dirs_exist_ok=True)
    config = config.replaced(QueueConfig, max_queue_size=QUEUE_SIZE).replaced(
        IntakeConfig, max_image_mb=IMAGE_MB).replaced(TemplatesConfig, dir=str(folder))
    gateway = SteeredPlatform("discord", "gateway", connection=True)  # (what /platforms
    gateway.mark_signed_in(False, "invalid token")  # lists: every field, a null among them)
    async with ApiWorld(config, [gateway, SteeredPlatform("slack", "events_api")]) as w:
        assert (await w.submit(2, token=ADMIN, sku=True, channels="douyin"))[0] == 201
        # (batch 1: run, so it has images, and its files for Douyin)
        w.start_executor()
        await w.finish(timeout=60)
        await w.stop_executor()
        assert (await w.submit(1, token=ADMIN))[0] == 201  # batch 2: its job fails
        lease = await w.queue.claim("tour")
        await w.queue.fail(lease, "a failure to retry", retry=False)
        # batch 3: a sweep of version 1 compared with version 2 (jobs 4–7), finished and
        # rated: something to refine and to tally
        from tests.fakes.apps import second_version
        await second_version(w.app, "social_thumb", "watermark", "v2 mark")
        assert (await w.submit(1, token=ADMIN, template="social_thumb@1",
                               vary=["width=256,512"], compare=["social_thumb@2"]))[0] == 201
        for job in await finish_all(w.app, 3):
            await w.call("PUT", f"/jobs/{job.id}/rating", token=ADMIN, json={
                "rating": "keep" if job.values["width"] == 512 else "reject"})
        clock = w.queue.clock  # batch 4 (job 8): alice's, made an hour ago (outside her one
        w.queue.clock = lambda: clock() - 3600  # a minute) and finished: a change asked of
        try:  # its image is queued as hers, refused while she is at her limit
            assert (await w.submit(1, token=ALICE))[0] == 201
        finally:
            w.queue.clock = clock
        await finish_all(w.app, 4)
        status, w.doc = await w.call("GET", "/openapi.json", token=None)
        assert status == 200
        w.schema = schemathesis.openapi.from_dict(w.doc)
        w.hook_bodies = hook.events
        yield w
    await hook.stop()


def documented(doc: dict) -> set[tuple[str, str, int]]:
    return {(method.upper(), path, int(status)) for path, ops in doc["paths"].items()
            for method, op in ops.items() for status in op["responses"]}


async def test_every_route_served_is_documented_and_every_documented_one_served(world):
    served = {(r.method, re.sub(r"\{(\w+):[^}]+\}", r"{\1}", r.resource.canonical))
              for r in world.service.runner.app.router.routes()
              if r.resource and r.resource.canonical.startswith("/api/v1/")
              and r.method != "HEAD"}  # (aiohttp adds HEAD beside each GET)
    assert served == {(m, p) for m, p, _ in documented(world.doc)}
    for path, ops in world.doc["paths"].items():
        for method, op in ops.items():
            public = op.get("security") == []
            assert public == (path in PUBLIC), (method, path)
            assert public or {"401", "403"} <= set(op["responses"]), (method, path)


def conforms(world, method: str, template: str, path: str, response: requests.Response,
             checks=CHECKS) -> None:
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/?]+)", re.escape(template))
    values = re.match(pattern, path)
    assert values, (template, path)
    case = world.schema[template][method].Case(path_parameters=values.groupdict())
    case.validate_response(response, checks=checks)


def concrete(template: str) -> str:
    """A path of the template that routes: batch and job 1, the first output, a real name."""
    return (template.replace("{id}", "1").replace("{index}", "0").replace("{endpoint}", "tour")
            .replace("{name}", "contact.png" if "files" in template else "social_thumb"))


def tour(world) -> set[tuple[str, str, int]]:
    """Known-good requests for each documented status; each answer checked. What was seen."""
    url, seen = world.url, set()
    sheet = ("sheet.csv", b"image,title\nbottle.png,Tour\n", "text/csv")
    picture = ("bottle.png", BOTTLE, "image/png")
    too_big = ("big.png", os.urandom(int(IMAGE_MB * 1.2 * 2**20)), "image/png")
    rows = {"template": "social_thumb", "rows": [{"image": "bottle.png", "title": "x"}]}

    def call(token, method, template, expected, path=None, **kw):
        headers = kw.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        path = path or concrete(template)
        response = requests.request(method, url + path, headers=headers, timeout=30, **kw)
        assert response.status_code == expected, (method, path, response.text)
        conforms(world, method, template, path, response)
        seen.add((method, template, expected))

    for path, ops in world.doc["paths"].items():  # who asks is settled first, on every route
        for method, op in ops.items():
            if "401" in op["responses"]:
                call(WITHOUT["wrong"], method.upper(), path, 401)
                call(NOBODY, method.upper(), path, 403)

    v = "/api/v1"
    call(None, "GET", f"{v}/openapi.json", 200)
    call(None, "GET", f"{v}/vocabulary", 200)  # (the sign-in page's words)
    for template in ("/queue", "/workers", "/platforms", "/templates", "/templates/{name}",
                     "/batches", "/batches/{id}", "/jobs", "/jobs/{id}",
                     "/jobs/{id}/outputs/{index}", "/batches/{id}/files/{name}", "/schedules",
                     "/vocabulary", "/me"):
        call(VIEWER, "GET", v + template, 200)
    call(VIEWER, "GET", f"{v}/batches/{{id}}/files/{{name}}", 200,
         path=f"{v}/batches/1/files/results.xlsx")
    call(VIEWER, "GET", f"{v}/jobs/{{id}}/outputs/{{index}}", 200,
         path=f"{v}/jobs/1/outputs/0?size=128")
    call(VIEWER, "GET", f"{v}/jobs", 200, path=f"{v}/jobs?offset=1&limit=1")
    zipped = f"{v}/batches/{{id}}/images.zip"
    call(VIEWER, "GET", zipped, 200)
    call(VIEWER, "GET", zipped, 400, path=f"{v}/batches/1/images.zip?review=liked")
    call(VIEWER, "GET", zipped, 404, path=f"{v}/batches/2/images.zip")  # (its job failed)
    call(VIEWER, "GET", f"{v}/channels", 200, path=f"{v}/channels?lang=zh")
    made = f"{v}/batches/{{id}}/renditions"
    call(VIEWER, "GET", made, 200)
    call(VIEWER, "GET", made, 404, path=f"{v}/batches/99/renditions")
    call(VIEWER, "GET", f"{v}/renditions/{{id}}", 200)
    call(VIEWER, "GET", f"{v}/renditions/{{id}}", 404, path=f"{v}/renditions/99")
    call(VIEWER, "GET", f"{v}/batches/{{id}}/sheet", 200)  # (its sheet.csv, filled in)
    call(VIEWER, "GET", f"{v}/batches/{{id}}/sheet", 404, path=f"{v}/batches/99/sheet")
    shipped = f"{v}/batches/{{id}}/deliverables.zip"
    call(VIEWER, "GET", shipped, 200, path=f"{v}/batches/1/deliverables.zip?channel=douyin")
    call(VIEWER, "GET", shipped, 400, path=f"{v}/batches/1/deliverables.zip?channel=ebay")
    call(VIEWER, "GET", shipped, 404, path=f"{v}/batches/2/deliverables.zip")
    for template in ("/templates/{name}", "/batches/{id}", "/jobs/{id}",
                     "/jobs/{id}/outputs/{index}", "/batches/{id}/files/{name}"):
        call(VIEWER, "GET", v + template, 404, path=v + template.replace(
            "{name}", "nope").replace("{id}", "99").replace("{index}", "0"))
    for template, query in (("/batches", "limit=0"), ("/jobs", "cursor=1&offset=1"),
                            ("/jobs/{id}/outputs/{index}", "size=5"), ("/events", "after=x")):
        call(VIEWER, "GET", v + template, 400, path=f"{concrete(v + template)}?{query}")
    call(VIEWER, "GET", f"{v}/events", 426)
    with requests.get(f"{url}{v}/events", stream=True, timeout=30, headers={
            "Authorization": f"Bearer {VIEWER}", "Connection": "Upgrade",
            "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as upgraded:
        assert upgraded.status_code == 101
        conforms(world, "GET", f"{v}/events", f"{v}/events", upgraded,  # (a 1xx is no
                 checks=CHECKS[1:])  # server error, whatever not_a_server_error thinks)
        seen.add(("GET", f"{v}/events", 101))

    call(ADMIN, "POST", f"{v}/queue/pause", 200)
    call(ADMIN, "POST", f"{v}/queue/resume", 200)
    call(ADMIN, "GET", f"{v}/queue/leases", 200)
    hand_back = f"{v}/queue/hand-back"
    call(ADMIN, "POST", hand_back, 200, json={"jobs": [1]})
    call(ADMIN, "POST", hand_back, 400, data=b"{", headers={"Content-Type": "application/json"})
    call(ADMIN, "POST", hand_back, 413, data=b" " * 70_000)
    call(ADMIN, "POST", hand_back, 422, json={"jobs": "all"})
    batches = f"{v}/batches"
    form = {"template": "social_thumb"}
    call(ALICE, "POST", batches, 201, data=form, files={"sheet": sheet, "pictures": picture},
         headers={"Idempotency-Key": "tour-1"})
    call(ALICE, "POST", batches, 200, data=form, files={"sheet": sheet, "pictures": picture},
         headers={"Idempotency-Key": "tour-1"})  # the same batch again
    call(ALICE, "POST", batches, 200, data={**form, "dry_run": "true"},
         files={"sheet": sheet, "pictures": picture})
    call(ALICE, "POST", batches, 429, data=form, files={"sheet": sheet, "pictures": picture})
    # (one a minute)
    call(ALICE, "POST", batches, 400, json=rows, headers={"Idempotency-Key": "k" * 151})
    call(ALICE, "POST", batches, 413, data=form, files={"sheet": sheet, "pictures": too_big})
    call(ALICE, "POST", batches, 415, data=b"x", headers={"Content-Type": "text/plain"})
    call(ALICE, "POST", batches, 422, json={**rows, "template": "nope"})
    many = ("many.csv", b"image,title\n" + b"bottle.png,x\n" * QUEUE_SIZE, "text/csv")
    call(ADMIN, "POST", batches, 409, data=form, files={"sheet": many, "pictures": picture})
    call(ADMIN, "POST", f"{batches}/{{id}}/retry", 201, path=f"{batches}/2/retry")
    call(ADMIN, "POST", f"{batches}/{{id}}/retry", 200, path=f"{batches}/2/retry")
    call(ADMIN, "POST", f"{batches}/{{id}}/retry", 409)  # batch 1: nothing failed
    for template in ("/batches/{id}/cancel", "/batches/{id}/retry", "/jobs/{id}/cancel"):
        call(ADMIN, "POST", v + template, 404, path=v + template.replace("{id}", "99"))
    move, move_job = f"{batches}/{{id}}/move", f"{v}/jobs/{{id}}/move"  # batch 5: waiting
    call(ADMIN, "POST", move, 200, path=f"{batches}/5/move", json={"to": "front"})
    call(ADMIN, "POST", move, 400, data=b"{", headers={"Content-Type": "application/json"})
    call(ADMIN, "POST", move, 404, path=f"{batches}/99/move", json={"to": "front"})
    call(ADMIN, "POST", move, 409, json={"to": "back"})  # batch 1: nothing waits
    call(ADMIN, "POST", move, 413, data=b" " * 70_000)
    call(ADMIN, "POST", move, 422, json={"to": "sideways"})
    call(ADMIN, "POST", move_job, 200, path=f"{v}/jobs/9/move", json={"to": "back"})
    call(ADMIN, "POST", move_job, 400, data=b"[")
    call(ADMIN, "POST", move_job, 404, path=f"{v}/jobs/99/move", json={"to": "back"})
    call(ADMIN, "POST", move_job, 409, json={"to": "back"})  # job 1 ran
    call(ADMIN, "POST", move_job, 413, data=b" " * 70_000)
    call(ADMIN, "POST", move_job, 422, json={"to": 3})
    call(ADMIN, "POST", f"{batches}/{{id}}/cancel", 200, path=f"{batches}/5/cancel")
    call(ADMIN, "POST", f"{v}/jobs/{{id}}/cancel", 200)

    # Iterating on job 1's image (batch 1 ran); job 3 failed (no image); job 8 is alice's,
    # and she submitted a moment ago (one a minute).
    jobs, big = f"{v}/jobs", b" " * 70_000
    bigger = b" " * int(IMAGE_MB * 1.4 * 2**20)  # an action's body holds a mask picture
    act, rating = f"{jobs}/{{id}}/actions", f"{jobs}/{{id}}/rating"
    call(ADMIN, "POST", act, 201, json={"action": "upscale"}, headers={"Idempotency-Key": "up"})
    call(ADMIN, "POST", act, 200, json={"action": "upscale"}, headers={"Idempotency-Key": "up"})
    call(ADMIN, "POST", act, 400, data=b"{", headers={"Content-Type": "application/json"})
    call(ADMIN, "POST", act, 404, path=f"{jobs}/99/actions", json={"action": "again"})
    call(ADMIN, "POST", act, 409, path=f"{jobs}/3/actions", json={"action": "vary"})
    call(ADMIN, "POST", act, 413, data=bigger)
    call(ADMIN, "POST", act, 422, json={"action": "dance"})
    call(ALICE, "POST", act, 429, path=f"{jobs}/8/actions",
         json={"action": "edit", "values": {"title": "again"}})
    call(REVIEWER, "PUT", rating, 200, json={"rating": "keep"})
    kept = f"{batches}/{{id}}/kept/actions"  # every kept image of batch 1 (job 1)
    call(ADMIN, "POST", kept, 201, json={"action": "upscale"}, headers={"Idempotency-Key": "k"})
    call(ADMIN, "POST", kept, 200, json={"action": "upscale"}, headers={"Idempotency-Key": "k"})
    call(ADMIN, "POST", kept, 400, data=b"{", headers={"Content-Type": "application/json"})
    call(ADMIN, "POST", kept, 404, path=f"{batches}/99/kept/actions", json={"action": "again"})
    call(ADMIN, "POST", kept, 409, path=f"{batches}/2/kept/actions", json={"action": "again"})
    call(ADMIN, "POST", kept, 413, data=bigger)
    call(ADMIN, "POST", kept, 422, json={"action": "edit", "instruction": "x", "model": "no"})
    call(ALICE, "POST", kept, 429, json={"action": "upscale"})  # (one a minute)
    call(REVIEWER, "PUT", rating, 400, data=b"[")
    call(REVIEWER, "PUT", rating, 404, path=f"{jobs}/99/rating", json={"rating": "keep"})
    call(REVIEWER, "PUT", rating, 409, path=f"{jobs}/3/rating", json={"rating": "keep"})
    call(REVIEWER, "PUT", rating, 413, data=big)
    call(REVIEWER, "PUT", rating, 422, json={"rating": "love"})
    review, stars = f"{jobs}/{{id}}/review", f"{jobs}/{{id}}/stars"
    call(REVIEWER, "PUT", review, 400, data=b"[")
    call(REVIEWER, "PUT", review, 422, json={"state": "liked"})
    call(REVIEWER, "PUT", review, 404, path=f"{jobs}/99/review", json={"state": "approved"})
    call(REVIEWER, "PUT", review, 409, path=f"{jobs}/3/review", json={"state": "approved"})
    call(REVIEWER, "PUT", review, 413, data=big)
    call(REVIEWER, "PUT", review, 422, json={"state": "changes_requested"})  # (no note)
    call(REVIEWER, "PUT", review, 429, path=f"{jobs}/8/review",
         json={"state": "changes_requested", "note": "warmer light"})
    call(REVIEWER, "PUT", stars, 200, json={"stars": 4})
    call(REVIEWER, "PUT", stars, 400, data=b"[")
    call(REVIEWER, "PUT", stars, 422, json={"stars": 6})
    call(REVIEWER, "PUT", stars, 404, path=f"{jobs}/99/stars", json={"stars": 4})
    call(REVIEWER, "PUT", stars, 409, path=f"{jobs}/3/stars", json={"stars": 4})
    call(REVIEWER, "PUT", stars, 413, data=big)

    for template in ("/jobs/{id}/lineage", "/batches/{id}/picks", "/batches/{id}/picks.xlsx",
                     "/batches/{id}/picks.png"):
        call(VIEWER, "GET", v + template, 200)
        call(VIEWER, "GET", v + template, 404, path=v + template.replace("{id}", "99"))
    call(REVIEWER, "PUT", rating, 200, json={"rating": None})
    signoff = f"{batches}/{{id}}/signoff"
    call(REVIEWER, "POST", signoff, 409, path=f"{batches}/4/signoff")  # job 8: unreviewed
    call(REVIEWER, "POST", signoff, 404, path=f"{batches}/99/signoff")
    call(ADMIN, "DELETE", signoff, 409, path=f"{batches}/4/signoff")  # not signed off
    call(ADMIN, "DELETE", signoff, 404, path=f"{batches}/99/signoff")
    call(REVIEWER, "PUT", review, 200, path=f"{jobs}/8/review", json={"state": "approved"})
    call(REVIEWER, "POST", signoff, 200, path=f"{batches}/4/signoff")
    call(ADMIN, "DELETE", signoff, 200, path=f"{batches}/4/signoff")
    refine = f"{batches}/{{id}}/refine"
    call(VIEWER, "GET", refine, 200, path=f"{batches}/3/refine")  # the sweep, rated
    call(VIEWER, "GET", refine, 409)  # batch 1: no sweep
    call(VIEWER, "GET", refine, 404, path=f"{batches}/99/refine")
    ab = f"{batches}/{{id}}/ab"
    call(VIEWER, "GET", ab, 200, path=f"{batches}/3/ab")  # A and B of each width, rated
    call(VIEWER, "GET", ab, 409)  # batch 1: no comparison
    call(VIEWER, "GET", ab, 404, path=f"{batches}/99/ab")

    schedules = f"{v}/schedules"
    plan = {"cron": "0 9 * * 1-5", "template": "social_thumb"}
    call(ADMIN, "POST", schedules, 201, data=plan, files={"sheet": sheet, "pictures": picture})
    call(ADMIN, "POST", schedules, 422, data={**plan, "cron": "9am daily"},
         files={"sheet": sheet})
    call(ADMIN, "POST", schedules, 413, data=plan, files={"sheet": sheet, "pictures": too_big})
    call(ADMIN, "POST", schedules, 415, data=b"x", headers={"Content-Type": "text/plain"})
    call(ADMIN, "POST", schedules, 400, data=b"--x\r\nnot a part",
         headers={"Content-Type": "multipart/form-data; boundary=x"})
    call(ADMIN, "DELETE", f"{schedules}/{{id}}", 200)
    call(ADMIN, "DELETE", f"{schedules}/{{id}}", 404)

    templates, workflow = f"{v}/templates", ("flow.json", json.dumps(TXT2IMG).encode())
    call(ADMIN, "POST", templates, 201, data={"name": "imported"}, files={"workflow": workflow})
    call(ADMIN, "POST", templates, 409, data={"name": "imported"}, files={"workflow": workflow})
    call(ADMIN, "POST", templates, 422, data={"name": "ui"},  # UI format, and no server
         files={"workflow": ("ui.json", b'{"nodes": [], "links": []}')})
    call(ADMIN, "POST", templates, 413, data={"name": "big"}, files={"workflow": too_big})
    call(ADMIN, "POST", templates, 415, data=b"x", headers={"Content-Type": "text/plain"})
    call(ADMIN, "POST", templates, 400, data=b"--x\r\nnot a part",
         headers={"Content-Type": "multipart/form-data; boundary=x"})

    hooks, endpoint = f"{v}/webhooks", f"{v}/webhooks/endpoints/{{endpoint}}"
    call(ADMIN, "GET", hooks, 200)
    call(ADMIN, "POST", f"{endpoint}/test", 200)  # taken by the receiver
    call(ADMIN, "POST", f"{endpoint}/test", 200, path=f"{hooks}/endpoints/down/test")  # not
    call(ADMIN, "POST", f"{endpoint}/test", 404, path=f"{hooks}/endpoints/nope/test")
    call(ADMIN, "POST", f"{endpoint}/enable", 200)
    call(ADMIN, "POST", f"{endpoint}/enable", 404, path=f"{hooks}/endpoints/nope/enable")
    deliveries = f"{hooks}/deliveries"
    call(ADMIN, "GET", deliveries, 200, path=f"{deliveries}?endpoint=tour&limit=5")
    call(ADMIN, "GET", deliveries, 400, path=f"{deliveries}?status=lost")
    listed = requests.get(f"{url}{deliveries}", timeout=30,
                          headers={"Authorization": f"Bearer {ADMIN}"}).json()["deliveries"]
    sent = next(d["id"] for d in listed if d["status"] == "sent")
    owed = next(d["id"] for d in listed  # "down" refuses every try: it stays owed
                if d["status"] == "pending" and d["endpoint"] == "down")
    one = f"{deliveries}/{{id}}"
    call(ADMIN, "GET", one, 200, path=f"{deliveries}/{sent}")
    call(ADMIN, "GET", one, 404, path=f"{deliveries}/99999")
    call(ADMIN, "POST", f"{one}/redeliver", 200, path=f"{deliveries}/{sent}/redeliver")
    call(ADMIN, "POST", f"{one}/redeliver", 409, path=f"{deliveries}/{owed}/redeliver")
    call(ADMIN, "POST", f"{one}/redeliver", 404, path=f"{deliveries}/99999/redeliver")
    return seen


async def test_a_tour_reaches_every_documented_answer_and_each_is_as_documented(world):
    seen = await asyncio.to_thread(tour, world)
    assert seen == documented(world.doc)


async def test_the_webhooks_section_documents_each_events_body_and_its_signature(world):
    hooks = world.doc["webhooks"]
    assert set(hooks) == {"batch.queued", "batch.finished", "batch.canceled", "batch.approved",
                          "batch.delivered", "job.succeeded", "job.failed", "webhook.test"}
    for name, op in hooks.items():
        post = op["post"]
        assert {p["name"] for p in post["parameters"]} == \
            {"webhook-id", "webhook-timestamp", "webhook-signature"}
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = world.doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert schema["properties"]["type"]["enum"] == [name]
    ended = world.doc["components"]["schemas"]["BatchEnded"]["properties"]
    assert {"succeeded", "failed", "canceled", "summary", "outputs", "links"} <= set(ended)
    # What a receiver takes is what the document says: the bodies of batch 1's events and
    # of a test, each read strictly as its documented record.
    status, _ = await world.call("POST", "/webhooks/endpoints/tour/test", token=ADMIN)
    assert status == 200
    wanted = {"batch.queued", "job.succeeded", "batch.finished", "batch.delivered",
              "webhook.test"}
    async with asyncio.timeout(20):  # the service delivers on its own loops
        while not wanted <= {b["type"] for b in world.hook_bodies()}:
            await asyncio.sleep(0.05)
    taken = world.hook_bodies()
    for body in taken:
        msgspec.convert(body, EVENTS[body["type"]])


def generated(world, roles: dict[str, str | None], examples: int) -> set:
    """Requests schemathesis generates from the document, each sent as one of `roles`;
    every answer checked against the document. What was seen: (method, path, role, status)."""
    seen = set()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=world.schema.as_strategy(), role=st.sampled_from(sorted(roles)))
    def check(case, role):
        headers = {k: v for k, v in (case.headers or {}).items() if k != "Authorization"}
        if roles[role]:
            headers["Authorization"] = f"Bearer {roles[role]}"
        case.headers = headers
        response = case.call(base_url=world.url, timeout=30)
        case.validate_response(response, checks=CHECKS)
        seen.add((case.method, case.path, role, response.status_code))
    check()
    return seen


async def test_generated_requests_with_a_token_get_documented_answers(world):
    seen = await asyncio.to_thread(generated, world, WITH, 400)
    assert len({(m, p) for m, p, _, _ in seen}) >= 15  # most operations were exercised
    assert {r for _, _, r, _ in seen} == set(WITH)  # by every role
    assert {s for *_, s in seen} & {200, 201} and {s for *_, s in seen} & {403, 404, 422}


async def test_generated_requests_without_a_token_get_documented_401s(world):
    seen = await asyncio.to_thread(generated, world, WITHOUT, 100)
    assert {s for m, p, _, s in seen if p not in PUBLIC} == {401}
    assert len({(m, p) for m, p, _, _ in seen}) >= 15
