"""The dashboard in a real headless Chromium against the real service: a 20,000-job list
that stays light, pause seen live by another viewer, a viewer refused, live step
progress, a sheet submitted through the form and watched to the end, and the webhooks page
an admin tests, re-enables and redelivers from."""

from __future__ import annotations

import asyncio
import io
import time

import aiohttp
import pytest
import pytest_asyncio
from PIL import Image

from storage.queue import NewJob, Submission
from templates.jobs import decode
from tests.conftest import ROOT, executor_config
from tests.fakes.browser import launched
from tests.fakes.chat import ServiceWorld, SteeredPlatform, rate_limited
from tests.fakes.jobs import finish_all
from tests.fakes.webhooks import Receiver

ADMIN, ALICE, VIEWER = "admin-token-0000001", "alice-token-000001", "viewer-token-00001"
BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
LOAD_BOUND = 20.0  # seconds: a hang detector on a noisy 2-core machine, not a benchmark

# One Chromium per test process for the whole module (its launch and playwright's driver
# cost seconds of CPU each time): the tests share the module's event loop with it.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def dashboard_config(tmp_path, demo_models, webhooks: list[dict] | None = None, **queue):
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0}, queue=queue,
        api={"tokens": [f"{ADMIN}=ops", f"{ALICE}=alice", f"{VIEWER}=vic"]},
        chat={"admins": ["api:ops"], "viewers": ["api:vic"], "default_role": "submitter"},
        **({"webhooks": webhooks} if webhooks else {}))


PRODUCTS = "sku,product_image,prompt,steps\n"  # product_main's columns, a sheet's header


async def finished(w: ServiceWorld, sheet: str, template: str = "product_main",
                   user: str = "alice", **options) -> list:
    """A batch of `sheet` submitted as api:USER (its pictures: the bottle; `options`: more
    SubmitOptions, a sweep's `vary`) and finished as an executor would (no GPU): its jobs."""
    from bot.app.application import Accepted, SubmitOptions
    from bot.app.permissions import Who
    from bot.intake.check import SheetFile

    async def pictures(name: str) -> bytes | None:
        return BOTTLE

    done = await w.app.submit(Who("api", user, "api"), template,
                              SheetFile("s.csv", sheet.encode()), pictures,
                              SubmitOptions(wait_for_executor=True, **options))
    assert isinstance(done, Accepted)
    return await finish_all(w.app, done.batch_id)


class DashWorld(ServiceWorld):
    """The service, and no script error on any page it served by the end of the test."""

    page_errors: list[str]

    async def __aenter__(self) -> DashWorld:
        self.page_errors = []
        return await super().__aenter__()

    async def __aexit__(self, *exc) -> None:
        await super().__aexit__(*exc)
        assert not self.page_errors


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium():
    async with launched() as b:
        yield b


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium):
    """The module's Chromium; what a test opens in it (contexts, their pages) is closed
    after the test, so no page of a test's service outlives it."""
    before = set(chromium.contexts)
    yield chromium
    for context in chromium.contexts:
        if context not in before:
            await context.close()


async def signed_in(browser, world, token: str, hash_: str = ""):
    """A fresh browser context signed in through the sign-in form."""
    context = await browser.new_context()
    page = await context.new_page()
    page.on("pageerror", lambda e: world.page_errors.append(str(e)))
    await page.goto(f"{world.url}/dashboard/")
    await page.wait_for_selector("#token")
    assert await page.is_hidden("#nav")  # nothing to navigate to before signing in
    await page.fill("#token", token)
    await page.click("#sign-in button[type=submit]")
    await page.wait_for_selector("#me:not([hidden])")
    # The first page drawn (route() marks it): a view asked for before would be drawn twice,
    # and a check could read the second drawing's "loading…" beside the first's rows.
    await page.wait_for_selector("body[data-view]")
    if hash_:
        await page.evaluate("h => { location.hash = h; }", hash_)
    return page


async def enqueue_many(queue, n: int, per_batch: int = 5000) -> None:
    for start in range(0, n, per_batch):
        await queue.enqueue(Submission("social_thumb", "api:alice", [
            NewJob(row=i + 2, workflow={"title": f"t{i}"})
            for i in range(min(per_batch, n - start))],
            platform="api"))


async def test_twenty_thousand_jobs_load_and_scroll_with_a_bounded_page(tmp_path, demo_models,
                                                                      browser):
    async with DashWorld(dashboard_config(tmp_path, demo_models, max_queue_size=25_000)) as w:
        await enqueue_many(w.queue, 20_000)
        page = await signed_in(browser, w, VIEWER)
        fetched: list[str] = []
        page.on("request", lambda r: fetched.append(r.url) if "/api/v1/jobs" in r.url else None)
        started = time.monotonic()
        await page.evaluate("location.hash = '#/jobs'")
        await page.wait_for_selector('#job-list .jobrow[data-index="0"][data-job="20000"]')
        assert time.monotonic() - started < LOAD_BOUND
        assert await page.text_content("#job-count") == "20,000 jobs"
        assert await page.locator("#job-list .jobrow").count() < 60  # only the rows in view

        # Jump to the middle, then to the end: the rows there come from their own pages.
        for index, job in ((10_000, 10_000), (19_999, 1)):
            await page.eval_on_selector("#job-list", f"el => {{ el.scrollTop = {index} * 34; }}")
            await page.wait_for_selector(
                f'#job-list .jobrow[data-index="{index}"][data-job="{job}"]',
                timeout=LOAD_BOUND * 1000)
            assert await page.locator("#job-list .jobrow").count() < 60
        # And a wheel scroll like a person's, rows following.
        await page.eval_on_selector("#job-list", "el => { el.scrollTop = 0; }")
        await page.wait_for_selector('#job-list .jobrow[data-job="20000"]')
        await page.hover("#job-list")
        for _ in range(10):
            await page.mouse.wheel(0, 600)
        # Wherever the wheel has taken it (scrolling ends when it ends), the row at the top
        # of the view is there, and it is the right job.
        await page.wait_for_function("""() => {
            const list = document.querySelector('#job-list');
            const top = Math.floor(list.scrollTop / 34);
            const row = list.querySelector(`.jobrow[data-index="${top}"]`);
            return list.scrollTop >= 3000 && row && row.dataset.job === String(20000 - top);
        }""")
        assert await page.locator("#job-list .jobrow").count() < 60
        # Pages of a hundred, a few of them — never the whole list.
        assert 3 <= len(fetched) <= 12, fetched
        assert all("limit=100" in url for url in fetched)
        # A viewer is shown no cancel buttons.
        assert await page.locator("[data-cancel-job]").count() == 0


async def test_admin_pauses_and_another_page_sees_it_live_while_a_viewer_is_refused(
        tmp_path, demo_models, browser):
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        await enqueue_many(w.queue, 3)
        admin = await signed_in(browser, w, ADMIN)
        viewer = await signed_in(browser, w, VIEWER)
        for page in (admin, viewer):
            await page.wait_for_selector('#queue-state[data-paused="false"]')
            await page.wait_for_selector(".live.on")
        assert await viewer.is_disabled("#pause-toggle")
        assert await admin.is_enabled("#pause-toggle")

        await admin.click('#pause-toggle[data-action="pause"]')
        await viewer.wait_for_selector('#queue-state[data-paused="true"]')  # no reload
        assert "api:ops" in await viewer.text_content(".state")
        assert await w.queue.paused()

        # The viewer forces the request the disabled button would make: the API refuses it.
        refused = await viewer.evaluate("""async () => {
            const s = await (await fetch('/dashboard/session')).json();
            const r = await fetch('/api/v1/queue/resume', {method: 'POST',
                                                            headers: {'X-CSRF-Token': s.csrf}});
            return [r.status, (await r.json()).error.code];
        }""")
        assert refused == [403, "refused_role"]
        # Without the CSRF token even an admin's cookie changes nothing.
        forged = await admin.evaluate("""async () => {
            const r = await fetch('/api/v1/queue/resume', {method: 'POST'});
            return [r.status, (await r.json()).error.code];
        }""")
        assert forged == [403, "csrf"]
        assert await w.queue.paused()

        await admin.click('#pause-toggle[data-action="resume"]')
        await viewer.wait_for_selector('#queue-state[data-paused="false"]')


async def test_running_job_step_progress_and_executors_are_live(tmp_path, demo_models, browser):
    from storage.workers import Workers
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        await enqueue_many(w.queue, 2)
        page = await signed_in(browser, w, VIEWER)
        await page.wait_for_selector(".live.on")
        await page.wait_for_selector("#no-workers")
        lease = await w.queue.claim("exec-a")  # as an executor would, with its heartbeat
        await Workers.of(w.queue).beat("exec-a", host="gpu7", pid=1, device="cuda:0",
                                       version="0.1.0", job=lease.job_id, models=["sdxl"],
                                       memory_used=6 * 2**30, memory_total=80 * 2**30,
                                       allow=["sdxl", "sd15"])
        await page.wait_for_selector(f'ul.now-running li[data-job="{lease.job_id}"]')
        for step in (3, 7):
            await w.queue.progress(lease, {"node": "generate", "step": step, "total": 8})
            bar = f'[data-progress="{lease.job_id}"] progress'
            await page.wait_for_function(
                "([bar, step]) => document.querySelector(bar)?.value == step", arg=[bar, step])
        assert "step 7/8" in await page.text_content(f'[data-progress="{lease.job_id}"]')
        assert await page.get_attribute(f'[data-progress="{lease.job_id}"] progress', "max") == "8"
        row = await page.text_content('[data-worker="exec-a"]')
        assert "cuda:0" in row and "busy" in row and "6.0 GiB / 80.0 GiB" in row
        assert "sdxl · takes sdxl, sd15" in row
        assert await page.locator("#no-workers").count() == 0

        # The image forming, as the executor sends it (storage.previews; never stored): on
        # the running row at once, then large in the lightbox, which follows it live.
        from PIL import Image

        from storage.previews import picture_of
        batch = await signed_in(browser, w, VIEWER, f"#/batches/{lease.batch_id}")
        await batch.wait_for_selector(f'figure.thumb[data-job="{lease.job_id}"] .step')
        await batch.wait_for_selector(".live.on")
        for step, colour in ((7, "red"), (8, "blue")):
            picture = picture_of(Image.new("RGB", (64, 64), colour))
            await w.queue.previews.send(lease.job_id, lease.batch_id, step, 8, 0.0, picture)
            if step == 7:
                shown = f'ul.now-running img[data-preview="{lease.job_id}"]:not([hidden])'
                await page.wait_for_selector(shown)
                card = f'figure.thumb[data-job="{lease.job_id}"] img[data-preview]:not([hidden])'
                await batch.click(card)
        big = ".lightbox img.full"
        await batch.wait_for_function(
            "b => document.querySelector(b).src.startsWith('data:image/webp')", arg=big)
        await batch.wait_for_function(  # the blue of step 8 replaced the red of step 7
            """b => { const img = document.querySelector(b);
                      if (!img.complete || !img.naturalWidth) return false;
                      const c = document.createElement("canvas"); c.width = c.height = 1;
                      const g = c.getContext("2d"); g.drawImage(img, 0, 0, 1, 1);
                      const [r, , bl] = g.getImageData(0, 0, 1, 1).data;
                      return bl > 150 && r < 80; }""",
            arg=big)
        assert await batch.get_attribute(big, "alt") and \
            await batch.is_hidden(".lightbox [data-download]")  # nothing to download yet
        await batch.screenshot(path=str(tmp_path / "forming.png"))


async def test_submit_a_sheet_through_the_form_and_watch_it_finish(tmp_path, demo_models,
                                                                  browser):
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        page = await signed_in(browser, w, ALICE, "#/submit")
        await page.wait_for_selector("#submit-form")
        await page.select_option("#template", "social_thumb")
        assert "title" in await page.text_content(".params")

        # A bad sheet: the problems come back by row and column, nothing queued.
        await page.set_input_files("#sheet", files=[{
            "name": "bad.csv", "mimeType": "text/csv", "buffer": b"image,title\nmissing.png,A\n"}])
        await page.click("#send")
        await page.wait_for_selector("#report ul.problems li")
        assert "row 2" in (await page.text_content("#report")).lower()
        assert (await w.queue.active_counts()).total == 0
        # Sales channels go with it; a typo is said as the API says it, nothing queued.
        await page.fill("#channels", "douyn")
        await page.click("#send")
        await page.wait_for_selector('#report p.error:has-text("douyin")')
        assert (await page.text_content("#report p.error")).startswith(
            'No sales channel "douyn" — did you mean "douyin"?')
        assert (await w.queue.active_counts()).total == 0
        await page.fill("#channels", "jd")  # and the layout on their files
        await page.fill("#layout", "lanch")
        await page.click("#send")
        await page.wait_for_selector('#report p.error:has-text("launch")')
        assert (await page.text_content("#report p.error")).startswith(
            'No layout "lanch" — did you mean "launch"?')
        await page.fill("#channels", "")
        await page.fill("#layout", "")

        # A good one, with the picture it names; the queue paused so we see it wait first.
        await w.queue.pause(by="test")
        sheet = b"image,title\nbottle.png,First\nbottle.png,Second\nbottle.png,Third\n"
        await page.set_input_files("#sheet", files=[{"name": "sheet.csv", "mimeType": "text/csv",
                                                     "buffer": sheet}])
        await page.set_input_files("#pictures", files=[{"name": "bottle.png",
                                                        "mimeType": "image/png", "buffer": BOTTLE}])
        # Only the priorities a submitter may use are offered ([chat] submitter_max_priority).
        assert await page.eval_on_selector_all("#priority option", "os => os.map(o => o.value)") \
            == ["normal", "low"]
        await page.select_option("#priority", "low")
        await page.click("#send")
        await page.wait_for_function("() => location.hash === '#/batches/1'")
        await page.wait_for_selector('#thumbs figure[data-job="3"] [data-status="queued"]')
        assert await page.get_attribute("#batch-progress", "aria-valuenow") == "0"
        assert (await w.queue.batch(1)).priority == 3  # low

        seen: set[str] = set()
        w.start_executor()
        await w.queue.resume(by="test")
        async with asyncio.timeout(120):
            while (value := await page.get_attribute("#batch-progress", "aria-valuenow")) != "3":
                seen.add(value)
                await asyncio.sleep(0.05)
        assert "3 of 3 done" in await page.text_content("#batch-done")
        assert seen >= {"0"}
        # Every row's thumbnail loads, small: made by the API from the full image.
        await page.wait_for_function("""() => {
            const imgs = [...document.querySelectorAll('#thumbs img')];
            return imgs.length === 3 && imgs.every(i => i.complete && i.naturalWidth > 0);
        }""")
        widths = await page.eval_on_selector_all("#thumbs img",
                                                 "imgs => imgs.map(i => i.naturalWidth)")
        assert all(0 < width <= 256 for width in widths)
        # Each card is named by the template's key column (the title here) and its row.
        captions = await page.eval_on_selector_all("#thumbs figcaption",
                                                   "fs => fs.map(f => f.textContent.trim())")
        assert captions == ["First · Row 2 succeeded", "Second · Row 3 succeeded",
                            "Third · Row 4 succeeded"]
        assert await page.locator("#demo-note").count() == 0  # pillow only: no model
        assert await page.locator('a:has-text("Contact sheet")').count() == 1


async def test_a_batch_says_its_images_are_noise_and_what_it_waits_for(tmp_path, demo_models,
                                                                       browser):
    from storage.workers import Workers
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        await w.queue.enqueue(Submission("product_main", "api:alice", [NewJob(
            row=2, workflow={"template": "product_main", "params": {"sku": "BTL-001"}},
            affinity="sdxl")], platform="api"))
        await Workers.of(w.queue).beat(  # the one executor running cannot hold sdxl
            "gpu1:7", host="gpu1", pid=7, device="cuda:0", version="0.1.0", job=None,
            allow=["sd15"], stats={"engine": "diffusers", "cannot_run": {
                "sdxl": "it needs about 6.5 GiB, more than the 4.0 GiB this executor may use"}})
        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.wait_for_selector("#demo-note")
        assert await page.text_content("#demo-note") == (
            "Demo model (sdxl) — images are noise; for real ones: genbot docs models.")
        assert await page.text_content(".unplaced") == (
            "Waiting: no running executor can run model sdxl — gpu1:7: it needs about 6.5 GiB, "
            "more than the 4.0 GiB this executor may use")
        await page.wait_for_selector("#thumbs figcaption")
        assert (await page.text_content("#thumbs figcaption")).startswith("BTL-001 · Row 2")
        # Canceled, it reads canceled: its bar one canceled segment, not a full blue bar,
        # and no link to a contact sheet there is none of (no image was made).
        await w.queue.cancel(batch=1, by="api:alice")
        await page.wait_for_selector("#batch-progress .segment")
        segments = await page.eval_on_selector_all(
            "#batch-progress .segment", "ss => ss.map(s => [s.dataset.state, s.style.width])")
        assert segments == [["canceled", "100%"]]
        assert (await page.text_content("#batch-done")).strip() == \
            "Canceled: 1 of 1 jobs canceled, 0 made images, 0 failed"
        await page.wait_for_selector('a:has-text("Results (.xlsx)")')
        assert await page.locator('a:has-text("Contact sheet")').count() == 0


async def test_keep_again_and_the_lineage_of_an_image_from_its_batch_page(tmp_path, demo_models,
                                                                           browser):


    from bot.app.application import Accepted, SubmitOptions
    from bot.app.permissions import Who
    from bot.intake.check import SheetFile
    from storage.records import KEPT
    from tests.fakes.apps import second_version

    async def pictures(name: str) -> bytes | None:
        return BOTTLE

    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        done = await w.app.submit(Who("api", "alice", "api"), "product_main", SheetFile(
            "p.csv", b"sku,product_image,prompt,steps\nBTL-1,bottle.png,a bottle,4\n"), pictures,
            SubmitOptions(wait_for_executor=True))
        assert isinstance(done, Accepted)
        (job,) = await finish_all(w.app, done.batch_id)  # finished, as an executor would

        viewer = await signed_in(browser, w, VIEWER, "#/batches/1")
        await viewer.wait_for_selector('#thumbs figure[data-job="1"] img')
        assert await viewer.locator("[data-act], [data-keep], [data-reject]").count() == 0  # a
        # viewer neither reviews nor queues

        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.click('#thumbs figure[data-job="1"] [data-keep="1"]')
        await page.wait_for_selector('#thumbs figure[data-job="1"][data-rating="kept"]')
        assert (await w.queue.job(1)).rating == KEPT
        await page.check("#kept-only")  # the picks: kept images of it and all made from it
        await page.wait_for_function("() => location.hash === '#/batches/1?kept=1'")
        await page.wait_for_selector("#pick-files a >> nth=1")
        assert await page.locator("#thumbs figure").count() == 1

        await page.click('#thumbs figure[data-job="1"] [data-act="again"]')
        await page.wait_for_function("() => location.hash === '#/batches/2'")
        await page.wait_for_selector("#made-from a[href='#/batches/1']")
        assert "Again of job 1" in await page.text_content("#made-from")
        await page.click('#thumbs figure[data-job="2"] [data-lineage="2"]')
        await page.wait_for_selector('figure[data-job="2"] .ancestors a[data-lineage-job="1"]')
        assert "kept" in await page.text_content('figure[data-job="2"] .ancestors')
        assert (await w.queue.job(2)).parent_job_id == 1

        # The image itself changed by a sentence: a box under it (the edit model's), not
        # for a viewer.
        assert await viewer.locator("form[data-instruct]").count() == 0
        await page.goto(f"{w.url}/dashboard/#/batches/1")
        box = '#thumbs figure[data-job="1"] form[data-instruct="1"]'
        await page.fill(f"{box} input", "把背景换成海滩")
        await page.screenshot(path=str(tmp_path / "instruction.png"))
        async with page.expect_response(lambda r: r.url.endswith("/jobs/1/actions")) as sent:
            # typed and sent in one go: a refresh that rebuilt the card between a fill and
            # a click would leave an empty box, which sends nothing (seen once under load)
            await page.locator(box).evaluate(
                "f => { f.querySelector('input').value = '把背景换成海滩'; f.requestSubmit(); }")
        assert (await sent.value).status == 201
        await page.wait_for_function("() => location.hash === '#/batches/3'")
        (told,) = await w.queue.batch_jobs(3)
        assert told.parent_job_id == 1 and told.action == "edit"
        assert decode(told.workflow).nodes[0].inputs["instruction"] == "把背景换成海滩"

        # An A/B batch: its page tallies the rows each version won by keeps.
        await second_version(w.app, "product_main", "control_scale", 0.5)
        ab = await w.app.submit(Who("api", "alice", "api"), "product_main@1", SheetFile(
            "p.csv", b"sku,product_image,prompt,steps\nBTL-1,bottle.png,a bottle,4\n"),
            pictures, SubmitOptions(wait_for_executor=True, compare=("product_main@2",)))
        assert isinstance(ab, Accepted)
        a, _b = await finish_all(w.app, ab.batch_id)
        await w.app.rate(Who("api", "alice", "api"), a.id, "keep")
        await page.goto(f"{w.url}/dashboard/#/batches/{ab.batch_id}")
        await page.wait_for_selector("#ab-tally li >> nth=2")
        assert (await page.locator("#ab-tally li").all_inner_texts()) == [
            "A product_main@1: kept in 1 row where the other was not",
            "B product_main@2: kept in 0 rows where the other was not",
            "tie (both or neither kept): 0"]

        # A template without a model (social_thumb: a layout over a picture) offers only
        # what it can do: no Again (the same image again) and no Vary, but Keep.
        thumb = await w.app.submit(Who("api", "alice", "api"), "social_thumb", SheetFile(
            "t.csv", b"image,title\nbottle.png,Autumn\n"), pictures,
            SubmitOptions(wait_for_executor=True))
        assert isinstance(thumb, Accepted)
        (made,) = await finish_all(w.app, thumb.batch_id)
        await page.goto(f"{w.url}/dashboard/#/batches/{thumb.batch_id}")
        await page.wait_for_selector(f'#thumbs figure[data-job="{made.id}"] [data-keep]')
        offered = await page.locator(f'#thumbs figure[data-job="{made.id}"] [data-act]') \
            .evaluate_all("buttons => buttons.map(b => b.dataset.act)")
        assert "again" not in offered and "vary" not in offered, offered


async def test_an_admin_tests_a_webhook_re_enables_it_after_410_and_redelivers(tmp_path,
                                                                             demo_models,
                                                                             browser):
    from bot.webhooks.endpoints import new_secret
    hook = await Receiver(new_secret()).start()
    try:
        config = dashboard_config(tmp_path, demo_models, webhooks=[
            {"name": "dam", "url": hook.url, "secret": hook.secret}])
        async with DashWorld(config) as w:
            viewer = await signed_in(browser, w, VIEWER)  # no link to a page it may not see
            await viewer.wait_for_selector("#nav a[href='#/']")
            assert await viewer.is_hidden("#nav-webhooks")

            page = await signed_in(browser, w, ADMIN)
            await page.click("#nav-webhooks")
            endpoint = '#endpoints tr[data-endpoint="dam"]'
            await page.wait_for_selector(endpoint)
            assert hook.url in await page.text_content(endpoint)
            assert await page.locator("#no-deliveries").count() == 1

            # A test it takes: said so, and listed as sent.
            await page.click(f'{endpoint} [data-test="dam"]')
            await page.wait_for_selector('#toast.ok:has-text("dam took the test")')
            await page.wait_for_selector('#deliveries tr[data-delivery="1"][data-status="sent"]')
            assert [b["type"] for b in hook.events()] == ["webhook.test"]

            # Answered 410 Gone: not taken, and the endpoint is off until an admin says.
            hook.gone = True
            await page.click(f'{endpoint} [data-test="dam"]')
            await page.wait_for_selector('#toast.error:has-text("dam did not take the test")')
            await page.wait_for_selector(f'{endpoint}[data-disabled="true"] [data-enable="dam"]')
            assert "410 Gone" in await page.text_content(f"{endpoint} .reason")
            failed = '#deliveries tr[data-delivery="2"][data-status="failed"]'
            await page.wait_for_selector(failed)
            assert "410" in await page.text_content(failed)

            hook.gone = False
            await page.click(f'{endpoint} [data-enable="dam"]')
            await page.wait_for_selector(f'{endpoint}[data-disabled="false"]')
            assert await page.locator(f'{endpoint} [data-enable]').count() == 0
            await page.click(f'{failed} [data-redeliver="2"]')
            await page.wait_for_selector('#toast.ok:has-text("Delivery 2 taken")')
            await page.wait_for_selector('#deliveries tr[data-delivery="2"][data-status="sent"]')
            assert len(hook.events("webhook.test")) == 2
            # Newest first; and the filter by status lists only those.
            assert await page.eval_on_selector_all(
                "#deliveries tr[data-delivery]", "rs => rs.map(r => r.dataset.delivery)") == \
                ["2", "1"]
            await page.select_option("#delivery-status", "failed")
            await page.wait_for_selector("#no-deliveries")
            assert await page.evaluate("location.hash") == "#/webhooks?status=failed"
    finally:
        await hook.stop()


async def test_a_region_painted_on_the_image_is_repainted_and_a_shape_extends_it(
        tmp_path, demo_models, browser):
    """Repaint opens the image with a layer to paint on: a rectangle dragged by mouse and
    a stroke by touch are the mask sent, white where painted, at the image's own pixels;
    nothing painted is refused on the page. Extend grows the canvas to the shape chosen.
    Neither is offered to a viewer."""
    import numpy as np
    from PIL import Image

    from bot.app.application import Accepted, SubmitOptions
    from bot.app.permissions import Who
    from bot.intake.check import SheetFile

    async def pictures(name: str) -> bytes | None:
        return BOTTLE

    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        done = await w.app.submit(Who("api", "alice", "api"), "product_main", SheetFile(
            "p.csv", b"sku,product_image,prompt,steps\nBTL-1,bottle.png,a bottle,4\n"),
            pictures, SubmitOptions(wait_for_executor=True))
        assert isinstance(done, Accepted)
        await finish_all(w.app, done.batch_id)  # job 1: a 64x48 image
        viewer = await signed_in(browser, w, VIEWER, "#/batches/1")
        await viewer.wait_for_selector('#thumbs figure[data-job="1"] img')
        assert await viewer.locator("[data-paint], [data-grow]").count() == 0

        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.set_viewport_size({"width": 1000, "height": 900})
        await page.click('#thumbs figure[data-job="1"] [data-paint="1"]')
        layer = page.locator('dialog.painter canvas[data-mask-layer="1"]')
        await page.wait_for_function("() => document.querySelector('canvas.mask-layer')"
                                     ".width === 64")
        await page.click('dialog.painter [data-send-mask="1"]')  # nothing painted yet
        assert await page.text_content("[data-painter-says]") == \
            "Paint the region to repaint first, or name it in words."
        assert await page.locator("dialog.painter [data-region]").count() == 0  # no segmenter
        box = await layer.bounding_box()
        assert box is not None
        px = box["width"] / 64  # screen px per image px
        await page.click('dialog.painter [data-tool="rectangle"]')
        await page.mouse.move(box["x"] + 4 * px, box["y"] + 4 * px)
        await page.mouse.down()
        await page.mouse.move(box["x"] + 20 * px, box["y"] + 30 * px, steps=4)
        await page.mouse.up()
        await page.click('dialog.painter [data-tool="brush"]')
        await page.fill('dialog.painter input[name="brush"]', "40")  # screen px
        touch = await page.context.new_cdp_session(page)  # a finger, as the browser sees one
        await touch.send("Emulation.setTouchEmulationEnabled", {"enabled": True})
        for kind, x in (("touchStart", 44), ("touchMove", 52), ("touchMove", 60),
                        ("touchEnd", 60)):  # a stroke along y = 24
            await touch.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [] if
                             kind == "touchEnd" else [{"x": box["x"] + x * px,
                                                       "y": box["y"] + 24 * px}]})
        await page.fill('dialog.painter input[name="paint"]', "a red scarf")
        await page.screenshot(path=str(tmp_path / "painter.png"))
        await page.click('dialog.painter [data-send-mask="1"]')
        await page.wait_for_function("() => location.hash === '#/batches/2'")
        (painted,) = await w.queue.batch_jobs(2)
        step = decode(painted.workflow).nodes[0].inputs
        assert (painted.action, step["prompt"]) == ("repaint", "a red scarf")
        with Image.open(w.app.store.path(step["mask"])) as stored:
            mask = np.asarray(stored.convert("L"))
        assert mask.shape == (48, 64) and set(np.unique(mask)) == {0, 255}
        assert mask[6:28, 6:18].min() == 255  # inside the rectangle
        assert mask[24, 46:58].min() == 255  # along the finger's stroke
        assert mask[40:, :].max() == 0 and mask[:, 30:40].max() == 0  # untouched

        # Extend: a shape sets the margins, a handle drags one side out (mouse, touch).
        await page.goto(f"{w.url}/dashboard/#/batches/1")
        await page.click('#thumbs figure[data-job="1"] [data-grow="1"]')
        await page.wait_for_function("() => document.querySelector('[data-grow-size]')"
                                     ".textContent === '64×48 → 64×48'")
        await page.click('dialog.grower [data-send-grow="1"]')  # nothing grown yet
        assert await page.text_content("dialog.grower [role=alert]") == \
            "Drag a side out, or pick a shape, first."
        await page.click('dialog.grower [data-shape="1:1"]')
        size = "dialog.grower [data-grow-size]"
        assert await page.text_content(size) == "64×48 → 64×64"  # 8 px above and below
        frame = await page.locator("dialog.grower [data-grow-frame]").bounding_box()
        assert frame is not None
        scale = frame["width"] / 64  # screen px per image px
        right = await page.locator('dialog.grower [data-handle="right"]').bounding_box()
        assert right is not None
        x, y = right["x"] + right["width"] / 2, right["y"] + right["height"] / 2
        await page.mouse.move(x, y)
        await page.mouse.down()
        await page.mouse.move(x + 10 * scale, y, steps=3)
        await page.mouse.up()
        assert await page.text_content(size) == "64×48 → 74×64"
        left = await page.locator('dialog.grower [data-handle="left"]').bounding_box()
        assert left is not None
        lx, ly = left["x"] + left["width"] / 2, left["y"] + left["height"] / 2
        now = await page.locator("dialog.grower [data-grow-frame]").bounding_box()
        assert now is not None
        step = now["width"] / 74  # (the frame refits the canvas as it grows)
        for kind, dx in (("touchStart", 0), ("touchMove", -3), ("touchMove", -6),
                         ("touchEnd", -6)):  # a finger drags the left side out 6 px
            await touch.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [] if
                             kind == "touchEnd" else [{"x": lx + dx * step, "y": ly}]})
        assert await page.text_content(size) == "64×48 → 80×64"
        await page.screenshot(path=str(tmp_path / "grower.png"))
        await page.click('dialog.grower [data-send-grow="1"]')
        await page.wait_for_function("() => location.hash === '#/batches/3'")
        (wide,) = await w.queue.batch_jobs(3)
        assert wide.action == "extend"
        step_in = decode(wide.workflow).nodes[0].inputs
        assert [step_in.get(k) for k in ("left", "right", "top", "bottom")] == [6, 10, 8, 8]

        # Where a segmentation model is configured, the region may be named in words.
        w.app.segmentation_model = lambda: "walnut"  # (the executor tells a CLIPSeg apart)
        worded = await signed_in(browser, w, ALICE, "#/batches/1")
        await worded.click('#thumbs figure[data-job="1"] [data-paint="1"]')
        await worded.fill('dialog.painter input[data-region="1"]', "the bottle")
        await worded.screenshot(path=str(tmp_path / "painter-words.png"))
        await worded.click('dialog.painter [data-send-mask="1"]')
        await worded.wait_for_function("() => location.hash === '#/batches/4'")
        (found,) = await w.queue.batch_jobs(4)
        step_in = decode(found.workflow).nodes[0].inputs
        assert (step_in["region"], "mask" in step_in) == ("the bottle", False)


async def test_each_card_of_a_sweep_says_what_tells_it_apart(tmp_path, demo_models, browser):
    """A sweep's cards of one row all read "BTL-1 · Row 2": each also says its swept values
    (GET /jobs' `axes`), and an action's card what made it. "As a grid" lays the sweep out
    as its contact sheet does — steps across, guidance down, each header a swept value —
    and a cell's image opens in the lightbox."""
    from bot.app.application import Accepted, SubmitOptions
    from bot.app.iterate import ActionRequest
    from bot.app.permissions import Who
    from bot.intake.check import SheetFile

    async def pictures(name: str) -> bytes | None:
        return BOTTLE

    alice = Who("api", "alice", "api")
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        done = await w.app.submit(alice, "product_main", SheetFile(
            "p.csv", b"sku,product_image,prompt\nBTL-1,bottle.png,a bottle\n"), pictures,
            SubmitOptions(wait_for_executor=True, vary=("steps=2,3", "guidance=4,6")))
        assert isinstance(done, Accepted)
        jobs = await finish_all(w.app, done.batch_id)
        await w.app.act(alice, jobs[0].id, ActionRequest("vary", wait_for_executor=True))
        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.wait_for_selector('#thumbs figure[data-job="4"] [data-distinct="4"]')
        said = await page.eval_on_selector_all(
            "#thumbs figure", "fs => fs.map(f => f.querySelector('figcaption').textContent)")
        assert said == [f"BTL-1 · Row 2 steps={s} · guidance={g} succeeded"
                        for s, g in ((2, 4), (2, 6), (3, 4), (3, 6))], said
        await page.click("#sweep-grid")
        await page.wait_for_selector("#thumbs .sweep-grid table")
        heads = await page.eval_on_selector_all(".sweep-grid th",
                                                "ts => ts.map(t => t.textContent)")
        assert heads == ["", "steps=2", "steps=3", "guidance=4", "guidance=6"]
        cell = await page.eval_on_selector(  # down guidance=6, across steps=3: job 4
            ".sweep-grid tbody tr:nth-child(2) td:nth-child(3) figure", "f => f.dataset.job")
        assert cell == "4" and await page.text_content(".sweep-grid h3") == "BTL-1 · Row 2"
        await page.screenshot(path=str(tmp_path / "sweep.png"))
        await page.click(".sweep-grid tbody tr:nth-child(2) td:nth-child(3) a[data-open]")
        await page.wait_for_selector('dialog.lightbox[data-lightbox="4"]')
        assert "steps=3 · guidance=6" in await page.text_content("dialog.lightbox .title")
        await page.keyboard.press("Escape")
        await page.goto(f"{w.url}/dashboard/#/batches/2")
        await page.wait_for_selector('#thumbs figure [data-distinct]')
        assert "Vary" in await page.text_content("#thumbs figure [data-distinct]")


async def test_fifty_images_reviewed_by_keys_alone_then_signed_off(tmp_path, demo_models,
                                                                   browser):
    """A reviewer culls a 50-image batch by keys: P approves and X rejects, each moving to
    the next image; Shift+X asks the reason (a preset), R the changes (queued as an
    edit); 4 grades; Ctrl+Z takes the last back; every decision is in the database. Sign
    off waits for the last image, then says who; a viewer sees no review at all."""
    from storage.reviews import Review

    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        jobs = await finished(w, PRODUCTS + "".join(f"BTL-{i},bottle.png,a bottle,4\n"
                                                    for i in range(50)))
        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.wait_for_selector(f'#thumbs figure[data-job="{jobs[-1].id}"]')
        assert "0 of 50 images reviewed" in await page.text_content("#reviewed-of")
        assert await page.is_disabled("#sign-off")
        await page.focus("#thumbs figure.thumb")  # (the first image; no click from here on)
        for i in range(47):
            await page.keyboard.press("p" if i % 2 == 0 else "x")
            await page.wait_for_function(  # the next image has the focus
                f"() => document.activeElement.dataset.job === '{jobs[i + 1].id}'")
        await page.keyboard.press("Shift+X")  # image 48: rejected for a reason picked
        await page.click("dialog.words [data-preset] >> nth=0")
        await page.wait_for_selector(f'figure[data-job="{jobs[47].id}"] .review-note')
        await page.keyboard.press("4")
        await page.keyboard.press("ArrowRight")
        await page.keyboard.press("r")  # image 49: changes asked for, typed
        await page.fill("dialog.words input", "把背景换成海滩")
        await page.keyboard.press("Enter")
        await page.wait_for_selector(f'figure[data-job="{jobs[48].id}"][data-review='
                                     '"changes_requested"]')
        await page.keyboard.press("ArrowRight")
        await page.keyboard.press("p")  # image 50 …
        await page.wait_for_selector(f'figure[data-job="{jobs[49].id}"][data-review="approved"]')
        await page.keyboard.press("Control+z")  # … taken back
        await page.wait_for_selector(f'figure[data-job="{jobs[49].id}"]'
                                     '[data-review="unreviewed"]')
        assert await page.is_disabled("#sign-off")
        reviews = [j.review for j in await w.queue.batch_jobs(1)]
        assert reviews[:47] == [Review.APPROVED, Review.REJECTED] * 23 + [Review.APPROVED]
        assert reviews[47:] == [Review.REJECTED, Review.CHANGES, Review.UNREVIEWED]
        graded = await w.queue.job(jobs[47].id)
        assert (graded.stars, graded.review_note) == (4, "Product changed")
        (change,) = await w.queue.children(jobs[48].id)  # the edit, queued as alice's
        assert change.submitter == "api:alice"
        await page.focus(f'figure[data-job="{jobs[49].id}"]')
        await page.keyboard.press("p")
        await page.wait_for_selector("#sign-off:not([disabled])")
        await page.click("#sign-off")
        await page.wait_for_selector("#signed-off")
        assert "Signed off by api:alice" in await page.text_content("#signed-off")
        assert (await w.app.batch(1)).signed_off_by == "api:alice"
        # final now: the cards lose their review buttons (drawn after the heading)
        await page.wait_for_function("() => !document.querySelector('[data-reject]')")
        await page.screenshot(path=str(tmp_path / "reviewed.png"))
        viewer = await signed_in(browser, w, VIEWER, "#/batches/1")
        await viewer.wait_for_selector("#signed-off")
        assert await viewer.locator("[data-reject], [data-changes], #sign-off").count() == 0


async def test_the_lightbox_shows_an_image_its_recipe_and_the_call_that_makes_it_again(
        tmp_path, demo_models, browser):
    """A card opens the image large (Enter, or a click) beside its recipe: the row's values,
    the model, template@version, timings and the exact API call that makes it again — which
    does (201); arrows step through the batch, Z shows 100 %, P approves and moves on,
    Escape gives the focus back to the card it ended on."""
    import json
    import re

    from bot.settings import IntakeConfig
    from storage.reviews import Review
    (tmp_path / "assets").mkdir()  # the pictures a remake names: kept in the assets folder
    (tmp_path / "assets" / "bottle.png").write_bytes(BOTTLE)
    config = dashboard_config(tmp_path, demo_models).replaced(
        IntakeConfig, assets_dir=str(tmp_path / "assets"))
    async with DashWorld(config) as w:
        jobs = await finished(w, PRODUCTS + "BTL-1,bottle.png,a bottle,4\n"
                              "BTL-2,bottle.png,a jar,4\nBTL-3,bottle.png,a vase,4\n")
        for job in (jobs[0], jobs[2]):  # big enough to scroll at 100 % (compared below)
            big = io.BytesIO()
            Image.new("RGB", (1600, 1200), "blue").save(big, "PNG")
            w.app.store.path(job.outputs[0]).write_bytes(big.getvalue())
        page = await signed_in(browser, w, ALICE, "#/batches/1")
        await page.focus(f'#thumbs figure[data-job="{jobs[0].id}"]')
        await page.keyboard.press("Enter")
        box = page.locator("dialog.lightbox[open]")
        await box.wait_for()
        assert await box.get_attribute("data-lightbox") == str(jobs[0].id)
        assert await box.locator('[data-value="prompt"]').text_content() == "a bottle"
        assert await box.locator('[data-value="product_image"]').text_content() == "bottle.png"
        assert await box.locator("[data-model]").text_content() == jobs[0].affinity
        version = jobs[0].workflow["revision"]
        assert await box.locator("[data-template]").text_content() == f"product_main@{version}"
        await box.locator('.lineage-links a, .lineage-links:has-text("none")').first.wait_for()
        call = await box.locator("[data-remake]").text_content()
        body = json.loads(re.search(r"-d '(.*)'$", call, re.S).group(1))
        assert body == {"template": f"product_main@{version}",
                        "rows": [{**jobs[0].values, "product_image": "bottle.png"}]}
        async with aiohttp.ClientSession() as http, http.post(
                f"{w.url}/api/v1/batches", json=body,
                headers={"Authorization": f"Bearer {ALICE}"}) as r:
            assert r.status == 201, await r.text()  # the call as shown makes it again

        await page.keyboard.press("ArrowRight")
        await page.wait_for_function(
            f"() => document.querySelector('dialog.lightbox').dataset.lightbox === '{jobs[1].id}'")
        await page.keyboard.press("z")
        await page.wait_for_selector(".lightbox .stage.zoomed")
        sizes = await page.eval_on_selector(
            ".lightbox .stage img", "i => [i.naturalWidth, i.getBoundingClientRect().width]")
        assert sizes[0] == sizes[1]  # 100 %: one image pixel, one CSS pixel
        await page.keyboard.press("p")  # approves job 2, shows job 3
        await page.wait_for_function(
            f"() => document.querySelector('dialog.lightbox').dataset.lightbox === '{jobs[2].id}'")
        await page.wait_for_selector(f'figure[data-job="{jobs[1].id}"][data-review="approved"]')
        assert (await w.queue.job(jobs[1].id)).review is Review.APPROVED
        await page.screenshot(path=str(tmp_path / "lightbox.png"))
        await page.keyboard.press("Escape")
        await page.wait_for_function(
            f"() => document.activeElement.dataset.job === '{jobs[2].id}'")

        # Compare: C picks (jobs 1 and 3), Shift+C shows them side by side; Z zooms both to
        # 100 % and scrolling one scrolls the other to the same place.
        await page.keyboard.press("c")  # (on job 3, focused)
        await page.focus(f'#thumbs figure[data-job="{jobs[0].id}"]')
        await page.keyboard.press("c")
        await page.wait_for_selector("#compare:not([hidden])")
        assert await page.text_content("#compare") == "Compare (2)"
        await page.keyboard.press("Shift+C")
        panes = page.locator("dialog.compare[open] .pane")
        await panes.first.wait_for()
        assert await panes.count() == 2
        await page.keyboard.press("z")
        await page.wait_for_function(
            "() => document.querySelectorAll('dialog.compare .stage.zoomed').length === 2")
        await page.wait_for_function("() => [...document.querySelectorAll("
                                     "'dialog.compare .stage img')].every(i => i.complete)")
        await page.eval_on_selector("dialog.compare .stage",
                                    "s => { s.scrollLeft = 300; s.scrollTop = 200; }")
        await page.wait_for_function(
            "() => document.querySelectorAll('dialog.compare .stage')[1].scrollLeft === 300")
        await page.keyboard.press("z")
        await page.screenshot(path=str(tmp_path / "compare.png"))
        await page.keyboard.press("Escape")

        # Before / after: an image made from another (Again of job 1), B in its lightbox.
        async with aiohttp.ClientSession() as http, http.post(
                f"{w.url}/api/v1/jobs/{jobs[0].id}/actions", json={"action": "again"},
                headers={"Authorization": f"Bearer {ALICE}"}) as r:
            child = (await r.json())["jobs"][0]["id"]
        await finish_all(w.app, (await w.queue.job(child)).batch_id)
        await page.goto(f"{w.url}/dashboard/#/batches/{(await w.queue.job(child)).batch_id}")
        await page.click(f'#thumbs figure[data-job="{child}"] a[data-open]')
        await page.wait_for_selector("dialog.lightbox[open] [data-before-after]:not([hidden])")
        await page.keyboard.press("b")
        slider = page.locator("dialog.before-after[open] [data-slider]")
        await slider.wait_for()
        assert await page.locator("dialog.before-after img.before").get_attribute("src") == \
            f"/api/v1/jobs/{jobs[0].id}/outputs/0"  # the image it was made from, under it
        await page.keyboard.press("ArrowRight")
        assert await slider.input_value() == "55"
        assert "55%" in await page.eval_on_selector("dialog.before-after img.after",
                                                    "i => i.style.clipPath")
        await page.screenshot(path=str(tmp_path / "before-after.png"))


WIDER_THAN_THE_SCREEN = """() => {
  const width = document.documentElement.clientWidth, wide = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 0.5)
      wide.push(`${el.tagName}.${el.className} ${Math.round(box.right)}`);
  }
  return [document.documentElement.scrollWidth - width, wide.slice(0, 8)];
}"""


async def test_every_page_fits_a_phone_and_the_lightbox_reviews_by_swipe(tmp_path, demo_models,
                                                                        browser):
    """At 390 x 844 no page scrolls sideways and no element reaches past the screen's
    edge — the header wraps, tables become cards, the lightbox stacks its recipe under the
    image; there a swipe up approves, down rejects, sideways steps."""
    from storage.reviews import Review

    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        jobs = await finished(w, PRODUCTS + "BTL-1,bottle.png,a bottle with a long name that "
                              "wraps,4\nBTL-2,bottle.png,a jar,4\nBTL-3,bottle.png,a vase,4\n",
                              user="ops")
        context = await browser.new_context(viewport={"width": 390, "height": 844},
                                            has_touch=True, is_mobile=True)
        page = await context.new_page()
        page.on("pageerror", lambda e: w.page_errors.append(str(e)))
        await page.goto(f"{w.url}/dashboard/")
        await page.wait_for_selector("#token")
        assert await page.evaluate(WIDER_THAN_THE_SCREEN) == [0, []], "sign-in"
        await page.fill("#token", ADMIN)
        await page.click("#sign-in button[type=submit]")
        await page.wait_for_selector("#me:not([hidden])")
        for view, ready in (("#/", ".counts"), ("#/jobs", ".scroller .jobrow[data-job]"),
                            ("#/gallery", "#gallery figure.tile"),
                            ("#/batches/1", "#thumbs figure img"), ("#/submit", "#submit-form"),
                            ("#/webhooks", "#deliveries")):  # (each its view's own)
            await page.goto(f"{w.url}/dashboard/{view}")
            await page.wait_for_selector(ready)
            assert await page.evaluate(WIDER_THAN_THE_SCREEN) == [0, []], view
            assert await page.is_visible("#sign-out"), view  # (it was off-screen)
        await page.goto(f"{w.url}/dashboard/#/batches/1")
        await page.click(f'#thumbs figure[data-job="{jobs[0].id}"] a[data-open]')
        stage = page.locator("dialog.lightbox[open] .stage")
        await stage.wait_for()
        assert await page.evaluate(WIDER_THAN_THE_SCREEN) == [0, []], "lightbox"
        box = await stage.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

        async def swipe(dx: float, dy: float) -> None:
            await page.mouse.move(x, y)
            await page.mouse.down()
            await page.mouse.move(x + dx, y + dy, steps=5)
            await page.mouse.up()

        await swipe(0, -150)  # up: approved, on to the next
        await page.wait_for_function(
            f"() => document.querySelector('dialog.lightbox').dataset.lightbox === '{jobs[1].id}'")
        await swipe(0, 150)  # down: rejected
        await page.wait_for_function(
            f"() => document.querySelector('dialog.lightbox').dataset.lightbox === '{jobs[2].id}'")
        await swipe(150, 0)  # right: back to the one before
        await page.wait_for_function(
            f"() => document.querySelector('dialog.lightbox').dataset.lightbox === '{jobs[1].id}'")
        await page.wait_for_selector(f'figure[data-job="{jobs[1].id}"][data-review="rejected"]')
        assert [(await w.queue.job(j.id)).review for j in jobs] == [
            Review.APPROVED, Review.REJECTED, Review.UNREVIEWED]
        await page.screenshot(path=str(tmp_path / "phone-lightbox.png"))
        await context.close()


async def test_rows_typed_in_the_form_with_a_sweep_queue_without_a_sheet(tmp_path, demo_models,
                                                                         browser):
    """No spreadsheet: the form gives a field per column (a picture per row uploaded, a
    choice as a list), two rows typed, a sweep of two values and two seeds: 2 x 2 x 2 = 8
    jobs, each with what was typed; a row left empty is left out; a bad value comes back
    by row and column as a sheet's would."""
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        page = await signed_in(browser, w, ALICE, "#/submit")
        await page.wait_for_selector("#submit-form")
        await page.select_option("#template", "product_main")
        await page.check("#by-rows")
        assert await page.is_hidden("#sheet")
        row = '#rows fieldset[data-row="{n}"] [data-param="{p}"]'
        await page.fill(row.format(n=1, p="sku"), "BTL-1")
        await page.set_input_files(row.format(n=1, p="product_image"), files=[{
            "name": "bottle.png", "mimeType": "image/png", "buffer": BOTTLE}])
        await page.fill(row.format(n=1, p="prompt"), 'a "glass" bottle, on oak')
        await page.click("#add-row")
        await page.fill(row.format(n=2, p="sku"), "BTL-2")
        await page.fill(row.format(n=2, p="prompt"), "a jar")  # (no picture yet: refused)
        await page.click("#add-row")  # (left empty: not a row)
        await page.fill("#axes input.axis", "guidance=5,7")
        await page.fill("#seeds", "2")
        await page.screenshot(path=str(tmp_path / "rows.png"), full_page=True)
        await page.click("#send")
        await page.wait_for_selector("#report ul.problems li")
        report = (await page.text_content("#report")).lower()
        assert "row 3" in report and "product_image" in report  # (the sheet's row 3)
        assert (await w.queue.active_counts()).total == 0
        await page.set_input_files(row.format(n=2, p="product_image"), files=[{
            "name": "bottle.png", "mimeType": "image/png", "buffer": BOTTLE}])
        await page.click("#send")
        await page.wait_for_function("() => location.hash === '#/batches/1'")
        jobs = await w.queue.batch_jobs(1)
        assert len(jobs) == 8
        assert sorted({(j.values["sku"], j.values["prompt"]) for j in jobs}) == [
            ("BTL-1", 'a "glass" bottle, on oak'), ("BTL-2", "a jar")]
        assert sorted({j.values["guidance"] for j in jobs}) == [5, 7]
        assert len({j.values["seed"] for j in jobs if j.values["sku"] == "BTL-1"}) == 2
        assert {j.workflow["named"]["product_image"] for j in jobs} == {
            "row1-bottle.png", "row2-bottle.png"}


async def test_the_gallery_spans_batches_filters_and_reviews_by_keys(tmp_path, demo_models,
                                                                    browser):
    """Every finished image across batches in a virtual grid (only the rows in view
    exist), filtered by template, review and stars; P and X review the focused image and
    move on; the filters then find what was reviewed."""
    from storage.reviews import Review

    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        await finished(w, PRODUCTS + "".join(f"BTL-{i},bottle.png,a bottle,4\n"
                                             for i in range(200)))
        await finished(w, "image,title\nbottle.png,One\nbottle.png,Two\n", "social_thumb")
        page = await signed_in(browser, w, ALICE, "#/gallery")
        await page.wait_for_selector("#gallery figure.tile")
        assert await page.text_content("#gallery-count") == "202 images"
        assert await page.locator("#gallery figure.tile").count() < 100  # only those in view
        await page.select_option("#gallery-template", "social_thumb")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-template').value === 'social_thumb'"
            " && document.querySelector('#gallery-count').textContent === '2 images'")
        newest, older = await page.eval_on_selector_all(
            "#gallery figure.tile", "fs => fs.map(f => Number(f.dataset.job))")
        await page.focus(f'#gallery figure[data-job="{newest}"]')
        await page.keyboard.press("p")
        await page.wait_for_function(
            f"() => document.activeElement.dataset.job === '{older}'")
        await page.keyboard.press("x")
        await page.keyboard.press("4")
        await page.wait_for_selector(f'#gallery figure[data-job="{older}"] .stars')
        assert [(await w.queue.job(j)).review for j in (newest, older)] == [
            Review.APPROVED, Review.REJECTED]
        assert (await w.queue.job(older)).stars == 4
        await page.select_option("#gallery-rating", "approved")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-rating').value === 'approved'"
            " && document.querySelector('#gallery-count').textContent === '1 image'")
        assert await page.get_attribute("#gallery figure.tile", "data-job") == str(newest)
        await page.goto(f"{w.url}/dashboard/#/gallery?stars=4")
        await page.wait_for_function(  # (the new view's, not the one it replaces)
            "() => document.querySelector('#gallery-stars').value === '4'"
            " && document.querySelector('#gallery-count').textContent === '1 image'")
        assert await page.get_attribute("#gallery figure.tile", "data-job") == str(older)
        # a swept value on a card shows its like across batches; the row and version too
        swept = await finished(w, PRODUCTS + "BTL-X,bottle.png,a bottle,4\n",
                               vary=("steps=2,3",))
        await page.goto(f"{w.url}/dashboard/#/gallery?template=product_main")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-count').textContent === '202 images'")
        await page.click('#gallery a[data-axis="steps=3"]')
        await page.wait_for_function(
            "() => document.querySelector('#gallery-axis').value === 'steps=3'"
            " && document.querySelector('#gallery-count').textContent === '1 image'")
        assert await page.get_attribute("#gallery figure.tile", "data-job") == str(swept[1].id)
        assert await page.input_value("#gallery-template") == "product_main"  # kept
        await page.goto(f"{w.url}/dashboard/#/gallery?row=3&version=1")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-row').value === '3'"
            " && document.querySelector('#gallery-count').textContent === '2 images'")
        # another state: the jobs still waiting, as cards without an image
        await enqueue_many(w.queue, 3)
        await page.goto(f"{w.url}/dashboard/#/gallery")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-count').textContent === '204 images'")
        await page.select_option("#gallery-status", "queued")
        await page.wait_for_function(
            "() => document.querySelector('#gallery-count').textContent === '3 jobs'")
        assert await page.locator("#gallery figure.tile img").count() == 0
        assert await page.locator("#gallery figure.tile .empty .badge").count() == 3
        await page.screenshot(path=str(tmp_path / "gallery.png"))


async def signed_in_as(page, user: str, role: str) -> None:
    """The page came back signed in as `user` (its own sign-in), with the chat's role."""
    await page.wait_for_selector("#me:not([hidden])")
    assert await page.text_content("#me") == f"{user} ({role})"
    me = await page.evaluate("fetch('/api/v1/me').then(r => r.json())")
    assert (me["user"], me["role"]) == (user, role)


async def through(browser, world, platform: str, lang: str = "en-US"):
    """A fresh browser that clicks "Sign in with PLATFORM" on the sign-in page."""
    page = await (await browser.new_context(locale=lang)).new_page()
    page.on("pageerror", lambda e: world.page_errors.append(str(e)))
    await page.goto(f"{world.url}/dashboard/")
    await page.click(f"[data-signin={platform}]")
    return page


async def test_sign_in_with_slack_is_the_same_person_and_role_as_in_chat(tmp_path, demo_models,
                                                                        browser):
    """Sign in with Slack (OpenID Connect against the Slack fake's authorize page, token
    and userInfo methods): no token pasted, the dashboard acts as slack:U1 with U1's chat
    role; Cancel on Slack's page, or a callback the service did not start, is said on
    the sign-in page, and nobody is signed in."""
    from tests.fakes.slack import CLIENT_ID, CLIENT_SECRET, FakeSlack
    fake = await FakeSlack().start()
    try:
        config = executor_config(
            tmp_path / "data", demo_models, service={"port": 0},
            api={"tokens": [f"{ADMIN}=ops"]}, chat={"reviewers": ["slack:U1"]},
            slack={"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                   "api_url": fake.api_url})
        async with DashWorld(config) as w:
            page = await through(browser, w, "slack")
            await signed_in_as(page, "slack:U1", "reviewer")
            assert fake.calls["openid.connect.token"] == 1 and not fake.codes  # used once

            fake.signin = None  # Cancel on Slack's page
            other = await through(browser, w, "slack")
            await other.wait_for_selector("#sign-in-error:not(:empty)")
            assert await other.text_content("#sign-in-error") == \
                "The sign-in was not allowed on the platform's page."
            assert await other.is_hidden("#me")
            await other.goto(f"{w.url}/dashboard/signin/slack/callback?code=x&state=forged")
            await other.wait_for_selector("#sign-in-error:not(:empty)")
            assert "expired or was not started here" in await other.text_content(
                "#sign-in-error")
            assert await other.is_hidden("#me")
    finally:
        await fake.stop()


async def test_sign_in_with_dingtalk_is_the_staff_member_chat_knows(tmp_path, demo_models,
                                                                     browser):
    """Sign in with DingTalk (the fake's login page, userAccessToken, users/me and
    getbyunionid): the dashboard acts as dingtalk:S1 — the staff id chat knows them by —
    with S1's chat role. Someone of another organisation, a closed login page and a
    callback the service did not start are each said on the sign-in page, in Chinese to a
    Chinese browser, and nobody is signed in."""
    from tests.fakes.dingtalk import APP_KEY, APP_SECRET, FakeDingTalk
    fake = await FakeDingTalk().start()
    try:
        config = executor_config(
            tmp_path / "data", demo_models, service={"port": 0},
            api={"tokens": [f"{ADMIN}=ops"]}, chat={"reviewers": ["dingtalk:S1"]},
            dingtalk={"app_key": APP_KEY, "app_secret": APP_SECRET, "sign_in": True,
                      "api_url": fake.base, "oapi_url": fake.base, "login_url": fake.base})
        async with DashWorld(config) as w:
            page = await through(browser, w, "dingtalk")
            await signed_in_as(page, "dingtalk:S1", "reviewer")
            assert fake.calls["userAccessToken"] == 1 and not fake.codes  # the code used once
            assert await page.locator("[data-signin=slack]").count() == 0  # not set up

            async def refused(set_to, lang="en-US") -> str:
                fake.signin = set_to
                other = await through(browser, w, "dingtalk", lang)
                await other.wait_for_selector("#sign-in-error:not(:empty)")
                assert await other.is_hidden("#me")
                return await other.text_content("#sign-in-error")
            assert await refused(("union-9", None)) == \
                "You are not in this service's DingTalk organisation."
            assert await refused(("union-9", None), "zh-CN") == "你不在本服务的钉钉组织中。"
            assert await refused(None) == "The sign-in was not allowed on the platform's page."
            forged = await (await browser.new_context()).new_page()
            await forged.goto(f"{w.url}/dashboard/signin/dingtalk/callback?authCode=x&state=y")
            await forged.wait_for_selector("#sign-in-error:not(:empty)")
            assert "expired or was not started here" in await forged.text_content(
                "#sign-in-error")
    finally:
        await fake.stop()


async def test_the_overview_lists_each_chat_platform_and_how_it_is_doing_in_en_and_zh(
        tmp_path, demo_models, browser):
    """The chat platforms panel: each platform's name, how its messages arrive, signed in
    (✓) or why not (✗ and the platform's reason), its connection up, down or — where it
    keeps none, and the messages it owes and gave up on; in English and in Chinese, and
    axe-clean. Without a platform, it says how to chat without one."""
    from axe_playwright_python.base import AXE_SCRIPT
    gateway = SteeredPlatform("discord", "gateway", connection=True)
    hooked = SteeredPlatform("dingtalk", "http")
    socket = SteeredPlatform("slack", "socket_mode", connection=False)  # not signed in yet
    gateway.mark_signed_in(True)
    hooked.mark_signed_in(False, "invalid app_secret")
    async with DashWorld(dashboard_config(tmp_path, demo_models),
                         [gateway, hooked, socket]) as w:
        gateway.faults = [rate_limited(3600)]  # owed an hour from now
        await w.core.outbox.put("owed", platform="discord", conversation="C1", thread=None,
                                kind="text", payload={"text": "hello"})
        await w.until(lambda: gateway.calls)
        page = await signed_in(browser, w, VIEWER)
        await page.context.add_init_script(script=AXE_SCRIPT)  # (the page's policy allows
        await page.reload()  # no script of ours: before it loads, as the axe test does)
        row = '.platforms tr[data-platform="{}"]'.format
        await page.wait_for_selector(row("discord"))
        assert await page.text_content(".platforms h2") == "Chat platforms"
        assert await page.eval_on_selector_all(
            ".platforms tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))") == [
            ["discord", "messages arrive by gateway", "✓ signed in", "connection up",
             "messages owed: 1", "failed: 0"],
            ["dingtalk", "messages arrive by http", "✗ cannot sign in: invalid app_secret",
             "connection — (messages come to this service)", "messages owed: 0", "failed: 0"],
            ["slack", "messages arrive by socket_mode", "signed in: not known yet",
             "connection down", "messages owed: 0", "failed: 0"]]
        assert await page.get_attribute(row("discord"), "data-up") == "true"
        assert await page.get_attribute(row("dingtalk"), "data-up") == "false"
        results = await page.evaluate("axe.run('.platforms', {resultTypes: ['violations']})")
        assert [v["id"] for v in results["violations"] if v["impact"] in SERIOUS] == []

        gateway.connection = False  # read afresh whenever the overview is
        await page.select_option("#lang", "zh")
        await page.wait_for_selector(".platforms h2 >> text='聊天平台'")
        assert await page.eval_on_selector_all(
            ".platforms tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))") == [
            ["discord", "消息接收方式：gateway", "✓ 已登录", "连接已断开", "待发消息：1",
             "发送失败：0"],
            ["dingtalk", "消息接收方式：http", "✗ 无法登录：invalid app_secret",
             "连接 —（消息发送到本服务）", "待发消息：0", "发送失败：0"],
            ["slack", "消息接收方式：socket_mode", "登录状态：尚不清楚", "连接已断开",
             "待发消息：0", "发送失败：0"]]
        assert await page.get_attribute(row("discord"), "data-up") == "false"
        await page.screenshot(path=str(tmp_path / "platforms-zh.png"))

    async with DashWorld(dashboard_config(tmp_path / "none", demo_models)) as w:
        page = await signed_in(browser, w, VIEWER)
        await page.wait_for_selector("#no-platforms")
        assert await page.text_content("#no-platforms") == \
            "No chat platform configured — genbot chat works in a terminal."
        assert await page.locator(".platforms tr").count() == 0


SERIOUS = ("serious", "critical")  # axe-core's impacts a page may not have


async def test_no_page_has_a_serious_accessibility_violation(tmp_path, demo_models, browser):
    """axe-core (the copy axe-playwright-python bundles) on every page as a person meets
    it — the sign-in page, then signed in as an admin: overview, jobs, gallery, a finished
    batch, its lightbox, the submit form, webhooks — wide, and at a phone's 390 px those
    whose layout changes there: no
    violation of serious or critical impact (contrast, names, labels, roles)."""
    from axe_playwright_python.base import AXE_SCRIPT
    found: dict[str, list[str]] = {}

    async def check(page, where: str) -> None:
        results = await page.evaluate("axe.run({resultTypes: ['violations']})")
        bad = [v for v in results["violations"] if v["impact"] in SERIOUS]
        if bad:
            found[where] = [f"{v['id']} ({v['impact']}): "
                            f"{', '.join(str(n['target']) for n in v['nodes'][:3])}"
                            for v in bad]
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        await finished(w, PRODUCTS + "BTL-1,bottle.png,a bottle,2\nBTL-2,bottle.png,a cup,2\n")
        for width in (1280, 390):
            context = await browser.new_context(viewport={"width": width, "height": 844})
            await context.add_init_script(script=AXE_SCRIPT)  # (once per page load: the app is one)
            page = await context.new_page()
            page.on("pageerror", lambda e: w.page_errors.append(str(e)))
            await page.goto(f"{w.url}/dashboard/")
            await page.wait_for_selector("#token")
            await check(page, f"sign-in @{width}")
            await page.fill("#token", ADMIN)
            await page.click("#sign-in button[type=submit]")
            await page.wait_for_selector("body[data-view]")
            # (at 390 px the pages whose layout changes there: tables become cards)
            for path in ("/", "/jobs", "/gallery", "/batches/1", "/submit", "/webhooks") \
                    if width > 390 else ("/jobs", "/batches/1", "/webhooks"):
                await page.evaluate("h => { location.hash = h; }", f"#{path}")
                await page.wait_for_selector(f'body[data-view="{path}"]')
                await check(page, f"{path} @{width}")
            await page.evaluate("h => { location.hash = h; }", "#/batches/1")
            await page.wait_for_selector('body[data-view="/batches/1"] figure.thumb a[data-open]')
            await page.click("figure.thumb a[data-open]")
            await page.wait_for_selector("dialog.lightbox[open]")
            await check(page, f"lightbox @{width}")
            await context.close()
    assert not found, "\n".join(f"{k}: {v}" for k, v in found.items())


async def test_a_rows_channel_files_show_on_its_card_with_why_one_is_held(tmp_path, demo_models,
                                                                         browser):
    """Each card lists its row's files for the batch's channels: ✓ where one ships, ⚠ and
    its checks' words where it needs review; the head links the zip of what ships and the
    sheet sent, filled in."""
    from executor.deliver import pack
    from storage.renditions import Renditions
    async with DashWorld(dashboard_config(tmp_path, demo_models)) as w:
        jobs = await finished(w, PRODUCTS + "A1,bottle.png,a bottle,4\n",
                              channels=("douyin", "jd"))
        for job in jobs:  # the executor's pack on each image (a red 64x48: not on white)
            await Renditions(w.queue.db).record(job.id, pack(
                w.app.store, decode(job.workflow), job.id, job.batch_id, job.outputs,
                producer="genbot"))
        page = await signed_in(browser, w, ALICE, f"#/batches/{jobs[0].batch_id}")
        await page.wait_for_selector("[data-renditions] li")
        files = await page.eval_on_selector_all("[data-renditions] li", "ls => ls.map(l => "
                                                "[l.dataset.file, l.dataset.state, l.textContent])")
        assert files[0] == ["A1_douyin_1.jpg", "ships", "A1_douyin_1.jpg ✓"]
        assert files[1][:2] == ["A1_jd_1.jpg", "needs_review"]
        assert files[1][2].startswith("A1_jd_1.jpg ⚠ the background is not pure white")
        zipped = await page.get_attribute('[data-zip="deliverables"]', "href")
        sheet = await page.get_attribute("#filled-sheet", "href")
        got = await page.evaluate("""async ([z, s]) => {
            const a = await fetch(z), b = await fetch(s);
            return [a.status, a.headers.get('content-type'), b.status, await b.text()]; }""",
                                  [zipped, sheet])
        assert got[:3] == [200, "application/zip", 200]
        assert got[3].splitlines()[0] == \
            "sku,product_image,prompt,steps,status,output,review,douyin files,jd files"
