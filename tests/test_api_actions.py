"""Iterating on images through the REST API, on the real service: an action queues a new
batch (the same Idempotency-Key answers that batch again), refusals come back as the
coded errors chat renders, ratings are set and taken back, a job's lineage reads both
ways, and a batch's picks come as JSON, a results sheet and a contact sheet."""

from __future__ import annotations

import io
import zipfile

import aiohttp
import pytest
from openpyxl import load_workbook
from PIL import Image

from tests.fakes.api import ALICE, BOB, BOTTLE, REVIEWER, VIEWER, ApiWorld, api_config
from tests.fakes.jobs import finish_all

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
SAFE = {"X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox"}


@pytest.fixture
async def api(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        yield w



async def products(api: ApiWorld) -> list:
    """A product_main batch of two rows, submitted by alice and finished."""
    form = aiohttp.FormData()
    form.add_field("template", "product_main")
    form.add_field("sheet", b"sku,product_image,prompt,steps\nA1,bottle.png,a bottle,4\n"
                            b"A2,bottle.png,a jar,4\n", filename="p.csv")
    form.add_field("pictures", BOTTLE, filename="bottle.png")
    status, batch = await api.call("POST", "/batches", ALICE, data=form)
    assert status == 201, batch
    return await finish_all(api.app, batch["id"])


async def test_actions_ratings_lineage_and_picks_through_the_api(api):
    first, second = await products(api)
    act = f"/jobs/{first.id}/actions"

    # An action: 201 with the new batch and its jobs; the same key again, that batch.
    status, again = await api.call("POST", act, json={"action": "again", "count": 2},
                                   headers={"Idempotency-Key": "redo-1"})
    assert status == 201 and again["created"] and again["action"] == "again"
    assert again["parent"] == first.id and len(again["jobs"]) == 2
    assert {(j["parent_job_id"], j["action"], j["row"], j["status"], j["rating"])
            for j in again["jobs"]} == {(first.id, "again", 2, "queued", None)}
    assert {j["batch"] for j in again["jobs"]} == {again["batch"]}
    status, repeat = await api.call("POST", act, json={"action": "again", "count": 2},
                                    headers={"Idempotency-Key": "redo-1"})
    assert (status, repeat["batch"], repeat["created"]) == (200, again["batch"], False)
    assert [j["id"] for j in repeat["jobs"]] == [j["id"] for j in again["jobs"]]
    status, made = await api.call("GET", f"/batches/{again['batch']}", VIEWER)
    assert made["meta"]["action"] == "again" and made["meta"]["root_batch"] == first.batch_id
    status, edit = await api.call("POST", f"/jobs/{second.id}/actions", json={
        "action": "edit", "values": {"prompt": "a red jar"}})
    assert status == 201 and edit["jobs"][0]["parent_job_id"] == second.id
    status, instructed = await api.call("POST", f"/jobs/{second.id}/actions", json={
        "action": "edit", "instruction": "make the bottle matte black",
        "model": "qwen_image_edit"})
    assert status == 201 and instructed["jobs"][0]["parent_job_id"] == second.id
    status, made = await api.call("GET", f"/batches/{instructed['batch']}", VIEWER)
    assert made["meta"]["instruction"] == "make the bottle matte black"

    # Refusals: the coded errors chat renders, each with its status.
    child = again["jobs"][0]["id"]  # queued: not finished yet
    for token, path, body, expected in (
            (ALICE, "/jobs/999/actions", {"action": "again"}, (404, "no_job")),
            (BOB, act, {"action": "again"}, (403, "refused_not_owner")),  # not bob's image
            (VIEWER, act, {"action": "again"}, (403, "refused_role")),
            (VIEWER, act, None, (403, "refused_role")),  # no body: who may not act hears that
            (VIEWER, act, {"action": "again", "count": 99}, (403, "refused_role")),  # first
            (ALICE, act, {"action": "dance"}, (422, "action_unknown")),
            (ALICE, act, {"action": "again", "count": 99}, (422, "action_count")),
            (ALICE, act, {"action": "upscale", "factor": 20}, (422, "upscale_factor")),
            (ALICE, act, {"action": "edit", "instruction": "matte", "model": "sdxl"},
             (422, "model_cannot_run")),
            (ALICE, act, {"action": "edit", "instruction": "matte", "values": {"steps": 3}},
             (422, "edit_both")),
            (ALICE, act, {"action": "again", "count": "two"}, (422, "bad_field")),
            (ALICE, act, {"count": 2}, (422, "bad_field")),
            (ALICE, act, [1], (400, "bad_json")),
            (ALICE, f"/jobs/{child}/actions", {"action": "again"},
             (409, "action_not_finished")),
            (ALICE, f"/jobs/{child}/rating", {"rating": "keep"}, (409, "action_no_image")),
            (REVIEWER, f"/jobs/{first.id}/rating", {"rating": "love"}, (422, "rating_unknown")),
            (REVIEWER, "/jobs/999/rating", {"rating": "keep"}, (404, "no_job"))):
        method = "PUT" if path.endswith("rating") else "POST"
        status, answer = await api.call(method, path, token, json=body)
        assert (status, answer["error"]["code"]) == expected, (path, body, answer)
        assert answer["error"]["message"]
    status, answer = await api.call("POST", act, json={"action": "edit",
                                                       "values": {"steps": "many"}})
    assert (status, answer["error"]["message"]) == (422, 'steps: "many" is not a whole number')
    status, answer = await api.call("POST", act, data=b"{", headers={
        "Content-Type": "application/json"})
    assert (status, answer["error"]["code"]) == (400, "bad_json")
    from bot.web.iterate import action_body_limit  # (fields and a mask picture)
    limit = action_body_limit(api.app.config)
    status, answer = await api.call("POST", act, data=b" " * (limit + 1))
    assert (status, answer["error"]["code"]) == (413, "too_large")
    status, answer = await api.call("POST", act, json={"action": "again"},
                                    headers={"Idempotency-Key": "k" * 151})
    assert (status, answer["error"]["code"]) == (400, "bad_idempotency_key")

    # Ratings: who and when, on the job record; null takes it back.
    status, kept = await api.call("PUT", f"/jobs/{first.id}/rating", REVIEWER,
                                  json={"rating": "keep"})
    assert status == 200 and (kept["id"], kept["rating"], kept["rated_by"]) == \
        (first.id, "kept", "api:rex") and kept["rated_at"] > 0
    status, rejected = await api.call("PUT", f"/jobs/{second.id}/rating", json={
        "rating": "reject"})
    assert rejected["rating"] == "rejected"
    status, cleared = await api.call("PUT", f"/jobs/{second.id}/rating", json={"rating": None})
    assert (status, cleared["rating"], cleared["rated_by"]) == (200, None, "api:alice")
    # The job list filtered by rating: kept, rejected, or not rated.
    status, listed = await api.call("GET", "/jobs?rating=kept", VIEWER)
    assert status == 200 and [j["id"] for j in listed["jobs"]] == [first.id]
    assert {j["rating"] for j in listed["jobs"]} == {"kept"}
    status, listed = await api.call(
        "GET", f"/jobs?rating=unrated&batch={first.batch_id}&offset=0", VIEWER)
    assert [j["id"] for j in listed["jobs"]] == [second.id] and listed["total"] == 1
    assert (await api.call("GET", "/jobs?rating=rejected", VIEWER))[1]["jobs"] == []
    status, answer = await api.call("GET", "/jobs?rating=loved", VIEWER)
    assert (status, answer["error"]["code"]) == (400, "bad_query")
    # … by the sheet's row and the template version (a swept value: tests/test_queue.py)
    status, listed = await api.call("GET", f"/jobs?row={second.row}&version=1&offset=0", VIEWER)
    assert second.id in [j["id"] for j in listed["jobs"]] and first.id not in \
        [j["id"] for j in listed["jobs"]] and listed["total"] == len(listed["jobs"])
    assert (await api.call("GET", "/jobs?version=99", VIEWER))[1]["jobs"] == []
    for bad in ("axis=steps", "axis==3", "row=two"):
        status, answer = await api.call("GET", f"/jobs?{bad}", VIEWER)
        assert (status, answer["error"]["code"]) == (400, "bad_query"), bad

    # Lineage, both ways.
    (grandchild, _) = await finish_all(api.app, again["batch"])
    status, line = await api.call("GET", f"/jobs/{grandchild.id}/lineage", VIEWER)
    assert status == 200 and [j["id"] for j in line["ancestors"]] == [first.id]
    assert line["children"] == []
    status, line = await api.call("GET", f"/jobs/{first.id}/lineage", VIEWER)
    assert line["ancestors"] == [] and \
        [j["id"] for j in line["children"]] == [j["id"] for j in again["jobs"]]
    assert (await api.call("GET", "/jobs/999/lineage", VIEWER))[0] == 404

    # Picks: the kept images of the first batch and of all made from it, from any of them.
    await api.call("PUT", f"/jobs/{grandchild.id}/rating", json={"rating": "keep"})
    status, picks = await api.call("GET", f"/batches/{again['batch']}/picks", VIEWER)
    assert status == 200 and picks["batch"] == first.batch_id
    assert sorted(j["id"] for j in picks["jobs"]) == [first.id, grandchild.id]
    assert picks["files"] == {
        "results": f"/api/v1/batches/{first.batch_id}/picks.xlsx",
        "contact": f"/api/v1/batches/{first.batch_id}/picks.png"}
    headers = {"Authorization": f"Bearer {VIEWER}"}
    async with api.http.get(picks["files"]["results"], headers=headers) as r:
        assert r.status == 200 and r.content_type == XLSX
        assert r.headers["Content-Disposition"] == (
            f'attachment; filename="batch-{first.batch_id}-picks.xlsx"; '
            f"filename*=UTF-8''batch-{first.batch_id}-picks.xlsx")
        assert {k: r.headers[k] for k in SAFE} == SAFE
        sheet = load_workbook(io.BytesIO(await r.read())).active
    assert sheet.max_row == 3  # the header and two kept images
    async with api.http.get(picks["files"]["contact"], headers=headers) as r:
        assert r.status == 200 and r.content_type == "image/png"
        assert "Content-Disposition" not in r.headers  # an image: shown, not downloaded
        assert {k: r.headers[k] for k in SAFE} == SAFE
        assert Image.open(io.BytesIO(await r.read())).format == "PNG"
    for job in (first, grandchild):
        await api.call("PUT", f"/jobs/{job.id}/rating", json={"rating": None})
    status, none = await api.call("GET", f"/batches/{first.batch_id}/picks.png", VIEWER)
    assert (status, none["error"]["code"]) == (404, "no_picks")
    assert (await api.call("GET", "/batches/999/picks", VIEWER))[0] == 404

    status, doc = await api.call("GET", "/openapi.json", token=None)
    assert {"/api/v1/jobs/{id}/actions", "/api/v1/jobs/{id}/rating", "/api/v1/jobs/{id}/lineage",
            "/api/v1/batches/{id}/picks", "/api/v1/batches/{id}/picks.xlsx",
            "/api/v1/batches/{id}/picks.png"} <= set(doc["paths"])
    (rating,) = [p for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"]
                 if p["name"] == "rating"]
    assert rating["in"] == "query" and set(rating["schema"]["enum"]) == {
        "approved", "rejected", "changes_requested", "unreviewed", "kept", "unrated"}
    job = doc["components"]["schemas"]["Job"]["properties"]
    assert {"parent_job_id", "action", "rating", "rated_by", "rated_at"} <= set(job)

    # An action on every kept image of a batch: one new batch, each job linked.
    kept = f"/batches/{first.batch_id}/kept/actions"
    status, answer = await api.call("POST", kept, json={"action": "edit", "instruction": "x"})
    assert (status, answer["error"]["code"]) == (409, "picks_none")
    assert (await api.call("PUT", f"/jobs/{first.id}/rating", json={"rating": "keep"}))[0] == 200
    status, on = await api.call("POST", kept, json={"action": "edit",
                                                     "instruction": "把背景换成海滩"},
                                headers={"Idempotency-Key": "all-1"})
    assert status == 201 and (on["of_batch"], on["kept"], on["action"]) == (
        first.batch_id, 1, "edit")
    assert [j["parent_job_id"] for j in on["jobs"]] == [first.id]
    status, repeat = await api.call("POST", kept, json={"action": "edit",
                                                         "instruction": "把背景换成海滩"},
                                    headers={"Idempotency-Key": "all-1"})
    assert (status, repeat.get("batch")) == (200, on["batch"]), repeat


async def test_repaint_with_a_mask_and_extend_to_a_shape_through_the_api(api):
    """POST /jobs/{id}/actions {"action": "repaint", "mask": base64 PNG} and {"action":
    "extend", "aspect": "9:16"}: 201 each, the batch recording the mask and the shape; a
    mask of other proportions and an extend of nothing are 422 with their sentences."""
    import base64
    first, _ = await products(api)
    act = f"/jobs/{first.id}/actions"
    mask = Image.new("L", (64, 48), 0)
    mask.paste(255, (8, 8, 40, 30))
    buf = io.BytesIO()
    mask.save(buf, "PNG")
    status, painted = await api.call("POST", act, json={
        "action": "repaint", "instruction": "a red scarf",
        "mask": base64.b64encode(buf.getvalue()).decode()})
    assert status == 201 and painted["jobs"][0]["parent_job_id"] == first.id, painted
    status, made = await api.call("GET", f"/batches/{painted['batch']}", VIEWER)
    assert made["meta"]["mask"].endswith(".png") and made["meta"]["action"] == "repaint"
    status, wide = await api.call("POST", act, json={"action": "extend", "aspect": "9:16"})
    assert status == 201 and wide["action"] == "extend"
    status, made = await api.call("GET", f"/batches/{wide['batch']}", VIEWER)
    assert made["meta"]["canvas"] == "9:16"
    from bot.client import AsyncClient  # the Python client sends a mask file as it is
    (tmp := api.config.data_dir / "mask.png").write_bytes(buf.getvalue())
    async with AsyncClient(api.url, ALICE) as client:
        made = await client.act(first.id, "repaint", mask=tmp, instruction="a blue scarf")
    assert made.meta["mask"] == (await api.app.batch(painted["batch"])).meta["mask"]
    square = io.BytesIO()
    Image.new("L", (50, 50), 255).save(square, "PNG")
    for body, expected in (
            ({"action": "repaint", "mask": base64.b64encode(square.getvalue()).decode()},
             "mask_shape"),
            ({"action": "repaint", "mask": "not base64!"}, "bad_field"),
            ({"action": "extend"}, "extend_nothing"),
            ({"action": "extend", "left": -1}, "bad_field"),
            ({"action": "repaint", "region": "the bottle"}, "region_no_model"),
            ({"action": "repaint", "region": "x" * 201}, "bad_field"),
            ({"action": "extend", "top": 8, "region": "the bottle"}, "action_takes_no_region")):
        status, answer = await api.call("POST", act, json=body)
        assert (status, answer["error"]["code"]) == (422, expected), answer
    api.app.segmentation_model = lambda: "walnut"  # (the executor tells a CLIPSeg apart)
    status, found = await api.call("POST", act, json={"action": "repaint",
                                                      "region": "the bottle"})
    assert status == 201, found
    status, made = await api.call("GET", f"/batches/{found['batch']}", VIEWER)
    assert made["meta"]["region"] == "the bottle"


async def test_reviews_stars_and_sign_off_through_the_api(api):
    """A reviewer rejects with a reason, asks for changes (an edit queued as alice's),
    grades; the job list filters by review and stars; the batch is signed off once every
    image is reviewed (409 before, naming how many are left) and its results sheet says
    so; a viewer may do none of it."""
    first, second = await products(api)
    review = f"/jobs/{first.id}/review"
    status, body = await api.call("PUT", review, VIEWER, json={"state": "approved"})
    assert (status, body["error"]["code"]) == (403, "refused_role")
    status, body = await api.call("PUT", review, REVIEWER, json={"state": "nice"})
    assert status == 422 and "state" in body["error"]["message"]
    status, body = await api.call("PUT", review, REVIEWER, json={"state": "changes_requested"})
    assert (status, body["error"]["code"]) == (422, "changes_need_note")
    status, done = await api.call("PUT", review, REVIEWER, json={
        "state": "changes_requested", "note": "把背景换成海滩"})
    assert status == 200, done
    assert (done["job"]["review"], done["job"]["review_note"]) == (
        "changes_requested", "把背景换成海滩")
    assert done["change"]["parent"] == first.id and done["change"]["action"] == "edit"
    assert done["change"]["jobs"][0]["submitter"] == "api:alice"
    status, signoff = await api.call("POST", f"/batches/{first.batch_id}/signoff", REVIEWER)
    assert (status, signoff["error"]["code"]) == (409, "signoff_unreviewed")
    assert "1 of its 2 images is not reviewed" in signoff["error"]["message"]
    status, graded = await api.call("PUT", f"/jobs/{second.id}/stars", REVIEWER,
                                    json={"stars": 5})
    assert (status, graded["stars"]) == (200, 5)
    status, body = await api.call("PUT", f"/jobs/{second.id}/stars", REVIEWER,
                                  json={"stars": 9})
    assert status == 422
    status, done = await api.call("PUT", f"/jobs/{second.id}/review", REVIEWER,
                                  json={"state": "approved"})
    assert (status, done["job"]["review"], done["change"]) == (200, "approved", None)
    status, page = await api.call("GET", f"/jobs?batch={first.batch_id}&rating=approved&stars=4")
    assert [j["id"] for j in page["jobs"]] == [second.id]
    status, page = await api.call("GET", f"/jobs?batch={first.batch_id}&rating=changes_requested")
    assert [j["id"] for j in page["jobs"]] == [first.id]
    status, signoff = await api.call("POST", f"/batches/{first.batch_id}/signoff", REVIEWER)
    assert status == 200, signoff
    assert signoff["signed_off"]["by"] == "api:rex"
    assert signoff["reviews"] == {"approved": 1, "changes_requested": 1}
    status, batch = await api.call("GET", f"/batches/{first.batch_id}", VIEWER)
    assert batch["signed_off"]["by"] == "api:rex" and batch["reviews"]["approved"] == 1
    status, body = await api.call("PUT", review, REVIEWER, json={"state": "approved"})
    assert (status, body["error"]["code"]) == (409, "batch_signed_off")
    async with api.http.get(f"/api/v1/batches/{first.batch_id}/files/results.xlsx",
                            headers={"Authorization": f"Bearer {VIEWER}"}) as r:
        rows = list(load_workbook(io.BytesIO(await r.read())).active.iter_rows(values_only=True))
    assert rows[-1][0].startswith("Signed off by api:rex at ")
    status, body = await api.call("DELETE", f"/batches/{first.batch_id}/signoff", REVIEWER)
    assert (status, body["error"]["code"]) == (403, "refused_role")
    for query, names in (("", 2), ("?review=approved", 1)):  # the ones that ship, zipped
        async with api.http.get(f"/api/v1/batches/{first.batch_id}/images.zip{query}",
                                headers={"Authorization": f"Bearer {VIEWER}"}) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "application/zip"
            zipped = zipfile.ZipFile(io.BytesIO(await r.read()))
        assert len(zipped.namelist()) == names and all(
            n.endswith(".png") and not n.startswith("outputs/") for n in zipped.namelist())
    status, body = await api.call("GET", f"/batches/{first.batch_id}/images.zip?review=rejected")
    assert (status, body["error"]["code"]) == (404, "no_images")
