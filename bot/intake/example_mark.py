"""The mark on genbot's own example sheets: the one kind of sheet whose missing pictures
genbot may draw.

An example sheet (`genbot template example`, chat's `/template`, examples/*.xlsx) names
pictures such as `assets/bottle.png`; sent back without them it should still run, on
genbot's drawings (bot.intake.examples). Any other sheet naming a missing picture is
refused: a person's sheet never runs on a picture they did not send. The mark is a
custom document property naming the template, which Excel, WPS and LibreOffice keep
when the workbook is edited and saved. A CSV has no place for one, so a CSV always needs
its pictures (examples/*.csv have theirs beside them, in examples/assets).
"""

from __future__ import annotations

import io
import zipfile
from typing import Any
from xml.etree import ElementTree

PROPERTY = "genbot example"  # its value: the template the sheet is an example of
CUSTOM_PART = "docProps/custom.xml"
PART_MAX = 64 * 1024  # bytes; openpyxl writes a few hundred
VT = "{http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes}"
CUSTOM = "{http://schemas.openxmlformats.org/officeDocument/2006/custom-properties}"


def mark(book: Any, template: str) -> None:
    """Mark an openpyxl workbook as genbot's example sheet for `template`."""
    from openpyxl.packaging.custom import StringProperty
    book.custom_doc_props.append(StringProperty(name=PROPERTY, value=template))


def example_of(data: bytes) -> str | None:
    """The template an .xlsx package says it is genbot's example sheet for, or None.
    `data` is a package intake has already checked (no entities, no bomb)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            info = z.NameToInfo.get(CUSTOM_PART)
            if info is None or info.file_size > PART_MAX:
                return None
            root = ElementTree.fromstring(z.read(info))
    except (zipfile.BadZipFile, OSError, ValueError, ElementTree.ParseError):
        return None
    for prop in root.iter(f"{CUSTOM}property"):
        if prop.get("name") == PROPERTY:
            return (prop.findtext(f"{VT}lpwstr") or "").strip() or None
    return None
