"""What a finished batch leaves beside its images: results.xlsx (every row as the sheet
had it, with its status, output file and error) and contact.png (every image on one
sheet). The summary posts them; the API and the dashboard serve them."""

from __future__ import annotations

import io
from typing import Any

from bot.intake.sheets import text_cells, writable
from bot.messages import say
from executor.workflow import Template
from storage.files import FileStore, batch_folder
from storage.records import Batch, Job, Status

RESULTS = "results.xlsx"
CONTACT = "contact.png"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def write_results(store: FileStore, batch: Batch, jobs: list[Job], template: Template | None,
                  font: str = "") -> tuple[str, str | None]:
    """Write the batch's results sheet and contact sheet (None: no image) into its
    folder in the store; their paths there. Reads every image: run it off the loop."""
    from executor.contact import contact_sheet
    folder = batch_folder(batch.id)
    results = store.write(f"{folder}/{RESULTS}", results_xlsx(
        jobs, columns_of(template, jobs), batch.meta.get("lang", "en")))
    lang = batch.meta.get("lang", "en")
    images = [(store.path(o), label(j, template, lang)) for j in jobs
              if j.status == Status.SUCCEEDED for o in j.outputs]
    contact = store.write(f"{folder}/{CONTACT}", contact_sheet(images, font=font)) \
        if images else None
    return results, contact


def label(job: Job, template: Template | None, lang: str = "en") -> str:
    """An image's name on the contact sheet: its row's key value and its row."""
    row = say("contact_row", lang, row=job.row)
    key = key_value(job, template)
    return f"{key} · {row}" if key is not None else row


def key_value(job: Job, template: Template | None) -> str | None:
    """What names a row to the person who wrote it: its value in the template's first
    column that is not a picture or a seed (e.g. the SKU), cut to 24 characters."""
    names = [n for n, p in template.params.items() if p.type not in ("image", "seed")] \
        if template is not None else sorted(job.values)
    key = next((job.values[n] for n in names if job.values.get(n) not in (None, "")), None)
    return None if key is None else str(key)[:24]


def columns_of(template: Template | None, jobs: list[Job]) -> list[str]:
    """Parameter names in the template's order (the database may reorder JSON keys)."""
    if template is not None:
        return list(template.params)
    return sorted({n for j in jobs for n in j.values})


def results_xlsx(jobs: list[Job], names: list[str], lang: str = "en") -> bytes:
    """The batch's rows as the sheet had them (columns `names`), plus status, output
    file and error."""
    from openpyxl import Workbook
    book = Workbook()
    sheet = book.active
    sheet.title = "results"
    sheet.append([say("col_row", lang), *names, say("col_status", lang),
                  say("col_output", lang), say("col_error", lang)])
    for job in jobs:
        values = {**job.values, **job.workflow.get("named", {})}  # pictures as the sheet named them
        sheet.append([writable(_cell(v)) for v in (job.row, *[values.get(n) for n in names],
                                                   str(job.status), ", ".join(job.outputs),
                                                   job.error or "")])
    text_cells(sheet)
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def _cell(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return str(value)
    return value
