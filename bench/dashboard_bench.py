"""Does the dashboard's job list — and its gallery, and review by keys — cost the same
with 20,000 jobs as with 200? Asserts nothing; record results in docs/benchmarks.md.

  python bench/dashboard_bench.py [--big 20000] [--small 200] [--rounds 5]

Two real services (SQLite) run side by side, one holding `small` jobs and one `big`,
and one headless Chromium (Debian's, driven by playwright) opens each service's job
list in turn, round after round, so drift on a noisy machine hits both alike. Measured
per service: the time from opening the list to its first row on screen, the time to
jump to the very last job, the rows in the DOM, and the API's page time at offset 0
and at the end. A quarter of each service's jobs have finished with an image (5,000 of
20,000): the gallery's first card on screen, the longest task the page ran while the
gallery scrolled from top to bottom a screen at a time (Chromium's long-task entries:
over 50 ms is a frame dropped), and 100 images reviewed by keys (P, X alternately, each
waiting for the focus to move on) with each decision's round trip — the PUT answered
once its review is committed — at p50 and p99. Prints medians and the big/small ratios:
near 1 means the cost does not grow with the queue.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.service import Service  # noqa: E402
from storage import config as cfg  # noqa: E402
from storage.queue import NewJob, Submission  # noqa: E402
from tests.fakes.browser import launched  # noqa: E402

TOKEN = "bench-token-000000001"
ROW = 34  # px per row, as bot/web/app.js draws them
REVIEWS = 100  # images reviewed by keys per round (fewer where fewer exist)


def small_png() -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "red").save(buf, "PNG")
    return buf.getvalue()


async def start(folder: Path, jobs: int) -> Service:
    config = cfg.from_dict({"service": {"data_dir": str(folder), "port": 0, "log_level": "warning"},
                            "queue": {"max_queue_size": jobs + 10},
                            "api": {"tokens": [f"{TOKEN}=bench"]}})
    service = Service(config, executor=False, platforms=[])
    await service.start()
    for start_row in range(0, jobs, 5000):
        n = min(5000, jobs - start_row)
        await service.queue.enqueue(Submission("social_thumb", "api:bench", [
            NewJob(row=i + 2, workflow={"title": f"t{i}"}) for i in range(n)], platform="api"))
    png = small_png()
    for _ in range(jobs // 4):  # a quarter finished, each with its image, as an executor would
        lease = await service.queue.claim("bench")
        assert lease is not None
        path = service.app.store.write(f"outputs/batch_{lease.batch_id}/{lease.job_id}.png", png)
        await service.queue.complete(lease, [path])
    return service


LONG_TASKS = """() => { window.longTasks = [];
  performance.setResourceTimingBufferSize(1000000);  // (thumbnails would fill the 250)
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.longTasks.push(e.duration);
  }).observe({type: "longtask"}); }"""
SCROLL_THROUGH = """async () => {
  const s = document.querySelector("#gallery");
  for (let y = 0; y <= s.scrollHeight; y += s.clientHeight) {
    s.scrollTop = y;
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  }
  return Math.max(0, ...window.longTasks); }"""
REVIEW_TIMES = """() => performance.getEntriesByType("resource")
  .filter((e) => e.name.includes("/review")).map((e) => e.duration)"""


async def measure_gallery(page, url: str, images: int) -> dict[str, float]:
    await page.goto(f"{url}/dashboard/#/")
    await page.wait_for_selector("#queue-state")
    await page.evaluate(LONG_TASKS)
    t0 = time.perf_counter()
    await page.evaluate("location.hash = '#/gallery'")
    await page.wait_for_selector("#gallery figure.tile img")
    first = time.perf_counter() - t0
    longest = await page.evaluate(SCROLL_THROUGH) / 1000
    await page.eval_on_selector("#gallery", "s => { s.scrollTop = 0; }")
    first_card = '#gallery figure.tile[data-index="0"]'  # (drawn on the next frame)
    await page.wait_for_selector(first_card)
    await page.evaluate("performance.clearResourceTimings()")
    n = min(REVIEWS, images - 1)
    await page.focus(first_card)
    for i in range(n):
        was = await page.evaluate("document.activeElement.dataset.job")
        await page.keyboard.press("p" if i % 2 == 0 else "x")
        try:
            await page.wait_for_function(
                f"() => document.activeElement.dataset.job !== '{was}'", timeout=5000)
        except Exception:
            state = await page.evaluate("""() => [document.activeElement.tagName,
                document.activeElement.dataset.job, document.activeElement.dataset.index,
                document.querySelector('#gallery').scrollTop,
                document.querySelectorAll('#gallery figure.tile').length]""")
            raise SystemExit(f"stuck at review {i}: was {was}, now {state}") from None
    await page.wait_for_function(f"() => ({REVIEW_TIMES})().length >= {n}")
    times = sorted(t / 1000 for t in await page.evaluate(REVIEW_TIMES))
    return {"gallery_first_card": first, "longest_task_scrolling": longest,
            "review_p50": times[len(times) // 2],
            "review_p99": times[min(len(times) - 1, int(len(times) * 0.99))]}


async def measure(page, url: str, jobs: int) -> dict[str, float]:
    await page.goto(f"{url}/dashboard/#/")
    await page.wait_for_selector("#queue-state")
    t0 = time.perf_counter()
    await page.evaluate("location.hash = '#/jobs'")
    await page.wait_for_selector(f'#job-list .jobrow[data-job="{jobs}"]')
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    await page.eval_on_selector("#job-list", f"el => {{ el.scrollTop = {jobs} * {ROW}; }}")
    await page.wait_for_selector('#job-list .jobrow[data-job="1"]')
    end = time.perf_counter() - t0
    rows = await page.locator("#job-list .jobrow").count()
    api = {}
    for name, offset in (("api_first", 0), ("api_last", jobs - 100)):
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            await page.evaluate(
                f"fetch('/api/v1/jobs?offset={offset}&limit=100').then(r => r.json())")
            times.append(time.perf_counter() - t0)
        api[name] = statistics.median(times)
    return {"first_row": first, "jump_to_end": end, "dom_rows": rows, **api}


async def main(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="genbot-dash-"))
    sizes = {"small": args.small, "big": args.big}
    services = {k: await start(tmp / k, n) for k, n in sizes.items()}
    results: dict[str, list[dict]] = {k: [] for k in sizes}
    try:
        async with launched() as browser:
            pages = {}
            for k, s in services.items():
                page = await (await browser.new_context()).new_page()
                url = f"http://127.0.0.1:{s.port}"
                await page.goto(f"{url}/dashboard/")
                await page.fill("#token", TOKEN)
                await page.click("#sign-in button[type=submit]")
                await page.wait_for_selector("#me:not([hidden])")
                pages[k] = (page, url)
            for _ in range(args.rounds):
                for k in sizes:
                    page, url = pages[k]
                    results[k].append({**await measure(page, url, sizes[k]),
                                       **await measure_gallery(page, url, sizes[k] // 4)})
    finally:
        for s in services.values():
            await s.stop()
    print(f"machine: {platform.node()} {platform.machine()} Python {platform.python_version()}")
    print(f"{'':24}{'small (' + str(args.small) + ')':>16}{'big (' + str(args.big) + ')':>16}"
          f"{'big/small':>12}")
    for metric in ("first_row", "jump_to_end", "api_first", "api_last", "dom_rows",
                   "gallery_first_card", "longest_task_scrolling", "review_p50", "review_p99"):
        small = statistics.median(r[metric] for r in results["small"])
        big = statistics.median(r[metric] for r in results["big"])
        unit = 1 if metric == "dom_rows" else 1000
        ratio = f"{big / small:>12.2f}" if small else f"{'-':>12}"
        print(f"{metric:24}{small * unit:>16.1f}{big * unit:>16.1f}{ratio}")
    print("(times in ms, medians of", args.rounds, "rounds)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
