"""What a finished batch leaves beside its images: results.xlsx (every row as the sheet
had it, with its status, output file and error) and contact.png (every image on one
sheet). The summary posts them; the API and the dashboard serve them."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.intake.writer import text_cells, writable
from bot.messages import say
from storage.files import FileStore, batch_folder, picks_folder
from storage.names import shown
from storage.records import Batch, Job, Status
from storage.renditions import Rendition
from templates.actions import SIDES
from templates.binding import as_text
from templates.graph import Template
from templates.sweeps import VARIANT

RESULTS = "results.xlsx"
CONTACT = "contact.png"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

log = logging.getLogger("genbot.results")


def write_results(store: FileStore, batch: Batch, jobs: list[Job], template: Template | None,
                  font: str = "", renditions: Sequence[Rendition] = ()) -> tuple[str, str | None]:
    """Write the batch's results sheet and contact sheet (None: no image) into its
    folder in the store; their paths there. Reads every image: run it off the loop."""
    from bot.app.contact import contact_sheet
    folder = batch_folder(batch.id)
    results = write_results_sheet(store, batch, jobs, template, renditions)
    lang = batch.meta.get("lang", "en")
    images = [(path, label(j, template, lang)) for j in jobs if j.status == Status.SUCCEEDED
              for o in j.outputs if (path := _output_file(store, o)) is not None]
    # An output that is no readable image (a video, a page, a cut-short file) gets a
    # placeholder card there: one odd file never stops the summary.
    contact = store.write(f"{folder}/{CONTACT}", contact_sheet(images, font=font)) \
        if images else None
    return results, contact


def write_results_sheet(store: FileStore, batch: Batch, jobs: list[Job],
                        template: Template | None, renditions: Sequence[Rendition] = ()) -> str:
    """The batch's results sheet alone (its reviews change after the batch ends: made
    again then, without the contact sheet's images); its path in the store."""
    return store.write(f"{batch_folder(batch.id)}/{RESULTS}", results_xlsx(
        jobs, columns_of(template, jobs), batch.meta.get("lang", "en"), swept_axes(batch),
        signed_off=batch, renditions=renditions))


def write_picks(store: FileStore, batch: Batch, picks: list[Job], template: Template | None,
                font: str = "") -> tuple[str, str | None]:
    """The kept images of a batch and what was made from it: their results sheet (each
    row's values, seed, model, parent — enough to run them again exactly) and a contact
    sheet, in the batch's picks folder (never among its outputs)."""
    from bot.app.contact import contact_sheet
    lang = batch.meta.get("lang", "en")
    folder = picks_folder(batch.id)
    results = store.write(f"{folder}/picks.xlsx", results_xlsx(
        picks, columns_of(template, picks), lang, swept_axes(batch)))
    images = [(path, label(j, template, lang)) for j in picks for o in j.outputs[:1]
              if (path := _output_file(store, o)) is not None]
    contact = store.write(f"{folder}/picks.png", contact_sheet(images, font=font)) \
        if images else None
    return results, contact


def _output_file(store: FileStore, output: str) -> Path | None:
    """The file of a job's output on this host; None (and a warning) for a stored name
    that points outside the store, which no sheet may show."""
    try:
        return store.path(output)
    except ValueError as e:
        log.warning("results: output %s left off the contact sheet: %s", shown(output), e)
        return None


def image_entries(batch: Batch, jobs: list[Job]) -> list[tuple[str, str]]:
    """The jobs' images as a zip holds them: each under its name in the batch's folder
    (the names the template gave them: the SKU's folder, the row)."""
    folder = batch_folder(batch.id)
    return [(output, output.removeprefix(f"{folder}/")) for job in jobs for output in job.outputs]


def write_zip(store: FileStore, batch: Batch, entries: list[tuple[str, str]], name: str) -> Path:
    """Stored files (path in the store, name in the zip) in one zip on this host, stored
    as they are (PNG, JPEG and WebP are compressed already). Made afresh each time —
    which images are approved changes — beside the batch's files, swapped in whole."""
    import tempfile
    import zipfile
    target = store.local(f"{batch_folder(batch.id)}/{name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".zip")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
            for stored, arcname in entries:
                path = _output_file(store, stored)
                if path is not None and path.is_file():
                    z.write(path, arcname)
        Path(tmp).replace(target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def label(job: Job, template: Template | None, lang: str = "en") -> str:
    """An image's name on the contact sheet: its row's key value and its row."""
    row = say("contact_row", lang, row=job.row)
    key = key_value(job, template)
    return f"{key} · {row}" if key is not None else row


def key_value(job: Job, template: Template | None) -> str | None:
    """What names a row to the person who wrote it: its value in the template's first
    column that is not a picture or a seed (e.g. the SKU), cut to 24 characters."""
    names = [n for n, p in template.params.items() if not p.picture and p.type != "seed"] \
        if template is not None else sorted(job.values)
    key = next((job.values[n] for n in names if job.values.get(n) not in (None, "")), None)
    return None if key is None else str(key)[:24]


def columns_of(template: Template | None, jobs: list[Job]) -> list[str]:
    """Parameter names in the template's order (the database may reorder JSON keys)."""
    if template is not None:
        return list(template.params)
    return sorted({n for j in jobs for n in j.values})


def swept_axes(batch: Batch) -> list[str]:
    """The parameters a sweep varied, in the order --vary gave them (none: no sweep)."""
    return list((batch.meta.get("sweep") or {}).get("axes") or [])


def results_xlsx(jobs: list[Job], names: list[str], lang: str = "en",
                 order: list[str] | tuple[str, ...] = (), signed_off: Batch | None = None,
                 renditions: Sequence[Rendition] = ()) -> bytes:
    """The batch's rows as the sheet had them (columns `names`), plus status, output
    file and error (and a sweep's values, its axes in `order`), each image's review, a
    column per sales channel (each file's name, and why it needs review where it does),
    and under the rows who signed the batch off and when (`signed_off`, where it was)."""
    from openpyxl import Workbook
    book = Workbook()
    swept = any(j.workflow.get("axes") for j in jobs)  # a sweep: each image's axis values
    told = any(instruction_of(j) for j in jobs)  # an image changed by a sentence
    masked = any(_fill(j).get("mask") for j in jobs)  # a region repainted
    grown = any(_canvas(j) for j in jobs)  # a canvas extended
    noted = any(j.review_note for j in jobs)  # a reason, a change asked for
    graded = any(j.stars for j in jobs)
    channels = list(dict.fromkeys(r.channel for r in renditions))
    files: dict[tuple[int, str], list[str]] = {}
    for r in renditions:
        files.setdefault((r.job_id, r.channel), []).append(rendition_text(r, lang))
    sheet = book.active
    sheet.title = "results"
    sheet.append([say("col_row", lang), *names, say("col_status", lang),
                  say("col_output", lang), say("col_error", lang), say("col_job", lang),
                  say("col_parent", lang), say("col_action", lang),
                  *([say("col_instruction", lang)] if told else []),
                  *([say("col_mask", lang)] if masked else []),
                  *([say("col_canvas", lang)] if grown else []), say("col_rating", lang),
                  *([say("col_review_note", lang)] if noted else []),
                  *([say("col_stars", lang)] if graded else []), say("col_model", lang),
                  say("col_version", lang),
                  *([say("col_swept", lang)] if swept else []), *channels])
    for job in jobs:
        values = {**job.values, **job.workflow.get("named", {})}  # pictures as the sheet named them
        review = say(f"review_{job.review}", lang) if job.status == Status.SUCCEEDED else ""
        sheet.append([writable(_cell(v)) for v in (
            job.row, *[values.get(n) for n in names], str(job.status), ", ".join(job.outputs),
            job.error or "", job.id, job.parent_job_id, job.action or "",
            *([instruction_of(job)] if told else []),
            *([_fill(job).get("mask") or ""] if masked else []),
            *([_canvas(job)] if grown else []), review,
            *([job.review_note or ""] if noted else []), *([job.stars] if graded else []),
            job.affinity or "", _version(job.workflow),
            *([swept_label(job.workflow.get("axes") or {}, order)] if swept else []),
            *("\n".join(files.get((job.id, c), ())) for c in channels))])
    text_cells(sheet)
    if signed_off is not None and signed_off.signed_off_at is not None:
        at = datetime.fromtimestamp(signed_off.signed_off_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        sheet.append([])
        sheet.append([writable(say("col_signed_off", lang, by=signed_off.signed_off_by or "",
                                   at=at))])
    buf = io.BytesIO()
    book.save(buf)
    return buf.getvalue()


def rendition_text(r: Rendition, lang: str = "en") -> str:
    """A rendition as a person reads it: its file name, and why it needs review if it
    does (its findings, templates.deliver_checks)."""
    if r.passed:
        return r.name
    why = "; ".join(say(f"check_{f['check']}", lang, **{k: v for k, v in f.items()
                                                         if k != "check"})
                    for f in r.findings)
    return say("rendition_needs_review", lang, name=r.name, why=why)


def instruction_of(job: Job) -> str:
    """The sentence an action changed its parent's image by, or (a repaint, an extend)
    what it painted (a row's own instruction, a column of the template's, is among its
    values)."""
    if not job.action:
        return ""
    return str(next((s["inputs"]["instruction"] for s in job.workflow.get("nodes") or ()
                     if "instruction" in s.get("inputs", {})), None)
               or _fill(job).get("prompt") or "")


def _fill(job: Job) -> dict[str, Any]:
    """The inputs of the fill step an action made (the mask file in the store, the
    prompt, the margins); {}: none."""
    if not job.action:
        return {}
    return next((s.get("inputs", {}) for s in job.workflow.get("nodes") or ()
                 if s.get("op") == "fill"), {})


def _canvas(job: Job) -> str:
    """What an extend grew the canvas by: "9:16", "left 256, right 256"."""
    fill = _fill(job)
    return ", ".join([*(f"{side} {fill[side]}" for side in SIDES if fill.get(side)),
                      *([str(fill["aspect"])] if fill.get("aspect") else [])])


def _version(workflow: dict[str, Any]) -> str:
    """v3 · 1a2b3c4d5e6f: the template's version (genbot template history) and its hash."""
    number, digest = workflow.get("revision"), workflow.get("version") or ""
    return f"v{number} · {digest}" if number else digest


def job_label(job: Job, template: Template | None, order: list[str] | tuple[str, ...] = ()
              ) -> str:
    """A sweep's or a comparison's image by what it was made with (swept_label), with
    its seed itself where the template has one: what it takes to make it again."""
    axes = dict(job.workflow.get("axes") or {})
    seeds = [job.values[p.name] for p in (template.params.values() if template else ())
             if p.type == "seed" and job.values.get(p.name) is not None]
    if seeds:
        axes["seed"] = seeds[0]
    return swept_label(axes, order)


def swept_label(axes: dict[str, Any], order: list[str] | tuple[str, ...] = ()) -> str:
    """What a sweep's or a comparison's image was made with, each value by its key:
    "A social_thumb@3 · steps=20 · guidance=3 · seed 2" — a comparison's version first,
    the swept values in `order` (the sweep's, as --vary gave them: a database may keep a
    job's axes in another), the seed last. The results sheet and the captions read this."""
    def place(key: str) -> tuple[bool, bool, int]:
        return key != VARIANT, key == "seed", order.index(key) if key in order else len(order)
    return " · ".join(str(axes[k]) if k == VARIANT else f"seed {axes[k]}" if k == "seed"
                      else f"{k}={as_text(axes[k])}" for k in sorted(axes, key=place))


def _cell(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return str(value)
    return value
