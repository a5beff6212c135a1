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
import re
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import python_calamine

from bot import i18n
from bot.errors import Coded
from bot.intake.example_mark import example_of
from bot.messages import KINDS, Localized, Phrase
from templates.params import Param, is_blank

WORKBOOKS = (".xlsx", ".xlsm", ".xls", ".ods")
TEXTS = (".csv", ".tsv")
ZIP_MAGIC = b"PK\x03\x04"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # .xls, and encrypted (password) OOXML
# Worksheets from Excel 2.x–4.0 (1987–1992): a BOF record at byte 0, no OLE container.
OLD_EXCEL = (b"\x09\x00", b"\x09\x02", b"\x09\x04")
# What a file that is not a sheet most often turns out to be, by its first bytes.
NOT_SHEETS = ((b"\x89PNG", "png"), (b"\xff\xd8\xff", "jpeg"), (b"GIF8", "gif"),
              (b"%PDF", "pdf"), (b"Rar!", "rar"), (b"7z\xbc\xaf", "7z"), (b"\x1f\x8b", "gzip"))
MAX_ROWS, MAX_COLUMNS = 1_048_576, 16_384  # what Excel holds; a file declaring more is crafted
# Candidates when a text file is not UTF-8: what spreadsheets export in China, Taiwan,
# Japan, Korea and the West. Single-byte Western text is ambiguous; Windows-1252 (Excel's
# default there) wins any tie.
ENCODINGS = ("gb18030", "big5", "shift_jis", "cp949", "cp1252")
EXCEL_ERRORS = ("#NULL!", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#N/A",
                "#GETTING_DATA", "#SPILL!", "#CALC!", "#FIELD!", "#BLOCKED!", "#UNKNOWN!")


class SheetError(Coded):
    """The file cannot be read as a sheet, and why."""


class CellError(str):
    """A cell that shows an Excel error (#N/A, #REF!…): not empty, and not a value."""


@dataclass
class Sheet:
    filename: str
    header_row: int  # as numbered in Excel (1-based)
    headers: list[str]
    rows: list[tuple[int, list[Any]]]  # (Excel row number, cells), blank rows left out
    note: tuple[str, dict[str, Any]] | None = None  # read, but worth saying (a wrong name)
    more_rows: int = 0  # non-blank rows past the cap the reader was given: counted, not kept
    # Every non-blank row as read, the header's too: a title block above the real header
    # (bank and broker exports have one) can be skipped once the template is known.
    source: list[tuple[int, list[Any]]] = field(default_factory=list)
    example_of: str | None = None  # genbot's example sheet for this template (example_mark)

    def headed_at(self, index: int) -> Sheet:
        """The same sheet with its `index`-th non-blank row as the header."""
        sheet = _with_header(self.filename, self.source, index)
        sheet.note, sheet.more_rows, sheet.example_of = self.note, self.more_rows, self.example_of
        return sheet


def read_sheet(filename: str, data: bytes, *, max_unpacked_bytes: int,
               keep_rows: int | None = None) -> Sheet:
    """Whatever the bytes really are, by their content: the extension only says what the
    person thinks they sent (a note says so when they differ).

    `keep_rows`: keep at most this many non-blank rows and only count the rest
    (`Sheet.more_rows`), so a sheet of a million rows is refused for its size in bounded
    memory instead of being held whole first."""
    ext = PurePath(filename).suffix.lower()
    if ext not in WORKBOOKS + TEXTS:
        raise SheetError("unsupported_format", file=filename, ext=ext or "extension-less")
    if not data:
        raise SheetError("empty_file", file=filename)
    note: tuple[str, dict[str, Any]] | None = None
    if data.startswith(ZIP_MAGIC):
        (grid, more), kind = _read_zip(filename, data, max_unpacked_bytes, keep_rows)
    elif data.startswith(OLE_MAGIC):
        (grid, more), kind = _read_ole(filename, data, keep_rows), ".xls"
    elif data[:2] in OLD_EXCEL and ext == ".xls":
        raise SheetError("old_excel", file=filename)
    elif (what := _not_a_sheet(data)) is not None:
        if what in ("html", "xml2003"):
            raise SheetError(f"saved_as_{'web_page' if what == 'html' else what}", file=filename)
        raise SheetError("not_a_sheet", file=filename, what=KINDS[what])
    else:
        grid, more = _read_text(filename, data, "\t" if ext == ".tsv" else None, keep_rows)
        kind = ext if ext in TEXTS else ".csv"
        if ext in WORKBOOKS and max((len(row) for row in grid[:200]), default=0) < 2:
            first = next((row[0] for row in grid if row and row[0].strip()), "")
            raise SheetError("plain_text", file=filename, start=first.strip()[:80])
    if kind != ext and not (kind == ".xlsx" and ext == ".xlsm") \
            and not (kind == ".csv" and ext == ".tsv"):
        note = ("wrong_extension", {"file": filename, "kind": KINDS[kind]})
    sheet = _to_sheet(filename, grid) if grid or not more else Sheet(filename, 1, [], [])
    sheet.note, sheet.more_rows = note, more
    if kind == ".xlsx":
        sheet.example_of = example_of(data)
    return sheet


WHOLE_PART = 4 * 2**20  # a package part bigger than this (a long sheet) is read when needed
_ROW_END = re.compile(rb"</(?:\w+:)?row>")
_VALUES = (b"<v>", b"<v ", b"<is>", b":v>", b":is>")  # a cell's value, or its inline text


def _rows_written(data: bytes, part: str | None) -> int | None:
    """The rows holding a value (`<v>`, or inline text `<is>`) in an .xlsx worksheet
    part, counted in its bytes as they are unpacked, never held whole: rows of styled
    empty cells (merged ranges) are not rows a spreadsheet program shows."""
    if part is None:
        return None
    count, rest = 0, b""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        if part not in z.NameToInfo:
            return None
        with z.open(part) as f:
            while chunk := f.read(2**20):
                *rows, rest = _ROW_END.split(rest + chunk)
                count += sum(any(v in row for v in _VALUES) for row in rows)
    return count


Grid = list[list[Any]]


def _capped(rows: Iterable[list[Any]], keep: int | None,
            cell: Callable[[Any], Any] = lambda v: v) -> tuple[Grid, int]:
    """The rows up to the `keep`-th non-blank one (each cell through `cell`), and how many
    non-blank rows came after: those are only counted."""
    grid: Grid = []
    kept = more = 0
    for row in rows:
        blank = all(map(is_blank, row))
        if keep is None or kept < keep:
            grid.append([cell(v) for v in row])
            kept += not blank
        elif not blank:
            more += 1
    return grid, more


def _not_a_sheet(data: bytes) -> str | None:
    """What a non-spreadsheet file is, when its first bytes tell; None for text."""
    for magic, what in NOT_SHEETS:
        if data.startswith(magic):
            return what
    start = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if start.startswith((b"<!doctype html", b"<html", b"<table")):
        return "html"
    if start.startswith(b"<?xml") and b"schemas-microsoft-com:office:spreadsheet" in data[:4096]:
        return "xml2003"
    if start.startswith(b"<"):
        return "xml"
    sample = data[:8192]
    controls = sum(sample.count(bytes([b])) for b in (*range(9), *range(14, 27), *range(28, 32)))
    if controls > len(sample) // 10 \
            and not sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "binary"  # (a stray NUL in a text table is dropped, not refused)
    return None


def _read_zip(filename: str, data: bytes, max_unpacked: int,
              keep: int | None) -> tuple[tuple[Grid, int], str]:
    """An .xlsx/.xlsm or .ods package, checked before any XML in it is parsed."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            infos = z.infolist()
            names = {i.filename for i in infos}
            unpacked = sum(i.file_size for i in infos)
            if unpacked > max_unpacked:
                raise SheetError("zip_bomb", file=filename, unpacked_mb=unpacked / 2**20,
                                 max_mb=max_unpacked / 2**20)
            if "xl/workbook.xml" in names:
                kind = ".xlsx"
            elif "content.xml" in names:
                kind = ".ods"
            else:
                shown = ", ".join(sorted(names)[:3]) or "nothing"
                raise SheetError("zip_not_workbook", file=filename, members=shown)
            xml = [i for i in infos if i.filename.endswith((".xml", ".rels"))]
            parts = {i.filename: z.read(i) for i in xml if i.file_size <= WHOLE_PART}
            heads = {i.filename: z.open(i).read(4096) for i in xml if i.file_size > WHOLE_PART}
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, NotImplementedError,
            zlib.error) as e:
        raise SheetError("corrupt", file=filename, detail=_damage(str(e) or "truncated")) from None
    for name, part in {**parts, **heads}.items():
        head = part[:4096]
        if b"<!DOCTYPE" in head or b"<!ENTITY" in head:
            raise SheetError("xml_entities", file=filename, part=name)

    def whole(name: str | None) -> bytes:
        """A part read whole, when it is needed: the big ones only then."""
        if name is None or name in parts or name not in heads:
            return parts.get(name or "", b"")
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return z.read(name)

    if kind == ".ods":
        _check_repeats(filename, whole("content.xml"))
    counted = (lambda sheet: _rows_written(data, _sheet_part(parts, sheet))) \
        if kind == ".xlsx" else None
    sheet_name, (grid, more), _ = _calamine(filename, data, keep, counted)
    if kind == ".xlsx" and grid:
        _mark_errors(grid, whole(_sheet_part(parts, sheet_name)), grow=not more)
    elif kind == ".ods" and not any(not is_blank(v) for row in grid for v in row):
        # cells calamine does not read
        return _capped(_ods_text(whole("content.xml")), keep), kind
    return (grid, more), kind


def _check_repeats(filename: str, content: bytes) -> None:
    """An .ods may say "this cell, a billion times": more than a spreadsheet holds."""
    for axis, limit in ((b"rows", MAX_ROWS), (b"columns", MAX_COLUMNS)):
        counts = re.findall(rb'number-' + axis + rb'-repeated="(\d+)"', content)
        biggest = max((int(c) for c in counts), default=0)
        if biggest > limit:
            raise SheetError("too_many_cells", file=filename, count=biggest,
                             axis=KINDS[axis.decode()], limit=limit)


def _read_ole(filename: str, data: bytes, keep: int | None) -> tuple[Grid, int]:
    """An OLE container: a legacy .xls (perhaps under another name), or an encrypted
    workbook of either kind, or another Office file."""
    import msoffcrypto
    try:
        office = msoffcrypto.OfficeFile(io.BytesIO(data))
        encrypted = office.is_encrypted()
    except Exception:  # noqa: BLE001 - an Excel 95 "Book", or damaged: calamine says what it can
        office, encrypted = None, False
    kind = type(office).__name__
    if kind in ("Doc97File", "Ppt97File"):
        raise SheetError("not_a_sheet", file=filename, what=KINDS[
            "word" if kind == "Doc97File" else "powerpoint"])
    if encrypted or kind == "OOXMLFile":  # an OOXML package in OLE is always encrypted
        raise SheetError("password_protected", file=filename)
    _, (grid, more), index = _calamine(filename, data, keep)
    _mark_biff_errors(grid, data, index, grow=not more)
    return grid, more


def _calamine(filename: str, data: bytes, keep: int | None,
              counted: Callable[[str], int | None] | None = None,
              ) -> tuple[str, tuple[Grid, int], int]:
    """The first visible worksheet's name and cells (rows and columns numbered as in the
    sheet), with merged ranges filled; past `keep` non-blank rows, the rest only counted.
    `counted`: the rows a sheet (by name) holds, if its file says so cheaply: a sheet
    with many more than `keep` is not loaded at all (calamine holds a sheet whole)."""
    try:
        book = python_calamine.CalamineWorkbook.from_filelike(io.BytesIO(data))
        visible = [i for i, m in enumerate(book.sheets_metadata)
                   if m.typ == python_calamine.SheetTypeEnum.WorkSheet
                   and m.visible == python_calamine.SheetVisibleEnum.Visible]
        if not visible:
            raise SheetError("empty_sheet", file=filename)
        name = book.sheet_names[visible[0]]
        rows = counted(name) if counted is not None and keep is not None else None
        if rows is not None and keep is not None and rows > keep:  # the header, then the rest
            return name, ([], rows - 1), visible[0]
        sheet = book.get_sheet_by_index(visible[0])
        left = [""] * sheet.start[1] if sheet.start else []  # iter_rows leaves them out
        grid, more = _capped((left + row for row in sheet.iter_rows()), keep, _shown)
        merged = sheet.merged_cell_ranges or []
    except python_calamine.PasswordError:
        raise SheetError("password_protected", file=filename) from None
    except SheetError:
        raise
    except Exception as e:  # noqa: BLE001 - calamine's errors for damaged files vary by format
        raise SheetError("corrupt", file=filename, detail=_damage(
            str(e).splitlines()[0][:200] if str(e) else type(e).__name__)) from None
    for (r0, c0), (r1, c1) in merged:
        if r0 < len(grid) and c0 < len(grid[r0]):
            value = grid[r0][c0]
            for r in range(r0, min(r1 + 1, len(grid))):
                for c in range(c0, min(c1 + 1, len(grid[r]))):
                    grid[r][c] = value
    return sheet.name, (grid, more), visible[0]


def _damage(detail: str) -> Phrase:
    """A library's account of the damage: in English, as it said it; in another language,
    no English library text inside the sentence."""
    return Phrase("file_unparsable", source=detail)


def _shown(value: Any) -> Any:
    """A cell as a spreadsheet shows it: a whole number without ".0"; text without the
    NUL characters some exporters pad it with."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, float):  # 15 significant digits, as Excel shows 0.1 + 0.2
        return float(f"{value:.15g}")
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "")
    return value


def _mark_errors(grid: Grid, xml: bytes, *, grow: bool) -> None:
    """calamine reads an error cell (#N/A, #REF!…) as empty; the sheet's XML says which
    cells show one. Looked for only when the sheet has any (t="e"). `grow`: add rows for
    error cells below the grid (false when the grid was cut at its cap)."""
    from xml.etree import ElementTree
    if b't="e"' not in xml:
        return
    ns = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
    for _, element in ElementTree.iterparse(io.BytesIO(xml)):
        if element.tag == f"{ns}c" and element.get("t") == "e":
            r, c = _cell_index(element.get("r", ""))
            shown = (element.findtext(f"{ns}v") or "#N/A").strip()
            if r is not None and c is not None and (grow or r < len(grid)):
                while len(grid) <= r:
                    grid.append([])
                row = grid[r]
                row.extend([""] * (c + 1 - len(row)))
                if is_blank(row[c]):
                    row[c] = CellError(shown)
        if element.tag == f"{ns}row":
            element.clear()


BIFF_ERRORS = {0x00: "#NULL!", 0x07: "#DIV/0!", 0x0F: "#VALUE!", 0x17: "#REF!",
               0x1D: "#NAME?", 0x24: "#NUM!", 0x2A: "#N/A"}


def _mark_biff_errors(grid: Grid, data: bytes, index: int, *, grow: bool) -> None:
    """The same for an .xls: its error cells are BOOLERR records with the error flag, and
    FORMULA records whose cached result is an error, in the `index`-th sheet's records
    (BOUNDSHEET gives where they start)."""
    import struct

    import olefile
    try:
        with olefile.OleFileIO(data) as ole:
            stream = ole.openstream("Workbook" if ole.exists("Workbook") else "Book").read()
    except Exception:  # noqa: BLE001 - calamine has read it; only the error marks are lost
        return
    starts, at = [], 0
    while at + 4 <= len(stream):
        kind, size = struct.unpack_from("<HH", stream, at)
        if kind == 0x0085 and size >= 6:  # BOUNDSHEET: where a sheet's records begin
            starts.append(struct.unpack_from("<I", stream, at + 4)[0])
        if kind == 0x000A:  # the workbook globals end before the first sheet
            break
        at += 4 + size
    if index >= len(starts):
        return
    at = starts[index]
    while at + 4 <= len(stream):
        kind, size = struct.unpack_from("<HH", stream, at)
        body = stream[at + 4:at + 4 + size]
        code = None
        if kind == 0x0205 and size >= 8 and body[7] == 1:  # BOOLERR holding an error
            code = body[6]
        elif kind == 0x0006 and size >= 14 and body[6] == 2 and body[12:14] == b"\xff\xff":
            code = body[8]  # FORMULA whose cached result is an error
        if code is not None:
            r, c = struct.unpack_from("<HH", body, 0)
            if not grow and r >= len(grid):
                continue
            while len(grid) <= r:
                grid.append([])
            grid[r].extend([""] * (c + 1 - len(grid[r])))
            if is_blank(grid[r][c]):
                grid[r][c] = CellError(BIFF_ERRORS.get(code, "#N/A"))
        if kind == 0x000A:  # EOF of this sheet
            break
        at += 4 + size


def _sheet_part(parts: dict[str, bytes], sheet_name: str) -> str | None:
    """The zip part of the sheet called `sheet_name` (workbook.xml and its relations)."""
    found = re.search(rb'<(?:\w+:)?sheet\b[^>]*\bname="' + re.escape(
        _xml_escape(sheet_name).encode()) + rb'"[^>]*\br:id="([^"]+)"',
        parts.get("xl/workbook.xml", b""))
    if not found:
        found = re.search(rb'<(?:\w+:)?sheet\b[^>]*\br:id="([^"]+)"',
                          parts.get("xl/workbook.xml", b""))
    if not found:
        return None
    rel = re.search(rb'<Relationship\b[^>]*\bId="' + re.escape(found.group(1))
                    + rb'"[^>]*\bTarget="([^"]+)"', parts.get("xl/_rels/workbook.xml.rels", b""))
    if rel is None:
        rel = re.search(rb'<Relationship\b[^>]*\bTarget="([^"]+)"[^>]*\bId="'
                        + re.escape(found.group(1)) + rb'"',
                        parts.get("xl/_rels/workbook.xml.rels", b""))
    if rel is None:
        return None
    target = rel.group(1).decode()
    return target.lstrip("/") if target.startswith("/") else f"xl/{target}"


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;") \
        .replace(">", "&gt;")


def _cell_index(ref: str) -> tuple[int | None, int | None]:
    """"B9" -> (8, 1)."""
    found = re.fullmatch(r"([A-Z]{1,3})(\d{1,7})", ref)
    if not found:
        return None, None
    column = 0
    for ch in found.group(1):
        column = column * 26 + ord(ch) - 64
    return int(found.group(2)) - 1, column - 1


def _ods_text(content: bytes) -> list[list[Any]]:
    """The first table of an .ods as the text its cells show, for cells calamine cannot
    read (an unknown value type). Repeats are expanded only where there is text."""
    from xml.etree import ElementTree
    t = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
    p = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
    grid: list[list[Any]] = []
    try:
        root = ElementTree.fromstring(content)
    except ElementTree.ParseError:
        return grid
    table = next(root.iter(f"{t}table"), None)
    for row in table.iter(f"{t}table-row") if table is not None else ():
        cells: list[Any] = []
        for cell in row:
            if cell.tag not in (f"{t}table-cell", f"{t}covered-table-cell"):
                continue
            text = "\n".join("".join(para.itertext()) for para in cell.iter(f"{p}p"))
            repeat = int(cell.get(f"{t}number-columns-repeated", "1") or 1)
            cells += [text] * (min(repeat, 256) if text else min(repeat, MAX_COLUMNS))
        while cells and cells[-1] == "":
            cells.pop()
        repeat = int(row.get(f"{t}number-rows-repeated", "1") or 1)
        grid += [list(cells) for _ in range(min(repeat, 256) if cells else 1)]
        if len(grid) > MAX_ROWS:
            break
    return grid


def _decode(filename: str, data: bytes) -> str:
    """Text in its own encoding: a BOM, else UTF-8, else what charset-normalizer finds
    among ENCODINGS — and if nothing reads cleanly, a refusal naming what was tried
    (never mojibake shown as if it were the person's text)."""
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                break
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes
    found = from_bytes(data, cp_isolation=list(ENCODINGS), preemptive_behaviour=False)
    ranked = sorted(found, key=lambda m: (m.chaos, -m.coherence))
    best = ranked[0] if ranked else None
    if best is not None and best.encoding != "cp1252":
        western = next((m for m in ranked if m.encoding == "cp1252"), None)
        if western is not None and western.chaos <= best.chaos and not _cjk(str(best)):
            best = western  # the same cleanliness, and no CJK text either way
    if best is not None and best.chaos <= 0.1:
        try:
            return data.decode(best.encoding)
        except UnicodeDecodeError:
            pass
    raise SheetError("bad_encoding", file=filename,
                     tried="UTF-8, UTF-16, GB18030/GBK, Big5, Shift_JIS, EUC-KR, Windows-1252")


def _cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" or "\u3040" <= ch <= "\u30ff"
               or "\uac00" <= ch <= "\ud7af" for ch in text[:2000])


def _read_text(filename: str, data: bytes, delimiter: str | None,
               keep: int | None) -> tuple[Grid, int]:
    text = _decode(filename, data).replace("\x00", "")
    if delimiter is None:
        delimiter = _delimiter(text)
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    try:
        return _capped(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), keep,
                       _unwrap)
    except csv.Error as e:
        raise SheetError("corrupt", file=filename, detail=_damage(str(e))) from None


def _delimiter(text: str) -> str:
    """The separator that splits the most rows into the same number of fields (more than
    one). csv.Sniffer is thrown by exports' title lines; this only counts, quoting and
    all."""
    sample = text[:64 * 1024]
    if len(text) > len(sample) and "\n" in sample:
        sample = sample[:sample.rindex("\n")]
    best, best_score = ",", 0
    for candidate in (",", "\t", ";", "|"):
        try:
            counts = [len(row) for row in csv.reader(io.StringIO(sample, newline=""),
                                                     delimiter=candidate) if any(row)][:200]
        except csv.Error:
            continue
        common = max(set(counts) - {1}, key=counts.count, default=0)
        score = counts.count(common) if common else 0
        if score > best_score:
            best, best_score = candidate, score
    return best


def _unwrap(value: str) -> str:
    """="00123": how exports keep Excel from reading a code as a number; the text is
    what the cell shows."""
    if len(value) >= 3 and value.startswith('="') and value.endswith('"'):
        return value[2:-1].replace('""', '"')
    return value


def _to_sheet(filename: str, grid: list[list[Any]]) -> Sheet:
    rows = [(n, row) for n, row in enumerate(grid, start=1) if not all(map(is_blank, row))]
    if not rows:
        raise SheetError("empty_sheet", file=filename)
    header_row, header_cells = rows[0]
    if all(isinstance(v, CellError) or is_blank(v) for v in header_cells):
        raise SheetError("header_errors", file=filename, row=header_row, shown=", ".join(
            dict.fromkeys(str(v) for v in header_cells if isinstance(v, CellError))))
    return _with_header(filename, rows, 0)


def _with_header(filename: str, rows: list[tuple[int, list[Any]]], at: int) -> Sheet:
    """The sheet with rows[at] as its header; the rows above it kept aside."""
    header_row, header_cells = rows[at]
    width = max(i + 1 for i, v in enumerate(header_cells) if not is_blank(v))
    headers = ["" if is_blank(v) else str(v).strip() for v in header_cells[:width]]
    body = [(n, (list(row) + [None] * width)[:width]) for n, row in rows[at + 1:]]
    body = [(n, cells) for n, cells in body if not all(map(is_blank, cells))]
    return Sheet(filename, header_row, headers, body, source=rows)


def cell_value(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    return value


class Heading(Localized):
    """A parameter's column as a sheet in the reader's language heads it (`header_for`);
    as a str, its name."""

    param: Any

    def __new__(cls, param: Any) -> Heading:
        made = super().__new__(cls, param.name)
        made.param = param
        return made

    def render(self, lang: str) -> str:
        return header_for(self.param, lang)


def header_for(param: Param, lang: str) -> str:
    """The column header an example sheet uses: in a language written in Chinese
    characters, the first alias written in them."""
    language = i18n.languages().find(lang)
    if language is not None and language.writes_han:
        for alias in param.aliases:
            if i18n.han(alias):
                return alias
    return param.name
