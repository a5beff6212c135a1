"""Sweeps (templates/sweeps.py, App.submit, /gen): --vary KEY=V1,V2 and START..STOP:STEP,
--seeds N; every row × seed × combination bound like a row, the same seed across a row's
combinations, each value checked like a sheet cell, and a big sweep asked about first."""

from __future__ import annotations

import pytest

from bot.app.application import Accepted, SubmitOptions
from bot.app.iterate import SeveralImages
from bot.errors import Invalid, Refused
from bot.intake.check import IntakeReport, SheetFile
from templates.jobs import decode
from templates.loader import load_template
from templates.params import Problem
from templates.sweeps import plan
from tests.conftest import ROOT
from tests.fakes.apps import ALICE, PRODUCTS, app_on, pictures
from tests.fakes.jobs import finish_all

PRODUCT = load_template(ROOT / "templates" / "shipped" / "product_main.json")
THUMB = load_template(ROOT / "templates" / "shipped" / "social_thumb.json")


def test_values_ranges_and_their_problems():
    sweep = plan(PRODUCT, ["steps=1..9:4", "CFG=3, 5.5", 'prompt="a cat, asleep",a dog',
                           "size=512x512,768x512"], seeds=3)
    assert [(a.param, a.values) for a in sweep.axes] == [
        ("steps", (1, 5, 9)), ("guidance", (3.0, 5.5)), ("prompt", ("a cat, asleep", "a dog")),
        ("size", ([512, 512], [768, 512]))]
    assert sweep.combinations == 3 * 2 * 2 * 2 * 3
    assert [a.values for a in plan(PRODUCT, ["guidance=0.5..1.5:0.25"]).axes] == \
        [(0.5, 0.75, 1.0, 1.25, 1.5)]

    def problem(vary, seeds=1, template=PRODUCT):
        with pytest.raises(Problem) as e:
            plan(template, vary, seeds)
        return e.value.code, e.value.details
    assert problem(["colour=red"])[0] == "sweep_unknown"
    assert problem(["stepz=1"]) == ("sweep_unknown_close", {
        "key": "stepz", "name": "steps", "names": ", ".join(PRODUCT.params)})  # a typo's
    assert problem(["cgf=3"])[1]["name"] == "CFG"  # (a column header, as the sheet has it)
    assert problem(["product_image=a.png,b.png"])[0] == "sweep_image"
    assert problem(["steps=1,2", "步数=3"])[0] == "sweep_twice"  # the same, by its alias
    assert problem(["steps=1,,2"])[0] == "sweep_empty_value"
    assert problem(["steps"])[0] == "sweep_syntax"
    assert problem(["steps=9..1"])[0] == "sweep_backwards"
    assert problem(["steps=1..1000"])[0] == "sweep_values"
    assert problem(["steps=1,500"]) == ("too_large", {"value": 500, "max": 100, "key": "steps"})
    assert problem([], seeds=2, template=THUMB)[0] == "sweep_no_seed"
    assert problem([], seeds=0)[0] == "sweep_seeds"


@pytest.fixture
async def app(tmp_path, db_url):
    async with app_on(tmp_path, db_url) as made:
        yield made


async def test_a_sweep_of_two_rows_is_sixteen_jobs_sharing_a_seed_per_grid(app):
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        vary=("steps=1,2", "cfg=3,5"), seeds=2, wait_for_executor=True))
    assert isinstance(done, Accepted) and done.jobs == 16
    jobs = await app.queue.batch_jobs(done.batch_id)
    bound = [decode(j.workflow) for j in jobs]
    for row in (2, 3):
        mine = [b for b in bound if b.row == row]
        assert sorted((b.axes["seed"], b.params["steps"], b.params["guidance"]) for b in mine) \
            == [(s, st, g) for s in (1, 2) for st in (1, 2) for g in (3.0, 5.0)]
        for number in (1, 2):  # one grid: its four images share one seed
            assert len({b.params["seed"] for b in mine if b.axes["seed"] == number}) == 1
        assert len({b.params["seed"] for b in mine}) == 2
        assert len({b.outputs["out"] for b in mine}) == 8  # each keeps its own file
    batch = await app.batch(done.batch_id)
    assert batch.meta["sweep"] == {"vary": ["steps=1,2", "cfg=3,5"], "seeds": 2,
                                   "axes": ["steps", "guidance"], "grid": []}
    await finish_all(app, done.batch_id)
    with pytest.raises(SeveralImages) as several:  # row 2 is eight images: which one?
        await app.find_image(platform="test", conversation="C1", thread=None, row=2,
                             batch=done.batch_id)
    first = bound[0]
    assert several.value.render("en").splitlines()[:2] == [
        f"Row 2 of batch {done.batch_id} has 8 images; name the one you mean by its job, as "
        f"in j{jobs[0].id}:",
        f"  j{jobs[0].id}: steps=1 · guidance=3 · seed {first.params['seed']}"]  # the seed itself

    with pytest.raises(Invalid) as e:  # a value is checked like a cell, named by its key
        await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                         SubmitOptions(vary=("steps=1,many",), wait_for_executor=True))
    assert e.value.render("en") == '--vary steps: "many" is not a whole number'
    assert e.value.render("zh") == "--vary steps：“many”不是整数"
    dry = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        vary=("steps=1..4",), dry_run=True))
    assert isinstance(dry, IntakeReport) and len(dry.jobs) == 8
    with pytest.raises(Refused) as refused:  # quotas count the expanded jobs, refused whole
        await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
            vary=("steps=1..100",), seeds=20, wait_for_executor=True))
    assert refused.value.code == "limit_rows"
    assert len(await app.queue.batch_jobs(done.batch_id)) == 16
    thumbs = await app.submit(ALICE, "social_thumb", SheetFile(
        "t.csv", b"image,title\nbottle.png,A\n"), pictures,
        SubmitOptions(vary=("width=256,512", "比例=1:1,4:5")))
    assert isinstance(thumbs, Accepted) and thumbs.jobs == 4


async def test_grids_put_one_value_across_one_down_and_each_cell_is_its_jobs_file(app):
    import io
    import json

    from PIL import Image

    from bot.app.grids import TITLE, write_grids
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        vary=("steps=1,2", "cfg=3,5"), seeds=2, wait_for_executor=True))
    assert isinstance(done, Accepted)
    colours = {}
    while (lease := await app.queue.claim("test-executor")) is not None:  # each its own file
        colours[lease.job_id] = (lease.job_id * 37 % 256, lease.job_id * 91 % 256, 120)
        buf = io.BytesIO()
        Image.new("RGB", (64, 64), colours[lease.job_id]).save(buf, "PNG")
        await app.queue.complete(lease, [app.store.write(
            f"outputs/batch_{lease.batch_id}/{lease.job_id}.png", buf.getvalue())])
    jobs = await app.queue.batch_jobs(done.batch_id)
    paths = write_grids(app.store, await app.batch(done.batch_id), jobs)
    assert len(paths) == 4  # 2 rows × 2 seeds, each steps across, guidance down
    by_id = {j.id: j for j in jobs}
    for path in paths:
        with Image.open(app.store.path(path)) as im:
            layout = json.loads(im.text["genbot-grid"])
            grid = im.convert("RGB")
        headers = {h["text"]: h["box"] for h in layout["headers"]}
        assert headers[f"row {layout['row']} · seed {layout['page']['seed']}"][1] == 0
        assert [headers[f"steps = {v}"][1] for v in (1, 2)] == [TITLE, TITLE]  # across
        assert headers["steps = 1"][0] < headers["steps = 2"][0]
        assert [headers[f"guidance = {v}"][0] for v in (3, 5)] == [0, 0]  # down the side
        header = headers["steps = 1"][3]
        assert headers["guidance = 3"][1] == TITLE + header < headers["guidance = 5"][1]
        assert len(layout["cells"]) == 4
        seeds = set()
        for cell in layout["cells"]:
            job = by_id[cell["job"]]
            axes = job.workflow["axes"]
            assert (axes["steps"], axes["guidance"]) == ((1, 2)[cell["x"]], (3.0, 5.0)[cell["y"]])
            assert job.row == layout["row"] and axes["seed"] == layout["page"]["seed"]
            left, top, side, _ = cell["box"]
            centre = grid.getpixel((left + side // 2, top + side // 2))
            assert centre == colours[job.id]  # the job's own file, in its cell
            seeds.add(job.values["seed"])
        assert len(seeds) == 1  # one grid, one seed: only the swept values differ


async def test_refine_counts_keeps_per_value_and_zooms_in_on_the_best(app):
    from bot.errors import Conflict
    from tests.fakes.jobs import finish_all
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures, SubmitOptions(
        vary=("steps=10,20,30", "cfg=3,5"), wait_for_executor=True))
    assert isinstance(done, Accepted)
    with pytest.raises(Conflict) as e:
        await app.refine(ALICE, done.batch_id)
    assert e.value.code == "refine_no_ratings"
    for job in await finish_all(app, done.batch_id):
        steps = job.workflow["axes"]["steps"]
        if job.row == 2:  # row 3 unrated: it counts for nothing
            await app.rate(ALICE, job.id, "keep" if steps == 20 else "reject")
    found = await app.refine(ALICE, done.batch_id)
    steps, guidance = found.axes
    assert [(t.value, t.kept, t.rated) for t in steps.tallies] == [(10, 0, 2), (20, 2, 2),
                                                                   (30, 0, 2)]
    assert (steps.best, steps.next) == (20, [15, 20, 25])
    assert [(t.value, t.kept, t.rated) for t in guidance.tallies] == [(3.0, 1, 3), (5.0, 1, 3)]
    assert (guidance.best, guidance.next) == (3.0, [3.0, 4.0])  # a tie: the smaller
    assert found.command == "/gen product_main p.csv --vary steps=15,20,25 --vary guidance=3,4"
    assert found.rated == 6
    plain = await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                             SubmitOptions(wait_for_executor=True))
    assert isinstance(plain, Accepted)
    with pytest.raises(Conflict) as e:
        await app.refine(ALICE, plain.batch_id)
    assert e.value.code == "refine_not_sweep"


def test_a_grid_past_sixteen_values_a_side_is_split():
    from bot.app.grids import Grid, split
    from storage.records import Job, Priority, Status
    grid = Grid(2, {}, "steps", "guidance", list(range(20)), [3, 5])
    for i in range(20):
        for j in range(2):
            grid.cells[i, j] = Job(
                id=i * 2 + j + 1, batch_id=1, row=2, workflow={}, status=Status.SUCCEEDED,
                priority=Priority.NORMAL, submitter="x", affinity=None, attempts=1,
                not_before=0, lease_owner=None, cancel_requested=False, outputs=[],
                error=None, enqueued_at=0, started_at=None, finished_at=None)
    left, right = split(grid)
    assert (left.xs, right.xs) == (list(range(16)), list(range(16, 20)))
    assert left.ys == right.ys == [3, 5] and len(left.cells) == 32 and len(right.cells) == 8
    assert right.cells[0, 1].id == grid.cells[16, 1].id
