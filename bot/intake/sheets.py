"""Reading a spreadsheet into a header and rows, whatever people actually send.

.xlsx/.xlsm/.xls/.ods through python-calamine (formula cells give their cached values,
merged cells fill their whole range); .csv/.tsv in UTF-8 (with or without BOM),
UTF-16 or GB18030/GBK — what Excel in China exports — with the delimiter sniffed.
Row numbers stay the ones the user sees in Excel. Anything unreadable becomes a
SheetError with a code, never a traceback.
"""

from __future__ import annotations

import codecs
import csv
import io
import zipfile
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import python_calamine

from bot.errors import Coded
from executor.params import is_blank

WORKBOOKS = (".xlsx", ".xlsm", ".xls", ".ods")
TEXTS = (".csv", ".tsv")
ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # .xls, and encrypted (password) OOXML


class SheetError(Coded):
    """The file cannot be read as a sheet, and why."""


@dataclass
class Sheet:
    filename: str
    header_row: int  # as numbered in Excel (1-based)
    headers: list[str]
    rows: list[tuple[int, list[Any]]]  # (Excel row number, cells), blank rows left out


def read_sheet(filename: str, data: bytes, *, max_unpacked_bytes: int) -> Sheet:
    ext = PurePath(filename).suffix.lower()
    if ext not in WORKBOOKS + TEXTS:
        raise SheetError("unsupported_format", file=filename, ext=ext or "extension-less")
    if ext in TEXTS:
        if data.startswith(ZIP_MAGIC) or data.startswith(OLE_MAGIC):
            raise SheetError("csv_is_workbook", file=filename)
        grid = _read_text(filename, data, "\t" if ext == ".tsv" else None)
    else:
        grid = _read_workbook(filename, data, ext, max_unpacked_bytes)
    return _to_sheet(filename, grid)


def _read_workbook(filename: str, data: bytes, ext: str, max_unpacked: int) -> list[list[Any]]:
    if ext != ".xls" and data.startswith(OLE_MAGIC):
        raise SheetError("password_protected", file=filename)
    if ext != ".xls":
        if not data.startswith(ZIP_MAGIC):
            raise SheetError("corrupt", file=filename, detail="not a zip package")
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                unpacked = sum(info.file_size for info in z.infolist())
        except (zipfile.BadZipFile, EOFError) as e:
            raise SheetError("corrupt", file=filename, detail=str(e) or "truncated") from None
        if unpacked > max_unpacked:
            raise SheetError("zip_bomb", file=filename, unpacked_mb=unpacked / 2**20,
                             max_mb=max_unpacked / 2**20)
    try:
        book = python_calamine.CalamineWorkbook.from_filelike(io.BytesIO(data))
        visible = [i for i, m in enumerate(book.sheets_metadata)
                   if m.typ == python_calamine.SheetTypeEnum.WorkSheet
                   and m.visible == python_calamine.SheetVisibleEnum.Visible]
        if not visible:
            raise SheetError("empty_sheet", file=filename)
        sheet = book.get_sheet_by_index(visible[0])
        grid = sheet.to_python(skip_empty_area=False)
        merged = sheet.merged_cell_ranges or []
    except python_calamine.PasswordError:
        raise SheetError("password_protected", file=filename) from None
    except SheetError:
        raise
    except Exception as e:  # calamine's errors for damaged files vary by format
        raise SheetError("corrupt", file=filename, detail=str(e).splitlines()[0][:200]
                         if str(e) else type(e).__name__) from None
    grid = [list(row) for row in grid]
    for (r0, c0), (r1, c1) in merged:
        if r0 < len(grid) and c0 < len(grid[r0]):
            value = grid[r0][c0]
            for r in range(r0, min(r1 + 1, len(grid))):
                for c in range(c0, min(c1 + 1, len(grid[r]))):
                    grid[r][c] = value
    return grid


def _decode(filename: str, data: bytes) -> str:
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break
    for encoding in ("utf-8", "gb18030"):  # GB18030 is a superset of GBK and GB2312
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise SheetError("bad_encoding", file=filename)


def _read_text(filename: str, data: bytes, delimiter: str | None) -> list[list[Any]]:
    text = _decode(filename, data)
    if "\x00" in text:
        raise SheetError("corrupt", file=filename, detail="binary data in a text file")
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:64 * 1024], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    try:
        return list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as e:
        raise SheetError("corrupt", file=filename, detail=str(e)) from None


def _to_sheet(filename: str, grid: list[list[Any]]) -> Sheet:
    rows = [(n, row) for n, row in enumerate(grid, start=1) if not all(map(is_blank, row))]
    if not rows:
        raise SheetError("empty_sheet", file=filename)
    header_row, header_cells = rows[0]
    width = max(i + 1 for i, v in enumerate(header_cells) if not is_blank(v))
    headers = ["" if is_blank(v) else str(v).strip() for v in header_cells[:width]]
    body = [(n, (list(row) + [None] * width)[:width]) for n, row in rows[1:]]
    body = [(n, cells) for n, cells in body if not all(map(is_blank, cells))]
    return Sheet(filename, header_row, headers, body)


def _cell(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    return value


def header_for(param, lang: str) -> str:
    """The column header an example sheet uses: in Chinese, the first Chinese alias."""
    if lang == "zh":
        for alias in param.aliases:
            if any("\u4e00" <= ch <= "\u9fff" for ch in alias):
                return alias
    return param.name


def example_rows(template, lang: str = "en") -> list[list[Any]]:
    """Headers and two example rows, from the template's examples and defaults."""
    params = list(template.params.values())
    out = [[header_for(p, lang) for p in params]]
    for i in range(2):
        line = []
        for p in params:
            example = p.example[i % len(p.example)] if isinstance(p.example, list) and p.example \
                else p.example
            line.append(_cell(example if example is not None else p.default))
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


def write_example(template, lang: str = "en") -> bytes:
    """An .xlsx with the right headers, two example rows, and a help sheet."""
    import openpyxl
    from openpyxl.styles import Font

    book = openpyxl.Workbook()
    rows = book.active
    rows.title = "rows" if lang != "zh" else "数据"
    params = list(template.params.values())
    for line in example_rows(template, lang):
        rows.append([writable(v) for v in line])
    for cell in rows[1]:
        cell.font = Font(bold=True)
    labels = (("column", "type", "required", "default", "allowed", "also accepted as", "help")
              if lang != "zh" else
              ("列名", "类型", "必填", "默认值", "取值范围", "也可用的列名", "说明"))
    help_sheet = book.create_sheet("help" if lang != "zh" else "说明")
    help_sheet.append(list(labels))
    for cell in help_sheet[1]:
        cell.font = Font(bold=True)
    yes, no = ("yes", "no") if lang != "zh" else ("是", "否")
    for p in params:
        help_sheet.append([writable(v) for v in (
            header_for(p, lang), p.type, yes if p.required else no,
            "" if p.default is None else str(_cell(p.default)), p.allowed,
            ", ".join(a for a in (p.name, *p.aliases) if a != header_for(p, lang)), p.help)])
    for sheet in (rows, help_sheet):
        text_cells(sheet)
        for column in sheet.columns:
            width = max(len(str(c.value or "")) for c in column)
            sheet.column_dimensions[column[0].column_letter].width = min(60, max(10, width + 2))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()
