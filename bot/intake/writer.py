"""Sheets genbot writes: a template's example sheet, and cells that stay text.

Whatever genbot puts in a workbook (an example sheet, a batch's results.xlsx) may come
from a person — a prompt, a file name — so every string goes out as text, never as a
formula a spreadsheet would run.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from bot.intake.example_mark import mark
from bot.intake.sheets import cell_value, header_for
from bot.messages import say

if TYPE_CHECKING:
    from templates.graph import Template


def example_rows(template: Template, lang: str = "en") -> list[list[Any]]:
    """Headers and two example rows, from the template's examples and defaults."""
    params = list(template.params.values())
    out = [[header_for(p, lang) for p in params]]
    for i in range(2):
        line = []
        for p in params:
            example = p.example[i % len(p.example)] if isinstance(p.example, list) and p.example \
                else p.example
            line.append(cell_value(example if example is not None else p.default))
        out.append(line)
    return out


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def writable(value: Any) -> Any:
    """A value openpyxl will write: characters XML cannot hold (control characters) are
    shown as U+FFFD rather than failing the whole file."""
    from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
    return ILLEGAL_CHARACTERS_RE.sub("\ufffd", value) if isinstance(value, str) else value


def text_cells(sheet: Any) -> None:
    """Every string in `sheet` goes out as text, never as a formula: openpyxl takes any
    string starting with "=" for one, and a spreadsheet app may take "+", "-" or "@" so
    when the cell is edited (the quote prefix keeps it text). Every file genbot writes
    passes through here; the cell still shows exactly what was written."""
    for line in sheet.iter_rows():
        for cell in line:
            if isinstance(cell.value, str):
                cell.data_type = "s"
                if cell.value[:1] in FORMULA_START:
                    cell.quotePrefix = True


def write_example(template: Template, lang: str = "en") -> bytes:
    """An .xlsx with the right headers, two example rows, and a help sheet; marked as
    genbot's example (bot.intake.example_mark), so sent back alone it runs on genbot's
    drawings of the pictures it names."""
    import openpyxl
    from openpyxl.styles import Font

    book = openpyxl.Workbook()
    rows = book.active
    rows.title = say("sheet_rows", lang)
    params = list(template.params.values())
    for line in example_rows(template, lang):
        rows.append([writable(v) for v in line])
    for cell in rows[1]:
        cell.font = Font(bold=True)
    labels = [say(f"sheet_{label}", lang) for label in
              ("column", "type", "required", "default", "allowed", "aliases", "about")]
    help_sheet = book.create_sheet(say("sheet_help", lang))
    help_sheet.append(list(labels))
    for cell in help_sheet[1]:
        cell.font = Font(bold=True)
    yes, no = say("sheet_yes", lang), say("sheet_no", lang)
    for p in params:
        help_sheet.append([writable(v) for v in (
            header_for(p, lang), p.type, yes if p.required else no,
            "" if p.default is None else str(cell_value(p.default)), p.allowed,
            ", ".join(a for a in (p.name, *p.aliases) if a != header_for(p, lang)), p.help)])
    for sheet in (rows, help_sheet):
        text_cells(sheet)
        for column in sheet.columns:
            width = max(len(str(c.value or "")) for c in column)
            sheet.column_dimensions[column[0].column_letter].width = min(60, max(10, width + 2))
    mark(book, template.name)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()
