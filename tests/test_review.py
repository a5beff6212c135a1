"""Review (bot.app.review, storage.reviews): an image is approved, rejected with a
reason, or sent back with the changes asked for — which queue an edit of it as its
owner's — by whoever may review; a batch is signed off only once every image it made is
reviewed, and then its reviews are final until an admin reopens it. The sign-off reaches
the audit log, the results sheet, the chat and webhooks (batch.approved)."""

from __future__ import annotations

import pytest
from openpyxl import load_workbook

from bot.app.application import Accepted, App, CancelTarget, SubmitOptions
from bot.app.permissions import Role
from bot.app.results import write_results_sheet
from bot.conventions import thread_of
from bot.errors import Conflict, Invalid, Refused
from storage.reviews import SIGNED_OFF, Review
from templates.jobs import decode
from tests.fakes.apps import ALICE, BOB, BOSS, PRODUCTS, REX, VIC, app_on, pictures
from tests.fakes.jobs import finish_all


@pytest.fixture
async def app(tmp_path, db_url):
    async with app_on(tmp_path, db_url) as a:
        yield a


async def finished(app: App, who=ALICE) -> list:
    """A product_main batch of two rows whose jobs have finished, each with an image."""
    done = await app.submit(who, "product_main", PRODUCTS, pictures,
                            SubmitOptions(wait_for_executor=True))
    assert isinstance(done, Accepted)
    return await finish_all(app, done.batch_id)


async def code_of(call, error=Conflict) -> str:
    with pytest.raises(error) as e:
        await call
    return e.value.code


async def test_each_review_state_is_stored_with_its_note_who_and_when(app: App):
    first, second = await finished(app)
    done = await app.review(REX, first.id, Review.REJECTED, "  瓶身变形 ")
    assert (done.job.review, done.job.review_note, done.job.rated_by) == (
        Review.REJECTED, "瓶身变形", "test:REX")
    assert done.change is None
    approved = (await app.review(REX, first.id, Review.APPROVED)).job
    assert (approved.review, approved.review_note, approved.kept) == (Review.APPROVED, None, True)
    back = (await app.review(REX, first.id, Review.UNREVIEWED, "ignored")).job
    assert (back.review, back.review_note, back.rating) == (Review.UNREVIEWED, None, None)
    graded = await app.stars(REX, second.id, 4)
    assert graded.stars == 4 and graded.review is Review.UNREVIEWED  # a grade is not a review
    assert (await app.stars(REX, second.id, None)).stars is None
    assert await code_of(app.stars(REX, second.id, 6), Invalid) == "stars_range"
    assert await code_of(app.review(REX, first.id, Review.REJECTED, "x" * 501),
                         Invalid) == "review_note_too_long"
    assert await code_of(app.review(VIC, first.id, Review.APPROVED), Refused) == "refused_role"
    assert await code_of(app.stars(VIC, first.id, 3), Refused) == "refused_role"
    audit = [(a.user, a.action, a.allowed) for a in await app.access.audit_log(limit=20)]
    assert ("REX", "reject", True) in audit and ("VIC", "keep", False) in audit


async def test_changes_requested_queue_an_edit_by_the_note_as_the_owners(app: App):
    """A reviewer may not queue work, but the change they ask for is queued: an edit of
    the image by the note (an edit model is configured: the demo's FLUX.1 Kontext), as
    Alice's — her batch, her limits — in her batch's thread."""
    first, _ = await finished(app)
    assert await code_of(app.review(REX, first.id, Review.CHANGES, "  "),
                         Invalid) == "changes_need_note"
    done = await app.review(REX, first.id, Review.CHANGES, "把背景换成海滩")
    assert (done.job.review, done.job.review_note) == (Review.CHANGES, "把背景换成海滩")
    assert done.change is not None and done.change.created
    (child,) = done.change.jobs
    assert (child.parent_job_id, child.submitter) == (first.id, "test:ALICE")
    assert decode(child.workflow).nodes[0].inputs["instruction"] == "把背景换成海滩"
    batch, parent = await app.batch(done.change.batch_id), await app.batch(first.batch_id)
    assert (batch.conversation, batch.thread) == (parent.conversation, thread_of(parent))
    app.edit_model = lambda: None  # without an edit model: a new try of the row
    again = await app.review(BOSS, first.id, Review.CHANGES, "try another")
    assert again.change is not None and again.change.jobs[0].action == "again"


async def test_a_refused_change_leaves_the_image_unreviewed(app: App):
    first, _ = await finished(app, who=BOB)
    await app.grant(BOSS, BOB, Role.VIEWER, None)  # Bob may queue no more: nor may changes
    assert await code_of(app.review(REX, first.id, Review.CHANGES, "warmer"),
                         Refused) == "refused_role"
    assert (await app.job(first.id)).review is Review.UNREVIEWED


async def test_a_batch_is_signed_off_once_every_image_is_reviewed_and_then_is_final(app: App):
    first, second = await finished(app)
    batch = first.batch_id
    await app.review(REX, first.id, Review.APPROVED)
    error = await code_of(app.sign_off(REX, batch))
    assert error == "signoff_unreviewed"
    with pytest.raises(Conflict) as e:
        await app.sign_off(REX, batch)
    assert e.value.render("en") == ("Batch 1 cannot be signed off yet: 1 of its 2 images is not "
                                    "reviewed.")
    assert e.value.render("zh") == "批次 1 还不能定稿：2 张图片中有 1 张尚未审核。"
    await app.review(REX, second.id, Review.REJECTED, "text wrong")
    assert await code_of(app.sign_off(VIC, batch), Refused) == "refused_role"
    done = await app.sign_off(REX, batch)
    assert (done.batch.signed_off_by, done.batch.signed_off_at) == ("test:REX", app.clock())
    assert done.counts.images == {Review.APPROVED: 1, Review.REJECTED: 1}
    assert await code_of(app.sign_off(REX, batch)) == "batch_signed_off"
    for late in (app.review(REX, first.id, Review.REJECTED), app.stars(REX, first.id, 2)):
        assert await code_of(late) == "batch_signed_off"  # its reviews are final
    assert (await app.job(first.id)).review is Review.APPROVED
    events = [e for e in await app.queue.events_after(0, 100) if e.kind == SIGNED_OFF]
    assert [(e.batch_id, e.data) for e in events] == [(batch, {"by": "test:REX"})]
    sheet = write_results_sheet(app.store, done.batch, await app.queue.batch_jobs(batch),
                                app.templates["product_main"])
    rows = list(load_workbook(app.store.path(sheet)).active.iter_rows(values_only=True))
    head = rows[0]
    assert [r[head.index("review")] for r in rows[1:3]] == ["approved", "rejected"]
    assert rows[2][head.index("review note")] == "text wrong"
    assert rows[-1][0].startswith("Signed off by test:REX at ")
    assert await code_of(app.reopen(REX, batch), Refused) == "refused_role"
    assert (await app.reopen(BOSS, batch)).signed_off_at is None
    assert await code_of(app.reopen(BOSS, batch)) == "reopen_not_signed"
    assert (await app.review(REX, first.id, Review.REJECTED)).job.review is Review.REJECTED


async def test_a_batch_still_running_or_without_images_is_not_signed_off(app: App):
    done = await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                            SubmitOptions(wait_for_executor=True))
    assert isinstance(done, Accepted)
    assert await code_of(app.sign_off(REX, done.batch_id)) == "signoff_unfinished"
    await app.cancel(ALICE, CancelTarget.batch(done.batch_id))
    assert await code_of(app.sign_off(REX, done.batch_id)) == "signoff_nothing"
