"""Builds the spreadsheets the intake tests feed in: real .xlsx, .ods, and CSV bytes."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from xml.sax.saxutils import escape

import openpyxl


def xlsx(rows, *, merge=(), cached=None, password=None) -> bytes:
    """An .xlsx. `cached`: {"C2": 20} gives formula cells the values Excel would cache."""
    book = openpyxl.Workbook()
    sheet = book.active
    for row in rows:
        sheet.append(row)
    for cells in merge:
        sheet.merge_cells(cells)
    out = io.BytesIO()
    book.save(out)
    data = out.getvalue()
    if cached:
        data = _with_cached_values(data, cached)
    if password:
        import msoffcrypto.format.ooxml
        encrypted = io.BytesIO()
        msoffcrypto.format.ooxml.OOXMLFile(io.BytesIO(data)).encrypt(password, encrypted)
        data = encrypted.getvalue()
    return data


def _with_cached_values(data: bytes, cached: dict[str, object]) -> bytes:
    # openpyxl writes formulas without results; Excel stores both. Add the results.
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            body = src.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                text = body.decode()
                for ref, value in cached.items():
                    text = re.sub(rf'(<c r="{ref}"[^>]*>)(<f>[^<]*</f>)<v\s*/>',
                                  rf"\g<1>\g<2><v>{value}</v>", text)
                body = text.encode()
            dst.writestr(item, body)
    return out.getvalue()


def ods(rows) -> bytes:
    """A minimal OpenDocument spreadsheet (what LibreOffice saves)."""
    def cell(v):
        if v is None:
            return "<table:table-cell/>"
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (f'<table:table-cell office:value-type="float" office:value="{v}">'
                    f"<text:p>{v}</text:p></table:table-cell>")
        return (f'<table:table-cell office:value-type="string"><text:p>{escape(str(v))}</text:p>'
                "</table:table-cell>")
    body = "".join("<table:table-row>" + "".join(cell(v) for v in r) + "</table:table-row>"
                   for r in rows)
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
        f'<office:body><office:spreadsheet><table:table table:name="Sheet1">{body}'
        "</table:table></office:spreadsheet></office:body></office:document-content>")
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" '
        'manifest:version="1.2"><manifest:file-entry manifest:full-path="/" '
        'manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.spreadsheet")
        z.writestr("META-INF/manifest.xml", manifest)
        z.writestr("content.xml", content)
    return out.getvalue()


class XlsError(int):
    """A cell of xls() that shows an Excel error, by its BIFF code (0x2A: #N/A)."""


def xls(rows, *, hidden_first: bool = False) -> bytes:
    """A legacy Excel 97-2003 workbook (with a hidden sheet before it, if asked)."""
    import xlwt
    book = xlwt.Workbook()
    if hidden_first:
        hidden = book.add_sheet("hidden")
        hidden.write(0, 0, "not this one")
        hidden.row(1).set_cell_error(0, 0x07)
        hidden.visibility = 1
    sheet = book.add_sheet("Sheet1")
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if isinstance(v, XlsError):
                sheet.row(r).set_cell_error(c, int(v))
            elif v is not None:
                sheet.write(r, c, v)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def csv_bytes(rows, *, encoding="utf-8", delimiter=",") -> bytes:
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator="\r\n").writerows(rows)
    return text.getvalue().encode(encoding)


def zip_bomb(rows, unpacked_bytes: int) -> bytes:
    """A valid .xlsx carrying one extra member that inflates to `unpacked_bytes`."""
    src = zipfile.ZipFile(io.BytesIO(xlsx(rows)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item.filename))
        with dst.open("xl/media/filler.bin", "w") as filler:
            chunk = b"\0" * 2**20
            for _ in range(unpacked_bytes // len(chunk)):
                filler.write(chunk)
    return out.getvalue()


def long_xlsx(header: list[str], rows: int) -> bytes:
    """An .xlsx of `rows` rows of numbers under `header`, written straight as XML: a
    million rows in seconds, where openpyxl takes minutes."""
    src = zipfile.ZipFile(io.BytesIO(xlsx([header])))
    cols = [chr(65 + i) for i in range(len(header))]

    def row(n: int, cells: list[str]) -> str:
        return f'<row r="{n}">' + "".join(
            f'<c r="{c}{n}" t="inlineStr"><is><t>{escape(v)}</t></is></c>'
            for c, v in zip(cols, cells)) + "</row>"
    numbers = "".join(f'<row r="{n}">' + "".join(f'<c r="{c}{n}"><v>{n}</v></c>' for c in cols)
                      + "</row>" for n in range(2, rows + 2))
    body = row(1, header) + numbers
    sheet = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns='
             '"http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
             f"<sheetData>{body}</sheetData></worksheet>")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = sheet.encode() if item.filename == "xl/worksheets/sheet1.xml" \
                else src.read(item.filename)
            dst.writestr(item.filename, data)
    return out.getvalue()
