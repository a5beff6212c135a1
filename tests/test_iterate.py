"""Iterating on images through the application layer (bot.app.iterate): ratings, again, vary,
upscale and edit as new jobs linked to their parent; who may; a double click makes one
batch; every refusal one plain sentence. Then for real on the diffusers executor: vary is
image-to-image from the parent's file, upscale doubles its size."""

from __future__ import annotations

import pytest
from PIL import Image

from bot.app.application import Accepted, App, SubmitOptions, load_templates
from bot.app.iterate import DEDUPE_SECONDS, ActionRequest
from bot.app.permissions import Role, Who
from bot.errors import Conflict, Invalid, NotFound, Refused
from bot.intake.check import SheetFile
from storage.files import open_store
from storage.queue import open_queue
from storage.records import KEPT, REJECTED, Priority, Status
from templates.jobs import decode
from tests.fakes.apps import ALICE, BOB, BOSS, PRODUCTS, REX, VIC, app_on, pictures
from tests.fakes.jobs import finish_all


@pytest.fixture
async def app(tmp_path, db_url):
    async with app_on(tmp_path, db_url) as made:
        yield made


async def finished(app: App, who: Who = ALICE) -> list:
    """A product_main batch of two rows whose jobs have finished, each with an image."""
    done = await app.submit(who, "product_main", PRODUCTS, pictures,
                            SubmitOptions(wait_for_executor=True))
    assert isinstance(done, Accepted)
    return await finish_all(app, done.batch_id)



def ask(action: str, **kw) -> ActionRequest:
    return ActionRequest(action, wait_for_executor=True, **kw)


async def test_again_vary_upscale_and_edit_queue_children_linked_to_their_image(app):
    first, second = await finished(app)
    again = await app.act(ALICE, first.id, ask("again", count=3))
    assert again.created and len(again.jobs) == 3
    assert {(j.parent_job_id, j.action, j.row) for j in again.jobs} == {(first.id, "again", 2)}
    seeds = {j.values["seed"] for j in again.jobs}
    assert len(seeds) == 3 and first.values["seed"] not in seeds  # new seeds, recorded
    assert {j.values["prompt"] for j in again.jobs} == {"a bottle"}
    names = [decode(j.workflow).outputs["out"] for j in again.jobs]  # one folder, no overwrite
    assert names == ["A1/2.png", "A1/2_2.png", "A1/2_3.png"]
    batch = await app.batch(again.batch_id)
    assert (batch.template, batch.submitter, batch.conversation, batch.thread) == \
        ("product_main", "test:ALICE", "C1", f"@batch:{first.batch_id}")  # the same thread
    assert batch.meta["action"] == "again" and batch.meta["root_batch"] == first.batch_id

    vary = await app.act(ALICE, first.id, ask("vary", count=2))
    gen = next(s for s in decode(vary.jobs[0].workflow).nodes if s.op == "generate")
    assert gen.inputs["init_image"] == first.outputs[0] and gen.inputs["strength"] == 0.35
    # made from the picture (its files' credentials name it); again draws anew
    assert decode(vary.jobs[0].workflow).made_from == first.outputs[0]
    assert {decode(j.workflow).made_from for j in again.jobs} == {""}

    up = await app.act(ALICE, second.id, ask("upscale", factor=4))
    (job,) = up.jobs
    steps = decode(job.workflow).nodes
    # (product_main keeps its product: the photo is put back over the enlarged image)
    assert [s.op for s in steps] == ["upscale", "keep_product", "save"]
    assert job.affinity is None and steps[1].inputs["product"] == second.values["product_image"]
    assert steps[0].inputs == {"image": second.outputs[0], "scale": 4.0, "model": None}
    assert decode(job.workflow).made_from == second.outputs[0]

    edit = await app.act(ALICE, second.id, ask("edit", values={"提示词": "a red jar",
                                                                "steps": "30"}))
    (changed,) = edit.jobs
    assert changed.values["prompt"] == "a red jar" and changed.values["steps"] == 30
    assert changed.values["seed"] == second.values["seed"]  # only what was asked changes
    assert changed.values["sku"] == "A2"

    # The chain of a picture: children of an image, and an image's ancestors.
    [grandchild] = (await app.act(ALICE, (await finish_all(app, edit.batch_id))[0].id,
                                  ask("upscale"))).jobs
    assert [j.id for j in await app.queue.ancestors(grandchild)] == [changed.id, second.id]
    assert [j.action for j in await app.queue.children(second.id)] == ["upscale", "edit"]
    # The results sheet carries the chain and the ratings: job, made from, action, rating.
    await app.rate(ALICE, changed.id, "keep")
    from openpyxl import load_workbook

    from bot.app.results import write_results
    done = await app.queue.batch_jobs(edit.batch_id)
    path, _ = write_results(app.store, await app.batch(edit.batch_id), done,
                            app.templates["product_main"])
    head, row = list(load_workbook(app.store.path(path)).active.iter_rows(values_only=True))
    assert head[-6:] == ("job", "made from job", "action", "review", "model",
                         "template version")
    assert row[-6:] == (changed.id, second.id, "edit", "approved", "sdxl",
                        app.templates["product_main"].version)
    assert len(row[-1]) == 12 and decode(second.workflow).version == row[-1]
    log = [(a.action, a.allowed) for a in await app.access.audit_log()]
    assert ("again", True) in log and ("edit", True) in log and ("upscale", True) in log


async def test_a_double_click_makes_one_batch_and_two_people_make_two(app):
    first, _ = await finished(app)
    one = await app.act(ALICE, first.id, ask("again"))
    twice = await app.act(ALICE, first.id, ask("again"))  # the same click, resent
    assert (twice.batch_id, twice.created) == (one.batch_id, False)
    boss = await app.act(BOSS, first.id, ask("again"))  # someone else, at once: their own
    assert boss.created and boss.batch_id != one.batch_id
    app.clock.advance(DEDUPE_SECONDS * 2 + 1)  # a later, deliberate click: a new batch
    later = await app.act(ALICE, first.id, ask("again"))
    assert later.created and later.batch_id not in (one.batch_id, boss.batch_id)
    keyed = await app.act(ALICE, first.id, ask("again", key="k-1"))
    assert (await app.act(ALICE, first.id, ask("again", key="k-1"))).batch_id == keyed.batch_id


async def test_an_image_action_keeps_its_batchs_priority_only_as_far_as_the_actor_may(app):
    """An urgent image made again once its owner's raise was taken back: normal."""
    await app.grant(BOSS, ALICE, Role.SUBMITTER, Priority.URGENT)
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                            SubmitOptions(wait_for_executor=True, priority=Priority.URGENT))
    assert isinstance(done, Accepted)
    first, _ = await finish_all(app, done.batch_id)
    await app.grant(BOSS, ALICE, Role.SUBMITTER)
    mine = await app.act(ALICE, first.id, ask("again"))
    boss = await app.act(BOSS, first.id, ask("again"))
    assert [(await app.batch(b)).priority for b in (mine.batch_id, boss.batch_id)] == \
        [Priority.NORMAL, Priority.URGENT]


async def test_ratings_are_stored_with_who_and_when_and_can_be_taken_back(app):
    first, second = await finished(app)
    kept = await app.rate(REX, first.id, "keep")  # a reviewer may rate, not queue
    assert (kept.rating, kept.rated_by, kept.kept) == (KEPT, "test:REX", True)
    assert kept.rated_at == app.clock()
    assert (await app.rate(ALICE, second.id, "reject")).rating == REJECTED
    assert (await app.rate(ALICE, first.id, "unkeep")).rating is None
    for refused in (app.act(REX, first.id, ask("again")), app.rate(VIC, first.id, "keep")):
        with pytest.raises(Refused) as e:  # a reviewer may not queue, a viewer not rate
            await refused
        assert e.value.code == "refused_role"
    with pytest.raises(Invalid):
        await app.rate(ALICE, first.id, "love")


async def test_each_refusal_names_what_to_change(app, monkeypatch):
    first, second = await finished(app)

    async def refused(who, job_id, request, error=Invalid):
        with pytest.raises(error) as e:
            await app.act(who, job_id, request)
        return e.value.code, e.value.render("en"), e.value.render("zh")

    code, en, zh = await refused(BOB, first.id, ask("again"), Refused)  # not Bob's batch
    assert code == "refused_not_owner" and "test:ALICE" in en and "test:ALICE" in zh
    assert (await refused(ALICE, first.id, ask("again", count=99)))[0] == "action_count"
    assert (await refused(ALICE, first.id, ask("upscale", count=2)))[0] == "action_count_one"
    assert (await refused(ALICE, first.id, ask("upscale", factor=20)))[0] == "upscale_factor"
    assert (await refused(ALICE, first.id, ask("vary", strength=5.0)))[0] == "vary_strength"
    monkeypatch.setattr(App, "max_output_pixels", 64 * 48 * 4)  # (the parents are 64x48)
    code, en, _ = await refused(ALICE, first.id, ask("upscale", factor=3))
    assert code == "action_too_large" and en.startswith("That would be a 192x144 image")
    assert (await refused(ALICE, first.id, ask("edit", values={"size": "512x512"})))[0] == \
        "action_too_large"
    assert (await app.act(ALICE, first.id, ask("upscale"))).created  # 128x96: within it
    monkeypatch.undo()
    code, en, zh = await refused(ALICE, first.id, ask("edit", values={"colour": "red"}))
    assert code == "edit_unknown" and '"colour"' in en and "prompt" in en and "colour" in zh
    code, en, zh = await refused(ALICE, first.id, ask("edit", values={"steps": "many"}))
    assert en == 'steps: "many" is not a whole number' and zh.startswith("steps：")
    assert (await refused(ALICE, first.id, ask("edit", values={"steps": 500})))[0] == \
        "too_large"
    assert (await refused(ALICE, first.id, ask("edit", values={"product_image": "x.png"})
                          ))[0] == "edit_image"
    assert (await refused(ALICE, first.id, ask("dance"))) [0] == "action_unknown"
    with pytest.raises(NotFound):
        await app.act(ALICE, 999, ask("again"))
    app.store.path(second.outputs[0]).unlink()  # auto_save off, or retention
    code, en, _ = await refused(ALICE, second.id, ask("vary"), Conflict)
    assert code == "action_outputs_gone" and "again or edit" in en
    assert (await app.act(ALICE, second.id, ask("again"))).created  # made anew: still works

    thumbs = await app.submit(ALICE, "social_thumb", SheetFile(
        "t.csv", b"image,title\nbottle.png,A\n"), pictures)
    assert isinstance(thumbs, Accepted)
    (thumb,) = await finish_all(app, thumbs.batch_id)
    assert (await refused(ALICE, thumb.id, ask("again")))[0] == "action_no_seed"
    assert (await refused(ALICE, thumb.id, ask("vary")))[0] == "vary_no_model"
    assert (await app.act(ALICE, thumb.id, ask("edit", values={"title": "B"}))).created


async def test_a_row_as_captioned_is_the_rows_own_image_in_the_thread(app):
    first, second = await finished(app)
    where = {"platform": "test", "conversation": "C1", "thread": None}
    assert (await app.find_image(**where, row=3)).id == second.id
    again = await app.act(ALICE, second.id, ask("again"))
    (redo,) = await finish_all(app, again.batch_id)
    assert (await app.find_image(**where, row=3)).id == second.id  # not what "again" made
    assert (await app.find_image(**where, job=redo.id)).id == redo.id  # that: by its job
    with pytest.raises(NotFound) as e:
        await app.find_image(**where, row=9)
    assert e.value.render("en") == f"Batch {first.batch_id} has no row 9; its rows are 2–3."
    with pytest.raises(NotFound):
        await app.find_image(platform="test", conversation="elsewhere", thread=None, row=2)
    assert redo.status == Status.SUCCEEDED


async def test_vary_runs_image_to_image_from_the_parent_file_and_upscale_doubles_it(
        tmp_path, demo_models, monkeypatch):
    """On the real diffusers executor (tiny demo models): the vary child's generate runs the
    img2img ControlNet pipeline with the parent's image as its init image; the upscale
    child is the parent's image at twice the size."""
    import asyncio

    from executor.diffusers.ops.base import Context
    from executor.worker import executor_loop
    from tests.conftest import executor_config

    config = executor_config(tmp_path / "data", demo_models)
    read: list = []
    real_image = Context.image
    monkeypatch.setattr(Context, "image", lambda ctx, value: (read.append(value),
                                                              real_image(ctx, value))[1])
    queue = await open_queue(config)
    app = App(config, queue, open_store(config), load_templates(config))
    worker = executor_loop(config, queue, owner="test-executor")
    task = asyncio.create_task(worker.run())

    async def ended(batch_id: int) -> list:
        async with asyncio.timeout(180):
            while True:
                jobs = await queue.batch_jobs(batch_id)
                if all(j.status in ("succeeded", "failed", "canceled") for j in jobs):
                    return jobs
                await asyncio.sleep(0.05)

    try:
        done = await app.submit(ALICE, "product_main", SheetFile(
            "p.csv", b"sku,product_image,prompt,steps\nA1,bottle.png,a bottle,2\n"), pictures,
            SubmitOptions(wait_for_executor=True))
        assert isinstance(done, Accepted)
        (parent,) = await ended(done.batch_id)
        assert parent.status == Status.SUCCEEDED, parent.error
        varied = await app.act(ALICE, parent.id, ActionRequest("vary"))  # an executor runs
        (child,) = await ended(varied.batch_id)
        assert child.status == Status.SUCCEEDED, child.error
        pipes = worker.engine.cache.pipes
        assert type(pipes["sdxl", "img2img", "canny_sdxl"]).__name__ == \
            "StableDiffusionXLControlNetImg2ImgPipeline"
        assert parent.outputs[0] in read  # the parent's file was the init image
        up = await app.act(ALICE, parent.id, ActionRequest("upscale"))
        (big,) = await ended(up.batch_id)
        assert big.status == Status.SUCCEEDED, big.error
        sizes = [Image.open(app.store.path(j.outputs[0])).size for j in (parent, big)]
        assert sizes[1] == (sizes[0][0] * 2, sizes[0][1] * 2)
        assert big.outputs[0] == f"outputs/batch_{up.batch_id}/A1/2_x2.png"  # {sku}/{row}
        # an instruction: the parent's image itself, changed on the edit model (Kontext)
        before = len(read)
        edited = await app.act(ALICE, parent.id, ActionRequest(
            "edit", instruction="把背景换成海滩"))
        (changed,) = await ended(edited.batch_id)
        assert changed.status == Status.SUCCEEDED, changed.error
        assert changed.outputs[0] == f"outputs/batch_{edited.batch_id}/A1/2_edit.png"
        assert parent.outputs[0] in read[before:]  # the parent's file went to the edit model
        assert "flux_kontext" in worker.engine.cache.units
        made = Image.open(app.store.path(changed.outputs[0]))
        assert made.size == Image.open(app.store.path(parent.outputs[0])).size
    finally:
        worker.stopping.set()
        await task
        await queue.close()


async def test_vary_is_refused_for_a_model_that_cannot_start_from_an_image(app, tmp_path):
    """FLUX.1 Kontext draws from text (and edits), but has no image-to-image: a vary of its
    image is refused naming the model, its family and what it runs, in English and
    Chinese, before anything is queued; again still works."""
    import json

    from templates.loader import load_template
    path = tmp_path / "kontext_t2i.json"
    path.write_text(json.dumps({
        "name": "kontext_t2i", "params": {"prompt": {"type": "text"}, "seed": {"type": "seed"}},
        "nodes": {"gen": {"op": "generate", "inputs": {
                      "prompt": "$prompt", "model": "flux_kontext", "seed": "$seed"}},
                  "out": {"op": "save", "inputs": {"image": "@gen"}}},
        "output": "{row}.png"}), encoding="utf-8")
    app.templates["kontext_t2i"] = load_template(path)
    done = await app.submit(ALICE, "kontext_t2i", SheetFile("k.csv", b"prompt\na bottle\n"),
                            pictures, SubmitOptions(wait_for_executor=True))
    assert isinstance(done, Accepted)
    (made,) = await finish_all(app, done.batch_id)
    with pytest.raises(Invalid) as refused:
        await app.act(ALICE, made.id, ask("vary"))
    assert refused.value.code == "vary_no_img2img"
    assert refused.value.render("en") == (
        'Model "flux_kontext" is FLUX.1 Kontext (flux_kontext), which cannot start from an '
        "image (genbot runs it for edit, txt2img), so it cannot vary one; use again for new "
        "seeds, or edit to name another model.")
    assert "不能从图片出发" in refused.value.render("zh")
    assert len(await app.queue.batch_jobs(done.batch_id)) == 1
    assert (await app.act(ALICE, made.id, ask("again"))).created


async def test_an_instruction_edits_the_image_itself_on_the_edit_model(app):
    """/edit 3 把背景换成海滩: a child whose one step is the `edit` op on the parent's image
    with the sentence and a new seed, on the first model that edits (the demo's FLUX.1
    Kontext here) or the one asked; saved beside the parent's image ("_edit"); the batch
    records the instruction. What cannot run is refused in one sentence, nothing queued."""
    first, _ = await finished(app)
    done = await app.act(ALICE, first.id, ask("edit", instruction=" 把背景换成海滩 "))
    (child,) = done.jobs
    bound = decode(child.workflow)
    assert [(s.op, s.inputs.get("image")) for s in bound.nodes] == [
        ("edit", first.outputs[0]), ("keep_product", {"@": "edit.image"}),
        ("save", {"@": "keep_save.image"})]  # (product_main keeps its product)
    step = bound.nodes[0].inputs
    assert (step["instruction"], step["model"]) == ("把背景换成海滩", "flux_kontext")
    beside = first.outputs[0].split("/", 2)[-1].replace(".png", "_edit.png")  # in its batch
    assert bound.outputs == {"save": beside} and child.affinity == "flux_kontext"
    assert child.values == first.values  # the row's values stay the parent's
    assert (await app.batch(done.batch_id)).meta["instruction"] == "把背景换成海滩"
    qwen = await app.act(ALICE, first.id, ask("edit", instruction="make it matte black",
                                              model="qwen_image_edit"))
    assert decode(qwen.jobs[0].workflow).nodes[0].inputs["model"] == "qwen_image_edit"

    async def refused(**kw) -> tuple[str, str]:
        with pytest.raises(Invalid) as e:
            await app.act(ALICE, first.id, ask("edit", **kw))
        return e.value.code, e.value.render("en")

    assert (await refused(instruction="matte", values={"steps": "9"}))[0] == "edit_both"
    assert await refused(instruction="matte", model="nope") == ("edit_model_unknown", (
        'Model "nope" is not in [models]: name one of its models, or set [templates] '
        "edit_model to one."))
    assert await refused(instruction="matte", model="sdxl") == ("model_cannot_run", (
        'model "sdxl" is SDXL (sdxl), which genbot runs for img2img, img2img with a '
        "ControlNet, inpaint, txt2img, txt2img with a ControlNet, not edit: name a model "
        "that does"))
    assert (await refused(instruction="x" * 20_001))[0] == "instruction_too_long"
    # A real model's tokenizer.json counts the sentence (tests/test_intake.py reads one);
    # a demo's stands in for one it could not fetch and is not counted: one word a token.
    app.prompt_tokens = lambda model: lambda text: len(text.split())
    assert await refused(instruction="word " * 513) == ("instruction_too_many_tokens", (
        'the instruction is 513 tokens long, but model "flux_kontext" (FLUX.1 Kontext) reads '
        "only the first 512: the rest would be cut off without a word. Shorten it"))
    assert (await app.act(ALICE, first.id, ask("edit", instruction="word " * 512))).created
    app.edit_model = lambda: None  # no model of a family that edits is configured
    code, en = await refused(instruction="matte")
    assert code == "edit_no_model" and "FLUX.1-Kontext-dev" in en


async def test_an_action_on_a_batchs_kept_images_is_one_batch_linked_to_each(app):
    """/edit b1 "把日常价换成节日价": every kept image of the batch (and of those made from
    its images) edited, as one new batch in its thread, each job linked to its image; the
    same ask again is that batch; none kept, or another's images, refused."""
    from bot.app.iterate import ActedOnKept
    first, second = await finished(app)
    with pytest.raises(Conflict) as none:
        await app.act_on_kept(ALICE, first.batch_id, ask("edit", instruction="节日价"))
    assert none.value.code == "picks_none"
    for job in (first, second):
        await app.rate(ALICE, job.id, "keep")
    done = await app.act_on_kept(ALICE, first.batch_id,
                                 ask("edit", instruction="把日常价换成节日价"))
    assert isinstance(done, ActedOnKept) and done.created and done.kept == 2
    assert sorted((j.parent_job_id, j.action) for j in done.jobs) == [
        (first.id, "edit"), (second.id, "edit")]
    assert {decode(j.workflow).nodes[0].inputs["instruction"] for j in done.jobs} == {
        "把日常价换成节日价"}
    batch = await app.batch(done.batch_id)
    assert (batch.meta["kept_of"], batch.meta["instruction"], batch.thread) == (
        first.batch_id, "把日常价换成节日价", f"@batch:{first.batch_id}")
    again = await app.act_on_kept(ALICE, first.batch_id,
                                  ask("edit", instruction="把日常价换成节日价"))
    assert (again.batch_id, again.created) == (done.batch_id, False)  # a double click
    values = await app.act_on_kept(ALICE, first.batch_id, ask("edit", values={"steps": "9"}))
    assert [j.values["steps"] for j in values.jobs] == [9, 9]  # the rows' values, each
    with pytest.raises(Refused) as theirs:
        await app.act_on_kept(BOB, first.batch_id, ask("edit", instruction="x"))
    assert theirs.value.code == "refused_not_owner"


def mask_png(size=(64, 48), box=(8, 8, 40, 30), mode="L", on=255) -> bytes:
    import io
    im = Image.new(mode, size, 0)
    im.paste(on, box)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


async def test_repaint_and_extend_queue_a_fill_on_the_images_own_model(app):
    """/repaint 3 mask.png 红围巾 and /extend 3 9:16: a child whose one step is `fill` on
    the parent's image, on the model that made it where its family inpaints (the demo's
    SD 1.5 here) with its prompt and negative when none is given, saved beside it; the
    mask checked against the image and stored; the batch records the mask and the shape."""
    first, _ = await finished(app)
    done = await app.act(ALICE, first.id, ask("repaint", mask=mask_png(), instruction="红围巾"))
    bound = decode(done.jobs[0].workflow)
    step = bound.nodes[0].inputs
    made_by = next(s.inputs for s in decode(first.workflow).nodes if s.op == "generate")
    assert bound.nodes[0].op == "fill" and step["image"] == first.outputs[0]
    assert (step["model"], step["prompt"]) == (made_by["model"], "红围巾")
    assert step["negative"] == made_by["negative"] and "left" not in step
    with Image.open(app.store.path(step["mask"])) as stored:
        assert stored.size == (64, 48) and stored.getextrema() == (0, 255)
    assert bound.outputs["save"].endswith("_repaint.png")
    assert (await app.batch(done.batch_id)).meta["mask"] == step["mask"]
    wide = await app.act(ALICE, first.id, ask("extend", aspect="9:16"))
    step = decode(wide.jobs[0].workflow).nodes[0].inputs
    assert (step["aspect"], step["prompt"]) == ("9:16", made_by["prompt"])  # (the row's)
    assert (await app.batch(wide.batch_id)).meta["canvas"] == "9:16"
    sides = await app.act(ALICE, first.id, ask("extend", left=32, right=32))
    step = decode(sides.jobs[0].workflow).nodes[0].inputs
    assert (step["left"], step["right"], "top" in step) == (32, 32, False)
    on_fill = await app.act(ALICE, first.id, ask("extend", top=8, model="flux_fill"))
    step = decode(on_fill.jobs[0].workflow).nodes[0].inputs
    assert step["model"] == "flux_fill" and "negative" not in step  # (FLUX reads none)
    again = await app.act(ALICE, first.id, ask("repaint", mask=mask_png(), instruction="红围巾"))
    assert (again.batch_id, again.created) == (done.batch_id, False)  # a double click


async def test_a_region_named_in_words_is_repainted_by_the_segmentation_model(app):
    """/repaint 3 region=瓶子 金色: the fill step carries the words and [templates]
    segmentation_model, which the executor finds the region with (tests/test_fill.py); with
    a mask too, both go. None configured, or one not in [models], or words on an action
    that takes none: refused, nothing queued."""
    first, _ = await finished(app)

    async def refused(action: str, **kw) -> tuple[str, str]:
        with pytest.raises(Invalid) as e:
            await app.act(ALICE, first.id, ask(action, **kw))
        assert e.value.render("zh") != e.value.render("en")
        return e.value.code, e.value.render("en")

    code, en = await refused("repaint", region="瓶子", instruction="金色")
    assert code == "region_no_model" and "CIDAS/clipseg-rd64-refined" in en
    assert (await refused("vary", region="瓶子"))[0] == "action_takes_no_region"
    assert (await refused("repaint", region="x" * 201))[0] == "region_too_long"
    app.segmentation_model = lambda: "nope"
    assert (await refused("repaint", region="瓶子"))[0] == "region_model_unknown"
    assert await app.queue.batch(first.batch_id + 1) is None  # nothing queued
    # (any [models] name: the executor tells a CLIPSeg folder from the rest)
    app.segmentation_model = lambda: "walnut"
    done = await app.act(ALICE, first.id, ask("repaint", region=" 瓶子 ", instruction="金色"))
    step = decode(done.jobs[0].workflow).nodes[0].inputs
    assert (step["region"], step["segmenter"], step["prompt"], "mask" in step) == (
        "瓶子", "walnut", "金色", False)
    assert (await app.batch(done.batch_id)).meta["region"] == "瓶子"
    both = await app.act(ALICE, first.id, ask("repaint", region="瓶子", mask=mask_png()))
    step = decode(both.jobs[0].workflow).nodes[0].inputs
    assert step["region"] == "瓶子" and step["mask"].startswith("inputs/")
    await app.rate(ALICE, first.id, "keep")  # every kept image of a batch, by the same words
    bulk = await app.act_on_kept(ALICE, first.batch_id, ask("repaint", region="瓶子"))
    assert decode(bulk.jobs[0].workflow).nodes[0].inputs["region"] == "瓶子"


async def test_a_repaint_or_extend_that_cannot_be_is_refused_naming_what_to_change(app):
    first, _ = await finished(app)

    async def refused(action: str, **kw) -> tuple[str, str]:
        with pytest.raises(Invalid) as e:
            await app.act(ALICE, first.id, ask(action, **kw))
        assert "mask" not in e.value.render("zh") or e.value.render("zh") != e.value.render("en")
        return e.value.code, e.value.render("en")

    assert (await refused("repaint"))[0] == "repaint_no_mask"
    assert (await refused("repaint", mask=b"not a picture"))[0] == "mask_not_image"
    assert await refused("repaint", mask=mask_png((64, 64))) == ("mask_shape", (
        "The mask is 64x64 and the image 64x48: a mask of the image's proportions is resized "
        "to it, one of other proportions would repaint the wrong place. Paint it on the "
        "image, or make it 64x48."))
    assert (await refused("repaint", mask=mask_png(box=(0, 0, 0, 0))))[0] == "mask_empty"
    assert (await refused("repaint", mask=mask_png(box=(0, 0, 64, 48))))[0] == "mask_full"
    # transparency counts as black: white strokes on a transparent sheet are the region
    strokes = await app.act(ALICE, first.id, ask("repaint", mask=mask_png(
        (128, 96), (16, 16, 80, 60), "RGBA", (255, 255, 255, 255))))
    assert strokes.batch_id == first.batch_id + 1  # the refusals above queued nothing
    step = decode(strokes.jobs[0].workflow).nodes[0].inputs
    with Image.open(app.store.path(step["mask"])) as stored:  # resized to the image
        assert stored.size == (64, 48) and stored.getpixel((0, 0)) == 0
        assert stored.getpixel((20, 15)) == 255
    assert (await refused("extend"))[0] == "extend_nothing"
    assert await refused("extend", aspect="tall") == ("extend_aspect", (
        '"tall" is not a shape: write width:height, such as 9:16 or 1:1.'))
    assert (await refused("extend", left=-5))[0] == "extend_margin"
    assert (await refused("upscale", mask=mask_png()))[0] == "action_takes_no_mask"
    assert (await refused("vary", aspect="1:1"))[0] == "action_takes_no_margins"
    code, en = await refused("extend", left=8192, right=8192, top=4096)
    assert code == "action_too_large" and "16448x4144" in en
    assert await refused("extend", top=8, model="flux_kontext") == ("fill_cannot_run", (
        'Model "flux_kontext" is FLUX.1 Kontext (flux_kontext), which cannot repaint part of '
        "an image (genbot runs it for edit, txt2img): name one that inpaints, or set "
        "[templates] fill_model to one."))
    assert (await refused("extend", top=8, model="nope"))[0] == "fill_model_unknown"
    assert await app.queue.batch(strokes.batch_id + 1) is None  # nor those since
    await app.rate(ALICE, first.id, "keep")
    with pytest.raises(Invalid) as bulk:
        await app.act_on_kept(ALICE, first.batch_id, ask("repaint", mask=mask_png()))
    assert bulk.value.code == "mask_one_image"
    wide = await app.act_on_kept(ALICE, first.batch_id, ask("extend", aspect="1:1"))
    (child,) = wide.jobs  # every kept image to the shape, each on its own model
    assert (child.parent_job_id, decode(child.workflow).nodes[0].inputs["aspect"]) == (
        first.id, "1:1")
    app.fill_model = lambda own=None: None
    code, en = await refused("extend", top=8)
    assert code == "fill_no_model" and "FLUX.1-Fill-dev" in en
