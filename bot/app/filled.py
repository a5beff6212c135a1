"""The sheet a person sent, back to them filled in: their own file — every sheet, column,
format and formula as they had it — with genbot's results appended to the right of their
header, on the rows they wrote. A team's tracker stays theirs.

The file is kept as it came (`batch_<id>/source/<name>`) when the batch is queued, and
where its header was (intake may find it below a title block). The columns appended, in
the batch's language: each row's status, its images, its review and, per sales channel,
its files (with why one needs review). A row run more than once (a sweep, an A/B run)
lists each job's, one line each. .xlsx and .csv come back so; other kinds (.xls, .ods,
rows sent as JSON) have the results sheet instead.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from bot.app.results import rendition_text
from bot.messages import say
from storage.files import FileStore, batch_folder
from storage.records import Batch, Job, Status
from storage.renditions import Rendition

FILLABLE = (".xlsx", ".xlsm", ".csv")


def source_path(batch_id: int, name: str) -> str:
    return f"{batch_folder(batch_id)}/source/{PurePosixPath(name).name}"


def keep_source(store: FileStore, batch_id: int, name: str, data: bytes) -> str | None:
    """Keep the sheet as it came, when it is a kind that can come back filled."""
    if PurePosixPath(name).suffix.lower() not in FILLABLE:
        return None
    return store.write(source_path(batch_id, name), data)


def results_by_row(jobs: Sequence[Job], renditions: Sequence[Rendition],
                   lang: str) -> tuple[list[str], dict[int, list[str]]]:
    """The columns appended, and each sheet row's cells under them."""
    channels = list(dict.fromkeys(r.channel for r in renditions))
    files: dict[tuple[int, str], list[str]] = {}
    for r in renditions:
        files.setdefault((r.job_id, r.channel), []).append(rendition_text(r, lang))
    heads = [say("col_status", lang), say("col_output", lang), say("col_rating", lang),
             *(say("col_channel_files", lang, channel=c) for c in channels)]
    rows: dict[int, list[list[str]]] = {}
    for job in jobs:
        cells = [say(f"state_{job.status}", lang), ", ".join(job.outputs) or (job.error or ""),
                 say(f"review_{job.review}", lang) if job.status == Status.SUCCEEDED else "",
                 *("\n".join(files.get((job.id, c), ())) for c in channels)]
        rows.setdefault(job.row, []).append(cells)
    joined = {row: ["\n".join(filter(None, column)) for column in zip(*runs, strict=True)]
              for row, runs in rows.items()}
    return heads, joined


def filled(name: str, data: bytes, header_row: int, jobs: Sequence[Job],
           renditions: Sequence[Rendition], lang: str) -> bytes | None:
    """The sheet with the results appended; None for a kind that cannot be filled."""
    heads, rows = results_by_row(jobs, renditions, lang)
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in (".xlsx", ".xlsm"):
        return _workbook(data, header_row, heads, rows, keep_vba=suffix == ".xlsm")
    if suffix == ".csv":
        return _csv(data, header_row, heads, rows)
    return None


def _workbook(data: bytes, header_row: int, heads: list[str], rows: dict[int, list[str]],
              *, keep_vba: bool) -> bytes:
    from openpyxl import load_workbook
    from openpyxl.styles import Alignment, Font
    book = load_workbook(io.BytesIO(data), keep_vba=keep_vba)
    sheet = next(s for s in book.worksheets if s.sheet_state == "visible")  # (as intake read)
    used = [c.column for row in sheet.iter_rows() for c in row if c.value not in (None, "")]
    first = max(used, default=0) + 1  # right of every column they use, headed or not
    for i, head in enumerate(heads):
        cell = sheet.cell(header_row, first + i, head)
        cell.font = Font(bold=True)
    for row, cells in rows.items():
        for i, value in enumerate(cells):
            cell = sheet.cell(row, first + i, value)
            cell.alignment = Alignment(wrap_text="\n" in value, vertical="top")
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _csv(data: bytes, header_row: int, heads: list[str], rows: dict[int, list[str]]) -> bytes:
    text, encoding = _decoded(data)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    lines = list(csv.reader(io.StringIO(text), dialect))
    width = max((len(line) for line in lines), default=0)
    out = io.StringIO()
    writer = csv.writer(out, dialect, lineterminator="\r\n")
    for number, line in enumerate(lines, 1):
        extra = heads if number == header_row else rows.get(number, [])
        writer.writerow([*line, *[""] * (width - len(line)), *extra] if extra else line)
    return out.getvalue().encode(encoding)


def _decoded(data: bytes) -> tuple[str, str]:
    """The text and the encoding to write it back in: UTF-8 (with its BOM where it had
    one: Excel reads that as UTF-8), else what charset-normalizer finds."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data.decode("utf-8-sig"), "utf-8-sig"
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        from charset_normalizer import from_bytes
        best = from_bytes(data).best()
        encoding = best.encoding if best is not None else "latin-1"
        return data.decode(encoding, errors="replace"), encoding


def write_filled(store: FileStore, batch: Batch, jobs: Sequence[Job],
                 renditions: Sequence[Rendition]) -> str | None:
    """The filled sheet beside the batch's files (its path in the store); None where the
    batch kept no sheet to fill."""
    name, header_row = batch.meta.get("sheet"), batch.meta.get("sheet_header_row")
    if not name or not header_row:
        return None
    source = store.path(source_path(batch.id, name))
    if not source.is_file():
        return None
    made = filled(name, source.read_bytes(), int(header_row), jobs, renditions,
                  batch.meta.get("lang", "en"))
    if made is None:
        return None
    stem, suffix = PurePosixPath(name).stem, PurePosixPath(name).suffix
    return store.write(f"{batch_folder(batch.id)}/{stem}.filled{suffix}", made)
