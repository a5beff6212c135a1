"""Real spreadsheets nobody here made (../shared/realsheets, sources and licences in its
SOURCES.tsv): each is read as a spreadsheet program shows it, or refused in one sentence
saying what the file really is, in English and Chinese, never with a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.intake.check import intake
from bot.intake.images import ImageResolver
from bot.intake.sheets import CellError, SheetError, read_sheet
from bot.settings import IntakeConfig
from storage.files import FileStore
from templates.loader import load_template
from tests.conftest import ROOT


def corpus() -> Path | None:
    for folder in (os.environ.get("GENBOT_REALSHEETS"), ROOT.parent / "shared" / "realsheets",
                   "/work/shared/realsheets"):
        if folder and (Path(folder) / "SOURCES.tsv").is_file():
            return Path(folder)
    return None


CORPUS = corpus()
pytestmark = pytest.mark.skipif(CORPUS is None and os.environ.get("CI") != "true",
                                reason="../shared/realsheets is not here")
FILES = sorted(p.name for p in CORPUS.iterdir() if p.name not in ("README.md", "SOURCES.tsv")) \
    if CORPUS else []

# Refused as a whole file, with what it really is.
REFUSED = {
    "calamine__empty_sheet.xlsx": "empty_sheet",
    "calamine__errors.xlsx": "header_errors",
    "calamine__issue_594_dos.ods": "too_many_cells",
    "calamine__pass_protected.xlsx": "password_protected",
    "calamine__picture.png": "unsupported_format",
    "calamine__richtext-namespaced.xlsx": "no_rows",
    "calamine__too_small.xls": "plain_text",
    "fastexcel__infer-dtypes-fallback.xlsx": "too_many_rows",  # 140,150 rows, read in full
    "frictionless__implicit-zip.csv": "zip_not_workbook",
    "openpyxl__bigfoot.xlsx": "empty_sheet",
    "openpyxl__null_archive.xlsx": "zip_not_workbook",
    "poi__57893-many-merges.xlsx": "empty_sheet",
    "poi__clusterfuzz-testcase-minimized-XLSX2CSVFuzzer-5636439151607808.xlsx": "corrupt",
    "poi__poc-xmlbomb.xlsx": "xml_entities",
    "poi__protected_passtika.xlsx": "password_protected",
    "poi__xor-encryption-abc.xls": "password_protected",
    "pycalamine__empty_file.xlsx": "empty_file",
    "pycalamine__password.xls": "password_protected",
    "tablib__unknown_value_type.ods": "no_rows",
    "xlrd__biff4_no_format_no_window2.xls": "old_excel",
}
# Read: (header row as numbered in the program, the first headers, the first row's first
# cells), as the program shows them.
READ = {
    "calamine__any_sheets.xlsx": (1, ["1", "2"], [3, 4]),
    "deg__example-hxsec-records.xls": (1, ["交收日期", "成交时间", "业务名称"],
                                       ["20230212", "00:00:00", "银行转证券"]),
    "fastexcel__null-bytes-in-columns-names.xls": (
        3, ["Coefficients of Residual Diagrams Weighting (version 2) - 2019"], ["Day"]),
    "frictionless__issue-811.csv": (1, ["Codice Regione"], None),
    "frictionless__table-with-accents.csv": (1, ["Classement", "Quartier", "Date", "Année"],
                                             ["3 stars", "All", "01-01-13", "2013"]),
    "own__big5_land.csv": (1, ["鄉鎮市區", "交易標的", "土地區段位置建物區段門牌", "總價元"],
                           ["大安區", "房地(土地+建物)"]),
    "poi__testEXCEL_95.xls": (1, ["Sample Excel Worksheet - Numbers and their Squares"], None),
    "sheetjs__ErrorTypes.xlsx": (1, ["Error", "Bang", "Que", "Non"],
                                 ["#NULL!", "#NULL!", "#NULL?", "#NULL"]),
    "tablib__bad_dimensions.xlsx": (1, ["PN", "Qty", "Price"], ["EP00001", 10000, 0.0367]),
    "variant__xls_renamed.xlsx": (1, ["Row Merge", "Row Merge", "Not Merged"], None),
    "variant__zh_alipay.csv": (1, ["货号", "参考图", "提示词", "反向提示词"], ["导出信息："]),
}
# Words of libraries' English that must never appear inside a Chinese reply.
LIBRARY_ENGLISH = ("Cannot", "cannot", "zip file", "File is not", "not found", "Error:",
                   "truncated")
MOJIBAKE = [chr(c) for c in range(0xE000, 0xF900)] + ["\ufffd"]


def template(name: str = "product_main"):
    return load_template(ROOT / "templates" / "shipped" / f"{name}.json")


async def check(tmp_path, name: str, template_name: str = "product_main"):
    settings = IntakeConfig()
    images = ImageResolver(settings, FileStore(tmp_path / "store"),
                           assets_dir=ROOT / "examples" / "assets")
    assert CORPUS is not None
    return await intake(template(template_name), name, (CORPUS / name).read_bytes(),
                        settings=settings, images=images)


def test_the_corpus_is_here_and_every_expectation_names_a_file_in_it():
    assert CORPUS is not None, "../shared/realsheets is missing"
    assert len(FILES) >= 80
    assert set(REFUSED) <= set(FILES) and set(READ) <= set(FILES)


@pytest.mark.parametrize("name", FILES)
async def test_every_real_file_is_read_or_refused_in_plain_words(tmp_path, name):
    result = await check(tmp_path, name)
    en, zh = result.report(), result.report("zh")
    codes = [i.code for i in result.file_issues]
    if name in REFUSED:
        assert codes == [REFUSED[name]], en
        assert len(result.file_issues[0].render().splitlines()) == 1
    else:
        assert codes == [] or set(codes) <= {"missing_column", "missing_column_near"}, en
    for text in (en, zh):
        assert "Traceback" not in text and not any(ch in text for ch in MOJIBAKE), text
    if codes != ["plain_text"]:  # (which quotes the file's own first words)
        assert not any(words in zh for words in LIBRARY_ENGLISH), zh
    if result.file_issues and all(i.code.startswith("missing_column")
                                  for i in result.file_issues):
        assert "缺少“货号”列" in zh  # named as a Chinese sheet heads it, not "sku"


@pytest.mark.parametrize("name", sorted(READ))
def test_files_are_read_as_a_spreadsheet_program_shows_them(name):
    assert CORPUS is not None
    header_row, headers, first = READ[name]
    sheet = read_sheet(name, (CORPUS / name).read_bytes(), max_unpacked_bytes=200 * 2**20)
    assert sheet.header_row == header_row
    assert sheet.headers[:len(headers)] == headers
    if first is not None:
        assert sheet.rows[0][1][:len(first)] == first


def test_a_file_under_another_format_name_is_read_and_the_note_says_so():
    assert CORPUS is not None
    for name, kind in (("variant__xls_renamed.xlsx", "an .xls workbook"),
                       ("deg__example-hxsec-records.xls", "a text table (CSV)")):
        sheet = read_sheet(name, (CORPUS / name).read_bytes(), max_unpacked_bytes=2**27)
        assert sheet.note is not None and str(sheet.note[1]["kind"]) == kind


def test_excel_error_cells_are_named_as_the_cell_shows_them():
    assert CORPUS is not None
    sheet = read_sheet("sheetjs__ErrorTypes.xlsx",
                       (CORPUS / "sheetjs__ErrorTypes.xlsx").read_bytes(),
                       max_unpacked_bytes=2**27)
    shown = {v for _, cells in sheet.rows for v in cells if isinstance(v, CellError)}
    assert {"#NULL!", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#N/A"} <= shown


async def test_an_error_cell_in_a_template_column_is_reported_where_it_is(tmp_path):
    result = await check(tmp_path, "variant__errortypes.xlsx")
    lines = [i.render() for i in result.issues if i.code == "cell_error"]
    assert 'row 2, column "sku": the cell shows #NULL! (an Excel error): fix its formula, ' \
        "or type the value" in lines
    assert any("#N/A" in line for line in lines)
    zh = [i.render("zh") for i in result.issues if i.code == "cell_error"]
    assert "第 2 行，“sku”列：单元格显示 #NULL!（Excel 错误）：请修正公式，或直接填写数值" in zh


async def test_whole_numbers_are_echoed_as_the_cell_shows_them(tmp_path):
    report = (await check(tmp_path, "calamine__any_sheets.xlsx")).report()
    assert '"1", "2"' in report and "1.0" not in report


async def test_control_characters_in_headers_are_shown_escaped(tmp_path):
    report = (await check(tmp_path, "csvkit__test_header_newline.csv")).report()
    assert '"start \\t\\n\\v\\f\\r end"' in report
    assert "\x0b" not in report and "\x0c" not in report


async def test_a_cell_too_long_for_a_file_name_is_a_problem_of_its_cell(tmp_path):
    result = await check(tmp_path, "variant__largecell.csv", "social_thumb")
    assert {i.code for i in result.issues} == {"image_bad_reference"}
    line = result.issues[0].render()
    assert line.startswith('row 2, column "image": "Apart from') and "characters)" in line
    assert len(line) < 300


def test_what_each_refusal_says_in_both_languages():
    assert CORPUS is not None

    def refusal(name: str) -> tuple[str, str]:
        with pytest.raises(SheetError) as e:
            read_sheet(name, (CORPUS / name).read_bytes(), max_unpacked_bytes=2**27)
        return e.value.render(), e.value.render("zh")
    en, zh = refusal("poi__xor-encryption-abc.xls")
    assert en == '"poi__xor-encryption-abc.xls" is password-protected: remove the password ' \
        "and send it again" and "设有密码" in zh
    en, zh = refusal("xlrd__biff4_no_format_no_window2.xls")
    assert "Excel 4.0" in en and "save it as .xlsx" in en and "另存为 .xlsx" in zh
    en, zh = refusal("poi__poc-xmlbomb.xlsx")
    assert "XML entities" in en and "XML 实体" in zh
    en, zh = refusal("openpyxl__null_archive.xlsx")
    assert "zip archive (holding null_file.xlsx)" in en and "压缩包" in zh
    en, zh = refusal("calamine__issue_594_dos.ods")
    assert "999,999,999 rows" in en and "999,999,999 个连续重复的行" in zh
