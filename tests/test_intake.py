"""Spreadsheet intake against a corpus of the sheets people really send, each with its
exact expected outcome."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import aiohappyeyeballs
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from PIL import Image

from bot.intake.check import intake
from bot.intake.images import ImageResolver
from bot.outbound import is_public
from bot.settings import IntakeConfig
from storage.files import FileStore
from templates.loader import load_template, load_templates
from tests.conftest import ROOT
from tests.fakes.sheets import XlsError, csv_bytes, ods, xls, xlsx, zip_bomb

TEMPLATE = {
    "name": "t",
    "params": {
        "prompt": {"type": "text", "required": True, "aliases": ["提示词", "Prompt text"]},
        "seed": {"type": "seed", "aliases": ["种子"]},
        "steps": {"type": "int", "min": 1, "max": 100, "aliases": ["步数"]},
        "sku": {"type": "text", "required": True, "aliases": ["货号"]},
        "ref": {"type": "image", "aliases": ["参考图"]},
    },
    "nodes": {
        "gen": {"op": "generate", "inputs": {"prompt": "$prompt", "model": "sd15",
                                             "seed": "$seed", "steps": "$steps",
                                             "init_image": "$ref"}},
        "out": {"op": "save", "inputs": {"image": "@gen"}},
    },
    "output": "{sku}/{row}.png",
}
HEAD = ["prompt", "seed", "steps", "sku"]


@pytest.fixture
def template(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(TEMPLATE), encoding="utf-8")
    return load_template(path)


@pytest.fixture
def settings():
    return IntakeConfig(max_rows=10_000, max_unpacked_mb=2, max_problems_shown=5,
                        max_image_pixels=4_000_000)


@pytest.fixture
def resolver(tmp_path, settings):
    (tmp_path / "assets").mkdir()
    return ImageResolver(settings, FileStore(tmp_path / "store"), assets_dir=tmp_path / "assets")


async def run(template, filename, data, settings, resolver, **kw):
    return await intake(template, filename, data, settings=settings, images=resolver, **kw)


def prompts(result):
    return [job.workflow["nodes"][0]["inputs"]["prompt"] for job in result.jobs]


# --- encodings, formats, layouts ----------------------------------------------------------

@pytest.mark.parametrize("encoding", ["gbk", "gb18030", "utf-8-sig", "utf-16", "utf-8"])
async def test_csv_encodings_from_the_field(template, settings, resolver, encoding):
    data = csv_bytes([["提示词", "货号"], ["红色连衣裙，白色背景", "裙-01"]], encoding=encoding)
    result = await run(template, "sheet.csv", data, settings, resolver)
    assert result.ok, result.report()
    assert prompts(result) == ["红色连衣裙，白色背景"]
    assert result.jobs[0].workflow["outputs"] == {"out": "裙-01/2.png"}


async def test_delimiters_are_sniffed_and_tsv_is_tab(template, settings, resolver):
    rows = [["prompt", "sku"], ["a, b; c", "X"]]
    for name, delimiter in (("s.csv", ";"), ("s.csv", "\t"), ("s.tsv", "\t"), ("s.csv", "|")):
        result = await run(template, name, csv_bytes(rows, delimiter=delimiter), settings, resolver)
        assert prompts(result) == ["a, b; c"], (name, delimiter, result.report())


@pytest.mark.parametrize("name, make", [("s.ods", ods), ("s.xls", xls), ("s.xlsm", xlsx)])
async def test_ods_xls_and_xlsm(template, settings, resolver, name, make):
    rows = [["prompt", "sku", "steps"], ["from " + name, "O1", 12.0]]
    result = await run(template, name, make(rows), settings, resolver)
    assert result.ok and prompts(result) == ["from " + name], result.report()
    assert result.jobs[0].workflow["params"]["steps"] == 12


async def test_merged_cells_fill_their_range(template, settings, resolver):
    data = xlsx([HEAD, ["shared prompt", None, None, "A"], [None, None, None, "B"]],
                merge=["A2:A3"])
    result = await run(template, "s.xlsx", data, settings, resolver)
    assert result.ok and prompts(result) == ["shared prompt", "shared prompt"]


async def test_formulas_give_their_cached_values(template, settings, resolver):
    data = xlsx([HEAD, ["p", 7, "=10*2", "A"]], cached={"C2": 20})
    result = await run(template, "s.xlsx", data, settings, resolver)
    assert result.ok, result.report()
    assert result.jobs[0].workflow["params"]["steps"] == 20


async def test_42_point_0_is_a_whole_number(template, settings, resolver):
    result = await run(template, "s.xlsx", xlsx([HEAD, ["p", 42.0, 42.0, "A"]]), settings, resolver)
    assert result.jobs[0].workflow["params"]["seed"] == 42
    assert result.jobs[0].workflow["params"]["steps"] == 42


async def test_blank_rows_are_skipped_but_row_numbers_stay_excels(template, settings, resolver):
    rows = [[None], HEAD, ["a", None, None, "A"], [None, None, None, None],
            ["b", None, None, "B"], ["c", None, "lots", "C"]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, resolver, skip_invalid=True)
    assert [job.row for job in result.jobs] == [3, 5]
    assert [i.render() for i in result.issues] == [
        'row 6, column "steps": "lots" is not a whole number']


@pytest.mark.parametrize("nasty", [
    'he said "hi"', "two\nlines", '"}]', "{x}", "$x", "$$", "@gen", "\\", "🎨🖼️ 中文 ＡＢＣ",
    "x" * 5000, "{{", "}",
])
async def test_values_pass_through_unchanged(template, settings, resolver, nasty):
    for name, data in (("s.xlsx", xlsx([HEAD, [nasty, None, None, "A"]])),
                       ("s.csv", csv_bytes([HEAD, [nasty, None, None, "A"]]))):
        result = await run(template, name, data, settings, resolver)
        assert prompts(result) == [nasty], name
        stored = json.loads(json.dumps(result.jobs[0].workflow))
        assert stored["params"]["prompt"] == nasty


async def test_headers_match_by_alias_case_spaces_and_width(template, settings, resolver):
    data = xlsx([["  ＰＲＯＭＰＴ ", "货号", "步数"], ["p", "A", 5]])
    result = await run(template, "s.xlsx", data, settings, resolver)
    assert result.ok and result.jobs[0].workflow["params"]["steps"] == 5


async def test_misspelled_header_is_named_with_a_suggestion(template, settings, resolver):
    data = xlsx([["promt", "sku", "notes"], ["p", "A", "x"]])
    result = await run(template, "s.xlsx", data, settings, resolver)
    assert not result.jobs
    assert [i.render() for i in result.file_issues] == [
        'no column for "prompt" — is "promt" meant to be it?']
    assert result.unused_columns == [("promt", "prompt"), ("notes", None)]
    report = result.report()
    assert 'columns not used by t: "promt" — did you mean "prompt"?, "notes"' in report
    assert report.endswith("s.xlsx: nothing was queued.")
    zh = result.report("zh")
    assert "缺少“提示词”列——“promt”是不是这一列？" in zh and "未提交任何任务" in zh


async def test_extra_columns_are_reported_once_and_usable_in_text(tmp_path, settings, resolver):
    spec = json.loads(json.dumps(TEMPLATE))
    spec["nodes"]["gen"]["inputs"]["prompt"] = "{prompt} for {brand}"
    (tmp_path / "t.json").write_text(json.dumps(spec))
    t = load_template(tmp_path / "t.json")
    data = xlsx([["prompt", "sku", "Brand", "comment"], ["bag", "A", "Acme", "x"],
                 ["shoe", "B", "Zed", "y"]])
    result = await run(t, "s.xlsx", data, settings, resolver)
    assert prompts(result) == ["bag for Acme", "shoe for Zed"]
    assert result.unused_columns == [("comment", None)]
    missing = await run(t, "s.xlsx", xlsx([["prompt", "sku"], ["bag", "A"]]), settings, resolver)
    assert [i.render() for i in missing.file_issues] == ['no column for "brand"']


async def test_two_columns_for_one_parameter(template, settings, resolver):
    data = xlsx([["prompt", "提示词", "sku"], ["a", "b", "A"]])
    result = await run(template, "s.xlsx", data, settings, resolver)
    assert [i.render() for i in result.file_issues] == [
        'columns "prompt", "提示词" all set "prompt": keep one']


# --- validation of every row, and the report ------------------------------------------------

async def test_all_or_nothing_and_the_report(template, settings, resolver):
    rows = [HEAD] + [["p", "abc", None, f"S{i}"] for i in range(28)] + [["ok", 1, 2, "Z"]]
    result = await run(template, "big.xlsx", xlsx(rows), settings, resolver)
    assert result.jobs == [] and result.rows == 29 and result.bad_rows == 28
    lines = result.report(max_shown=settings.max_problems_shown).splitlines()
    assert lines[0] == "big.xlsx: 28 of 29 rows have problems; nothing was queued."
    assert lines[1] == 'row 2, column "seed": "abc" is not a whole number'
    assert len(lines) == 1 + 5 + 1 and lines[-1] == "…and 23 more"
    zh = result.report("zh", max_shown=5).splitlines()
    assert zh[0] == "big.xlsx：29 行中有 28 行有问题，未提交任何任务。"
    assert zh[1] == "第 2 行，“seed”列：“abc”不是整数" and zh[-1] == "……另有 23 处"


async def test_skip_invalid_queues_the_valid_rows(template, settings, resolver):
    rows = [HEAD, ["a", None, None, "A"], ["b", None, 500, "B"], ["", None, None, "C"]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, resolver, skip_invalid=True)
    assert [job.row for job in result.jobs] == [2]
    assert result.report(skip_invalid=True).splitlines() == [
        "s.xlsx: 2 of 3 rows have problems and are skipped; rows going ahead: 1.",
        'row 3, column "steps": 500 is more than 100',
        'row 4, column "prompt": required, but empty']


async def test_seeds_left_empty_are_drawn_and_stored(template, settings, resolver):
    result = await run(template, "s.csv",
                       csv_bytes([HEAD, ["a", "", "", "A"], ["b", "9", "", "B"]]),
                       settings, resolver)
    seeds = [job.workflow["params"]["seed"] for job in result.jobs]
    assert isinstance(seeds[0], int) and seeds[1] == 9
    assert result.jobs[0].workflow["nodes"][0]["inputs"]["seed"] == seeds[0]


async def test_path_traversal_in_output_names(template, settings, resolver):
    rows = [HEAD, ["a", None, None, "../../etc"], ["b", None, None, "C:\\Windows"],
            ["c", None, None, "CON"], ["d", None, None, "fine"], ["e", None, None, "fine"]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, resolver, skip_invalid=True)
    assert [i.render() for i in result.issues] == [
        'row 2: output name "../../etc/2.png" leaves the batch folder (..)',
        'row 3: output name "C:\\Windows/3.png" starts with a drive letter',
        'row 4: output name "CON/4.png": "CON" is a reserved device name on Windows']
    assert [job.row for job in result.jobs] == [5, 6]


async def test_duplicate_output_names_across_rows(tmp_path, settings, resolver):
    spec = json.loads(json.dumps(TEMPLATE))
    spec["output"] = "{sku}.png"
    (tmp_path / "t.json").write_text(json.dumps(spec))
    t = load_template(tmp_path / "t.json")
    rows = [HEAD, ["a", None, None, "A"], ["b", None, None, "A"]]
    result = await run(t, "s.xlsx", xlsx(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        'row 3: output name "A.png" is already used by row 2']


# --- files that are not what they claim ------------------------------------------------------

async def test_zip_bomb_is_refused_before_parsing(template, settings, resolver):
    data = zip_bomb([HEAD, ["a", None, None, "A"]], unpacked_bytes=8 * 2**20)
    assert len(data) < 100_000
    result = await run(template, "bomb.xlsx", data, settings, resolver)
    assert [i.code for i in result.file_issues] == ["zip_bomb"]
    assert result.report().startswith('"bomb.xlsx" unpacks to 8 MB; the limit is 2 MB')


async def test_truncated_xlsx(template, settings, resolver):
    data = xlsx([HEAD, ["a", None, None, "A"]])
    result = await run(template, "cut.xlsx", data[: len(data) // 2], settings, resolver)
    assert [i.code for i in result.file_issues] == ["corrupt"]
    assert result.report().startswith('"cut.xlsx" cannot be read as a spreadsheet')


async def test_password_protected_xlsx(template, settings, resolver):
    data = xlsx([HEAD, ["a", None, None, "A"]], password="secret")
    result = await run(template, "locked.xlsx", data, settings, resolver)
    assert [i.render() for i in result.file_issues] == [
        '"locked.xlsx" is password-protected: remove the password and send it again']


async def test_a_csv_that_is_really_an_xlsx_is_read_as_one_and_says_so(template, settings,
                                                                        resolver):
    result = await run(template, "sheet.csv", xlsx([HEAD, ["a cat", None, None, "S1"]]),
                       settings, resolver)
    assert result.ok and [i.code for i in result.notes] == ["wrong_extension"]
    assert 'note: "sheet.csv" is really an .xlsx workbook; it was read as one' \
        in result.report()
    assert "实际上是 .xlsx 工作簿" in result.report("zh")


async def test_too_many_rows(template, settings, resolver):
    rows = [HEAD] + [["p", None, None, f"S{i}"] for i in range(10_001)]
    result = await run(template, "huge.csv", csv_bytes(rows), settings, resolver)
    assert [i.render() for i in result.file_issues] == [
        '"huge.csv" has 10,001 rows; one submission may have 10,000']
    assert result.jobs == []


MEMORY_PROBE = """
import asyncio, resource, sys
from pathlib import Path
from bot.intake.check import intake
from bot.intake.images import ImageResolver
from bot.settings import IntakeConfig
from storage.files import FileStore
from templates.loader import load_templates
path = Path(sys.argv[1])
data = path.read_bytes()
template = load_templates(Path(sys.argv[2]))[0]["product_main"]
settings = IntakeConfig(max_file_mb=100, max_unpacked_mb=1000)
images = ImageResolver(settings, FileStore(path.parent / "store"), assets_dir=path.parent)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = asyncio.run(intake(template, path.name, data, settings=settings, images=images))
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(f"{grew:.0f}")
print(result.report())
"""


@pytest.mark.parametrize("kind", ["csv", "xlsx"])
def test_a_million_rows_are_counted_and_refused_without_being_held(tmp_path, kind):
    """Reading stops keeping rows at the limit and only counts the rest: the service's
    memory grows by tens of MB, not the half GB a million rows held whole took."""
    import subprocess

    from tests.conftest import PYTHON, python_env
    from tests.fakes.sheets import long_xlsx
    head = ["sku", "product_image", "prompt"]
    path = tmp_path / f"million.{kind}"
    if kind == "csv":
        path.write_bytes(("sku,product_image,prompt\n" + "".join(
            f"S{i},bottle.png,a prompt {i}\n" for i in range(1_000_000))).encode())
    else:
        path.write_bytes(long_xlsx(head, 1_000_000))
    done = subprocess.run([PYTHON, "-c", MEMORY_PROBE, str(path),
                           str(ROOT / "templates" / "shipped")], capture_output=True,
                          text=True, env=python_env(), timeout=240)
    assert done.returncode == 0, done.stderr
    grew, report = done.stdout.split("\n", 1)
    assert f'"million.{kind}" has 1,000,000 rows; one submission may have 10,000' in report
    assert int(grew) < 150, f"{grew} MB"


async def test_a_cell_past_the_character_limit_is_named_by_row_and_column(template, settings,
                                                                          resolver):
    rows = [HEAD, ["p" * 50_000, None, None, "S1"], ["fine", None, None, "S2"]]
    result = await run(template, "long.csv", csv_bytes(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        'row 2, column "prompt": 50,000 characters; a cell may hold 10,000 '
        "([intake] max_cell_chars)"]
    assert result.jobs == []


async def test_a_row_asking_for_a_gigapixel_is_refused_before_it_is_queued(tmp_path, resolver,
                                                                           settings):
    template = load_templates(ROOT / "templates" / "shipped")[0]["product_main"]
    (tmp_path / "assets" / "bottle.png").write_bytes(_png())  # the fixture's assets folder
    rows = [["sku", "product_image", "prompt", "size", "upscale"],
            ["A", "bottle.png", "ok", "1024x1024", "2"],
            ["B", "bottle.png", "huge", "8192x8192", "4"]]
    result = await run(template, "big.csv", csv_bytes(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        "row 3: asks for a 32768x32768 image (1,074 megapixels); the limit is 67 megapixels "
        "([intake] max_output_pixels): ask for a smaller size or less upscaling"]
    assert "要求生成 32768x32768 的图片" in result.report("zh")
    small = IntakeConfig(max_output_pixels=1024 * 1024)
    result = await intake(template, "big.csv", csv_bytes(rows[:2]), settings=small,
                          images=resolver)
    assert [i.code for i in result.issues] == ["image_too_large"]  # 2048x2048 after 2x


@pytest.mark.parametrize("sku", ["contact", "CONTACT"])
async def test_a_row_cannot_take_the_name_of_the_batchs_own_files(tmp_path, settings, resolver,
                                                                  sku):
    (tmp_path / "flat").mkdir()
    path = tmp_path / "flat" / "t.json"
    path.write_text(json.dumps({**TEMPLATE, "output": "{sku}.png"}), encoding="utf-8")
    template = load_template(path)
    rows = [HEAD, ["a", None, None, "ok"], ["b", None, None, sku]]
    result = await run(template, "s.csv", csv_bytes(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        f'row 3: output name "{sku}.png" is the batch\'s own contact.png, which would '
        "overwrite this row's image: change the value that names it"]


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 64), "white").save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("name, data, code", [
    ("notes.pdf", b"%PDF-1.4", "unsupported_format"),
    ("empty.csv", b"", "empty_file"),
    ("blank.csv", b"\r\n,,\r\n", "empty_sheet"),
    ("header.csv", b"prompt,sku\r\n", "no_rows"),
    ("binary.csv", b"\x00\x01\x02" * 10, "not_a_sheet"),
    ("broken.xlsx", b"not a zip at all", "plain_text"),
    ("cut.xlsx", b"PK\x03\x04\x14\x00\x00", "corrupt"),
])
async def test_other_unreadable_files(template, settings, resolver, name, data, code):
    result = await run(template, name, data, settings, resolver)
    assert [i.code for i in result.file_issues] == [code]
    assert "Traceback" not in result.report()


async def test_file_size_limit(template, resolver):
    settings = IntakeConfig(max_file_mb=0.01)
    data = csv_bytes([HEAD] + [["p" * 100, None, None, "A"]] * 200)
    result = await run(template, "s.csv", data, settings, resolver)
    assert [i.code for i in result.file_issues] == ["file_too_big"]


# --- images ----------------------------------------------------------------------------------

def png(mode="RGB", size=(32, 24), color=(200, 10, 10)) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color).save(out, format="PNG")
    return out.getvalue()


async def test_image_cells_resolve_to_stored_rgb_pngs(tmp_path, template, settings):
    (tmp_path / "assets" / "pics").mkdir(parents=True)
    (tmp_path / "assets" / "pics" / "logo.png").write_bytes(png("RGBA", color=(0, 0, 255, 0)))
    sent = {"shot.jpg": png()}

    async def attachments(name):
        return sent.get(name)
    store = FileStore(tmp_path / "store")
    images = ImageResolver(settings, store, assets_dir=tmp_path / "assets", attachments=attachments)
    rows = [HEAD + ["ref"]] + [["a", None, None, f"A{i}", "shot.jpg"] for i in range(50)] + \
        [["b", None, None, "B", "pics/logo.png"]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, images)
    assert result.ok, result.report()
    paths = {job.workflow["params"]["ref"] for job in result.jobs}
    assert len(paths) == 2 and all(p.startswith("inputs/") and p.endswith(".png") for p in paths)
    stored = sorted(p.name for p in (tmp_path / "store" / "inputs").iterdir())
    assert len(stored) == 3  # stored once each, and the transparent logo's mask beside it
    assert sum(name.endswith(".mask.png") for name in stored) == 1
    logo = Image.open(store.path(result.jobs[-1].workflow["params"]["ref"]))
    assert logo.mode == "RGB" and logo.getpixel((0, 0)) == (255, 255, 255)  # transparent -> white
    assert result.jobs[0].workflow["nodes"][0]["inputs"]["init_image"] == \
        result.jobs[0].workflow["params"]["ref"]
    # ...and as the sheet named them, for the results sheet to show
    assert [j.workflow["named"] for j in (result.jobs[0], result.jobs[-1])] == [
        {"ref": "shot.jpg"}, {"ref": "pics/logo.png"}]


async def test_an_upright_opaque_rgb_png_is_stored_as_sent_and_a_damaged_one_refused(
        tmp_path, template, settings, resolver):
    """Issue 42, item 13: decoding and re-encoding such a picture would change nothing but
    the time a submission takes; it is still decoded whole once, so a cut file is refused."""
    from PIL.PngImagePlugin import PngInfo
    said = PngInfo()
    said.add_text("Author", "the team")  # kept: the file is the one sent
    out = io.BytesIO()
    Image.new("RGB", (300, 200), (10, 200, 30)).save(out, format="PNG", pnginfo=said)
    whole = out.getvalue()
    (tmp_path / "assets" / "whole.png").write_bytes(whole)
    (tmp_path / "assets" / "cut.png").write_bytes(whole[:len(whole) // 2])
    rows = [HEAD + ["ref"], ["a", None, None, "A", "whole.png"], ["b", None, None, "B", "cut.png"]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, resolver, skip_invalid=True)
    assert [(i.row, i.code) for i in result.issues] == [(3, "not_an_image")]
    assert resolver.store.path(result.jobs[0].workflow["params"]["ref"]).read_bytes() == whole


@pytest.mark.parametrize("ref, code", [
    ("../outside.png", "image_bad_reference"), ("/etc/passwd", "image_bad_reference"),
    ("C:\\pics\\a.png", "image_bad_reference"), ("file:///etc/passwd", "image_bad_reference"),
    ("ftp://example.com/a.png", "image_bad_reference"), ("missing.png", "image_not_found"),
    ("notes.txt", "not_an_image"), ("huge.png", "image_too_many_pixels"),
    ("https://cdn.example.com/a.png", "image_url_not_allowed"),
])
async def test_image_references_that_are_refused(tmp_path, template, settings, resolver, ref, code):
    (tmp_path / "outside.png").write_bytes(png())
    (tmp_path / "assets" / "notes.txt").write_text("hello")
    (tmp_path / "assets" / "huge.png").write_bytes(png(size=(2100, 2000)))
    rows = [HEAD + ["ref"], ["a", None, None, "A", ref]]
    result = await run(template, "s.xlsx", xlsx(rows), settings, resolver)
    assert [i.code for i in result.issues] == [code]
    assert result.issues[0].column == "ref" and result.issues[0].row == 2


@pytest.fixture
async def image_server():
    async def picture(request):
        return web.Response(body=png(), content_type="image/png")

    async def away(request):
        raise web.HTTPFound("http://elsewhere.test/a.png")

    async def gone(request):
        return web.Response(status=404)
    app = web.Application()
    app.router.add_get("/a.png", picture)
    app.router.add_get("/away", away)
    app.router.add_get("/gone.png", gone)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://localhost:{site._server.sockets[0].getsockname()[1]}"
    await runner.cleanup()


async def test_allow_listed_downloads(tmp_path, template, image_server):
    def resolver_with(**kw):
        s = IntakeConfig(url_allowlist=("localhost",), **kw)
        return s, ImageResolver(s, FileStore(tmp_path / "store"), assets_dir=tmp_path)

    async def codes(settings, images, path):
        rows = [HEAD + ["ref"], ["a", None, None, "A", f"{image_server}{path}"]]
        result = await run(template, "s.xlsx", xlsx(rows), settings, images)
        return [i.code for i in result.issues], result

    # localhost is loopback: refused unless private addresses are allowed.
    assert (await codes(*resolver_with(), "/a.png"))[0] == ["image_private_address"]
    settings, images = resolver_with(allow_private_urls=True)
    found, result = await codes(settings, images, "/a.png")
    assert found == [] and result.jobs[0].workflow["params"]["ref"].startswith("inputs/")
    assert (await codes(settings, images, "/gone.png"))[0] == ["image_download_failed"]
    # A redirect is checked like the first request: elsewhere.test is not allow-listed.
    assert (await codes(settings, images, "/away"))[0] == ["image_url_not_allowed"]
    settings, images = resolver_with(allow_private_urls=True, max_image_mb=0.00001)
    assert (await codes(settings, images, "/a.png"))[0] == ["image_too_big"]


# --- DNS rebinding: the connection goes to exactly the address that was checked -------------

PUBLIC = "93.184.216.34"


class ScriptedDNS(AbstractResolver):
    """Answers each name from a script, the next answer on each call (the last one repeats):
    a DNS server that rebinds. Records every name it was asked."""

    def __init__(self, script: dict[str, list[list[str]]]):
        self.script, self.asked = script, []

    async def resolve(self, host, port=0, family=socket.AF_INET) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.script:
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: no such name")
        answers = self.script[host]
        addresses = answers[min(self.asked.count(host), len(answers)) - 1]
        return [ResolveResult(hostname=host, host=a, port=port, proto=0,
                              family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV)
                for a in addresses]

    async def close(self) -> None:
        pass


@pytest.fixture
def internet(monkeypatch):
    """The connector's sockets, faked at the public edge only: a connection to a public address
    in `routes` lands on that loopback port (a stand-in for the public server); any other public
    address is refused at once; loopback connects for real. `dialed` records every address the
    connector was handed, so a test sees what it really connected to."""
    real = aiohappyeyeballs.start_connection
    routes: dict[str, int] = {}
    dialed: list[str] = []

    async def start_connection(addr_infos, **kw):
        infos = []
        for family, kind, proto, name, sockaddr in addr_infos:
            dialed.append(sockaddr[0])
            if not is_public(sockaddr[0]):
                infos.append((family, kind, proto, name, sockaddr))
            elif sockaddr[0] in routes:
                infos.append((socket.AF_INET, kind, proto, name,
                              ("127.0.0.1", routes[sockaddr[0]])))
        if not infos:
            raise ConnectionRefusedError(f"{dialed[-1]} refused (test network)")
        return await real(infos, **kw)
    monkeypatch.setattr(aiohappyeyeballs, "start_connection", start_connection)
    return routes, dialed


async def serve(routes):
    """A loopback server for `routes` (path -> handler) that counts the requests it gets."""
    seen: list[str] = []

    @web.middleware
    async def count(request, handler):
        seen.append(request.path)
        return await handler(request)
    app = web.Application(middlewares=[count])
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1], seen


@pytest.fixture
async def private_server():
    """The loopback server a rebinding name would smuggle a download into."""
    async def picture(request):
        return web.Response(body=png(), content_type="image/png")
    runner, port, seen = await serve({"/a.png": picture})
    yield port, seen
    await runner.cleanup()


async def fetch(tmp_path, template, ref, dns, **settings):
    """The issues of a one-row sheet whose image cell is `ref`, fetched through `dns`."""
    s = IntakeConfig(**settings)
    images = ImageResolver(s, FileStore(tmp_path / "store"), assets_dir=tmp_path, dns=dns,
                           connect_timeout=1)
    rows = [HEAD + ["ref"], ["a", None, None, "A", ref]]
    return (await run(template, "s.xlsx", xlsx(rows), s, images)).issues


async def test_a_name_that_rebinds_to_loopback_is_connected_where_it_was_checked(
        tmp_path, template, internet, private_server):
    routes, dialed = internet
    port, seen = private_server
    dns = ScriptedDNS({"cdn.test": [[PUBLIC], ["127.0.0.1"]]})
    issues = await fetch(tmp_path, template, f"http://cdn.test:{port}/a.png", dns,
                         url_allowlist=("cdn.test",))
    # The checked public address was the one dialled (it refuses here); loopback never was.
    assert [i.code for i in issues] == ["image_download_failed"]
    assert dns.asked == ["cdn.test"] and dialed == [PUBLIC] and seen == []


@pytest.mark.parametrize("answer", [[PUBLIC, "127.0.0.1"], ["::ffff:127.0.0.1"],
                                    ["10.0.0.7"], ["169.254.169.254"], ["::1", "2606:2800::1"]])
async def test_an_answer_with_any_private_address_is_refused_whole(
        tmp_path, template, internet, private_server, answer):
    routes, dialed = internet
    port, seen = private_server
    dns = ScriptedDNS({"cdn.test": [answer]})
    issues = await fetch(tmp_path, template, f"http://cdn.test:{port}/a.png", dns,
                         url_allowlist=("cdn.test",))
    assert [(i.code, i.details["host"]) for i in issues] == [("image_private_address", "cdn.test")]
    assert dns.asked == ["cdn.test"] and dialed == [] and seen == []


@pytest.mark.parametrize("host", ["127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"])
async def test_ip_literal_urls_are_checked_like_names(tmp_path, template, internet,
                                                      private_server, host):
    routes, dialed = internet
    port, seen = private_server
    dns = ScriptedDNS({})
    issues = await fetch(tmp_path, template, f"http://{host}:{port}/a.png", dns,
                         url_allowlist=(host.strip("[]"),))
    assert [i.code for i in issues] == ["image_private_address"]
    assert dns.asked == [] and dialed == [] and seen == []


@pytest.mark.parametrize("address, public", [
    (PUBLIC, True), ("2606:2800:220:1::1", True), ("::ffff:93.184.216.34", True),
    ("127.0.0.1", False), ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False),
    ("::127.0.0.1", False), ("64:ff9b::7f00:1", False), ("::1", False), ("fe80::1%eth0", False),
    ("fd00::1", False), ("100.64.0.1", False), ("224.0.0.1", False), ("localhost", False),
])
def test_which_addresses_are_public(address, public):
    """An IPv6 address that carries an IPv4 one is judged by the IPv4 one."""
    assert is_public(address) is public

async def test_a_redirect_to_a_name_resolving_to_loopback_is_refused_at_that_hop(
        tmp_path, template, internet, private_server):
    routes, dialed = internet
    port, seen = private_server

    async def hop(request):
        raise web.HTTPFound(f"http://inner.test:{port}/a.png")
    runner, public_port, public_seen = await serve({"/hop": hop})
    routes[PUBLIC] = public_port
    try:
        dns = ScriptedDNS({"cdn.test": [[PUBLIC]], "inner.test": [["127.0.0.1"]]})
        issues = await fetch(tmp_path, template, f"http://cdn.test:{public_port}/hop", dns,
                             url_allowlist=("cdn.test", "inner.test"))
    finally:
        await runner.cleanup()
    assert [(i.code, i.details["host"]) for i in issues] == [("image_private_address",
                                                              "inner.test")]
    assert public_seen == ["/hop"] and seen == []  # the first hop ran; the second never did
    assert dns.asked == ["cdn.test", "inner.test"] and dialed == [PUBLIC]


async def test_allow_private_urls_lets_a_loopback_name_download(tmp_path, template, internet,
                                                                private_server):
    routes, dialed = internet
    port, seen = private_server
    dns = ScriptedDNS({"inner.test": [["127.0.0.1"]]})
    issues = await fetch(tmp_path, template, f"http://inner.test:{port}/a.png", dns,
                         url_allowlist=("inner.test",), allow_private_urls=True)
    assert issues == [] and seen == ["/a.png"]
    assert dns.asked == ["inner.test"] and dialed == ["127.0.0.1"]


# --- the shipped templates and their example sheets --------------------------------------

@pytest.mark.parametrize("name", ["product_main", "material_swap", "social_thumb"])
@pytest.mark.parametrize("ext", ["xlsx", "csv"])
async def test_every_example_sheet_validates(tmp_path, name, ext):
    templates, errors = load_templates(ROOT / "templates" / "shipped")
    assert not errors
    sheet = ROOT / "examples" / f"{name}.{ext}"
    from bot.intake.images import folder_attachments
    settings = IntakeConfig()
    images = ImageResolver(settings, FileStore(tmp_path), assets_dir=tmp_path,
                           attachments=folder_attachments(sheet.parent))
    result = await intake(templates[name], sheet.name, sheet.read_bytes(), settings=settings,
                          images=images)
    assert result.ok, result.report()
    assert len(result.jobs) == 2 and not result.unused_columns


def test_one_example_sheet_has_chinese_headers():
    text = (ROOT / "examples" / "social_thumb.csv").read_text(encoding="utf-8-sig")
    assert text.startswith("图片,标题,比例")


@pytest.mark.parametrize("name, make, na, div0", [
    ("e.xlsx", xlsx, "#N/A", "#DIV/0!"),
    ("e.xls", lambda rows: xls(rows, hidden_first=True), XlsError(0x2A), XlsError(0x07))])
async def test_an_excel_error_cell_is_its_cells_problem_never_an_empty_value(
        template, settings, resolver, name, make, na, div0):
    rows = [HEAD, ["a cat", None, div0, "S1"], [na, None, 5, "S2"], ["a dog", None, 5, "S3"]]
    result = await run(template, name, make(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        'row 2, column "steps": the cell shows #DIV/0! (an Excel error): fix its formula, or '
        "type the value",  # not silently the default
        'row 3, column "prompt": the cell shows #N/A (an Excel error): fix its formula, or '
        "type the value"]  # not "required, but empty"
    assert "单元格显示 #N/A（Excel 错误）" in result.report("zh")


async def test_a_header_row_of_errors_says_so(template, settings, resolver):
    result = await run(template, "h.xlsx", xlsx([["#REF!", "#REF!"], ["a", "b"]]), settings,
                       resolver)
    assert [i.render() for i in result.file_issues] == [
        '"h.xlsx": row 1, where the column names belong, shows only Excel errors (#REF!): '
        "fix the formulas, or type the names"]


async def test_a_title_block_above_the_header_is_skipped(template, settings, resolver):
    rows = [["Export of 2026-12-03"], ["Account: 1234"], [], HEAD, ["a cat", 7, 5, "S1"]]
    result = await run(template, "bank.xlsx", xlsx(rows), settings, resolver)
    assert result.ok and [j.row for j in result.jobs] == [5]


async def test_numbers_are_echoed_as_the_cell_shows_them(template, settings, resolver):
    rows = [HEAD, ["a cat", None, 3985734.0, 87103.0]]
    result = await run(template, "n.xlsx", xlsx(rows), settings, resolver)
    assert [i.render() for i in result.issues] == [
        'row 2, column "steps": 3985734 is more than 100']
    assert "87103.0" not in result.report()


@pytest.mark.parametrize("data, encoding, header", [
    ("鄉鎮市區,總價元\n大安區,28500000\n", "big5", "鄉鎮市區"),
    ("Année,Unità,prompt\nélevé,città,x\n", "cp1252", "Année"),
    ("货号,提示词\nA1,一只猫\n", "gb18030", "货号"),
])
async def test_non_utf8_text_is_read_in_its_own_encoding(data, encoding, header):
    from bot.intake.sheets import read_sheet
    sheet = read_sheet("s.csv", data.encode(encoding), max_unpacked_bytes=2**20)
    assert sheet.headers[0] == header


def test_text_in_no_encoding_that_reads_cleanly_is_refused_naming_what_was_tried():
    from bot.intake.sheets import SheetError, read_sheet
    noise = bytes(range(0x80, 0x100)) * 40 + b",\n" + bytes(range(0xFF, 0x7F, -1)) * 40
    with pytest.raises(SheetError) as e:
        read_sheet("s.csv", noise, max_unpacked_bytes=2**20)
    assert e.value.code == "bad_encoding" and "GB18030/GBK, Big5" in e.value.render()
    assert "CSV UTF-8" in e.value.render("zh")


def test_any_cell_text_is_a_safe_name_or_none():
    from bot.intake.images import relative_name
    assert relative_name("a/" + "y" * 300 + ".png") is None
    assert relative_name("bell\x07.png") is None and relative_name("x" * 255) == "x" * 255


async def test_a_picture_saved_with_a_spreadsheet_name_says_what_it_is(template, settings,
                                                                        resolver):
    result = await run(template, "photo.xlsx", png(), settings, resolver)
    assert [i.render() for i in result.file_issues] == [
        '"photo.xlsx" is a PNG image, not a spreadsheet: send the .xlsx, .xls, .ods or .csv '
        "file itself"]
    assert "PNG 图片" in result.report("zh") and "zip" not in result.report()


async def test_a_row_naming_a_model_that_cannot_run_it_is_refused_at_its_cell(tmp_path):
    """A model chosen by a text column (which the template's load cannot check) is checked
    row by row against its family (templates.families): an edit on FLUX.1, a negative
    prompt to FLUX.1 Kontext, two pictures to a model that edits with one — each refused
    at the cell that asked, in English and Chinese, nothing queued; the rows that can run
    pass (Qwen-Image-Edit takes the second picture, a model of no known family is the
    executor's to refuse)."""
    from bot.intake.check import SheetRows, check_sheet
    from storage import config as cfg
    path = tmp_path / "t.json"
    path.write_text(json.dumps({
        "name": "t",
        "params": {"sku": {"type": "text"}, "model": {"type": "text"},
                   "picture": {"type": "image"}, "second": {"type": "image"},
                   "instruction": {"type": "text"}, "avoid": {"type": "text"}},
        "nodes": {"edit": {"op": "edit", "inputs": {
                      "image": "$picture", "image_2": "$second", "instruction": "$instruction",
                      "model": "$model", "seed": 1, "negative": "$avoid"}},
                  "out": {"op": "save", "inputs": {"image": "@edit"}}},
        "output": "{sku}/{row}.png"}), encoding="utf-8")
    template = load_template(path)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "bottle.png").write_bytes(_png())
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path)},
                            "intake": {"assets_dir": str(tmp_path / "assets")},
                            "models": {"own": str(tmp_path / "nowhere")}})
    head = ["sku", "Model", "picture", "second", "instruction", "avoid"]
    rows = [head, ["A", "flux_kontext", "bottle.png", "", "matte black", ""],
            ["B", "flux", "bottle.png", "", "matte black", ""],
            ["C", "flux_kontext", "bottle.png", "", "matte black", "blur"],
            ["D", "flux_kontext", "bottle.png", "bottle.png", "matte black", ""],
            ["E", "qwen_image_edit", "bottle.png", "bottle.png", "把背景换成海滩", "模糊"],
            ["F", "own", "bottle.png", "", "matte black", ""]]
    report = await check_sheet(template, SheetRows([dict(zip(head, r)) for r in rows[1:]]),
                               config=config,
                               store=FileStore(tmp_path / "store"), skip_invalid=True)
    assert [i.render() for i in report.issues] == [
        'row 3, column "Model": model "flux" is FLUX.1 (flux), which genbot runs for img2img, '
        "inpaint, txt2img, not edit: name a model that does",
        'row 4, column "avoid": model "flux_kontext" is FLUX.1 Kontext (flux_kontext), which '
        "reads no negative prompt: leave it empty (say what to avoid in the prompt instead)",
        'row 5, column "second": model "flux_kontext" is FLUX.1 Kontext (flux_kontext): it '
        "edits with 1 picture at most, not 2"]
    assert [job.row for job in report.jobs] == [2, 6, 7]
    assert "模型“flux”是 FLUX.1（flux），genbot 用它做 img2img, inpaint, txt2img，不能做 edit" in \
        report.report("zh")


def _tokenizer(folder: Path, *, ends: bool) -> None:
    """A model's tokenizer.json made here: one token a word (and CLIP's start and end
    tokens, `ends`), read by the same tokenizers library the published ones are."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    words = {"[UNK]": 0, "<s>": 1, "</s>": 2, "word": 3}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if ends:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))


async def test_a_prompt_longer_than_its_model_reads_is_refused_at_its_cell(tmp_path):
    """The pipelines cut a prompt off at their text encoder's length without a word
    (CLIP: 77 tokens with its start and end; FLUX.1's T5: 512): counted with the model
    folder's own tokenizer.json, a longer one is refused at its cell in en/zh, nothing
    queued. A model whose tokenizer cannot be read here is the executor's to run."""
    from bot.intake.check import SheetRows, check_sheet
    from storage import config as cfg
    path = tmp_path / "t.json"
    path.write_text(json.dumps({
        "name": "t", "params": {"model": {"type": "text"}, "prompt": {"type": "text"}},
        "nodes": {"gen": {"op": "generate", "inputs": {
                      "prompt": "$prompt", "model": "$model", "seed": 1}},
                  "out": {"op": "save", "inputs": {"image": "@gen"}}},
        "output": "{row}.png"}), encoding="utf-8")
    for name, saved_as, tokenizer, ends in [("sd", "StableDiffusionPipeline", "tokenizer", True),
                                            ("dev", "FluxPipeline", "tokenizer_2", False),
                                            ("bare", "FluxPipeline", None, False)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model_index.json").write_text(json.dumps({"_class_name": saved_as}))
        if tokenizer:
            _tokenizer(tmp_path / name / tokenizer, ends=ends)
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path)}, "models": {
        name: str(tmp_path / name) for name in ("sd", "dev", "bare")}})
    rows = [("sd", 75), ("sd", 76), ("dev", 512), ("dev", 513), ("bare", 2000)]
    report = await check_sheet(load_template(path), SheetRows([
        {"model": model, "prompt": " ".join(["word"] * n)} for model, n in rows]),
        config=config, store=FileStore(tmp_path / "store"), skip_invalid=True)
    assert [i.render() for i in report.issues] == [
        'row 3, column "prompt": the prompt is 78 tokens long, but model "sd" (Stable Diffusion '
        "1.5) reads only the first 77: the rest would be cut off without a word. Shorten it",
        'row 5, column "prompt": the prompt is 513 tokens long, but model "dev" (FLUX.1) reads '
        "only the first 512: the rest would be cut off without a word. Shorten it"]
    assert [job.row for job in report.jobs] == [2, 4, 6]
    assert "提示词有 513 个 token，但模型“dev”（FLUX.1）只读前 512 个" in report.report("zh")


async def test_a_reference_picture_for_a_model_that_takes_none_is_refused_at_its_cell(tmp_path):
    """A generate node's reference runs through an IP-Adapter on SD 1.5 and SDXL: a row
    whose model column names FLUX.1 with a reference picture is refused at the reference's
    cell, nothing queued; the SD 1.5 row (its picture found and stored like an image
    column's, its scale column's value bound), and a FLUX.1 row without one, pass."""
    from bot.intake.check import SheetRows, check_sheet
    from storage import config as cfg
    path = tmp_path / "t.json"
    path.write_text(json.dumps({
        "name": "t",
        "params": {"model": {"type": "text"}, "style": {"type": "reference"}},
        "nodes": {"gen": {"op": "generate", "inputs": {
                      "prompt": "a bottle", "model": "$model", "seed": 1,
                      "reference": "$style", "ip_adapter": "ip_sd15"}},
                  "out": {"op": "save", "inputs": {"image": "@gen"}}},
        "output": "{row}.png"}), encoding="utf-8")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "style.png").write_bytes(_png())
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path)},
                            "intake": {"assets_dir": str(tmp_path / "assets")}})
    rows = [{"model": "sd15", "style": "style.png", "style_scale": "0.8"},
            {"model": "flux", "style": "style.png"}, {"model": "flux", "style": ""}]
    report = await check_sheet(load_template(path), SheetRows(rows), config=config,
                               store=FileStore(tmp_path / "store"), skip_invalid=True)
    assert [i.render() for i in report.issues] == [
        'row 3, column "style": model "flux" is FLUX.1 (flux), which takes no reference '
        "picture (an IP-Adapter runs on SD 1.5 and SDXL models): leave it empty, or on an "
        "edit model give it as picture 2"]
    assert [job.row for job in report.jobs] == [2, 4]
    from templates.jobs import decode
    first, last = (decode(job.workflow).nodes[0].inputs for job in report.jobs)
    assert first["reference_scale"] == 0.8 and first["reference"].startswith("inputs/")
    assert last["reference_scale"] == 0.6  # (its default)
    assert "不接受参考图" in report.report("zh")
