"""A third language is one .po file and one line of config: a pseudo-locale, en-XA (each
message's English wrapped in ⟦…⟧, its placeholders kept), in a folder [i18n] locales_dir
names — nothing written into genbot's package — shows on every surface: a chat reply and a
chat error (through the real chat path, for a person whose platform says en-XA), the
results sheet's header, and the dashboard's labels, from GET /vocabulary and, in a real
Chromium, on the page; which also draws Chinese with the web font it serves."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po
from openpyxl import load_workbook

from bot import i18n
from storage.config import from_dict
from tests.conftest import ROOT, executor_config
from tests.fakes.api import ALICE, ApiWorld, api_config
from tests.fakes.browser import launched
from tests.fakes.chat import World

BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()
CJK = ((0x3000, 0x303F), (0x4E00, 0x9FFF), (0xFF00, 0xFFEF))  # the font's ranges (app.css)


def pseudo_locale(folder: Path) -> Path:
    """folder/en_XA/LC_MESSAGES/genbot.po: every message of the template, wrapped."""
    with i18n.TEMPLATE.open("rb") as f:
        template = read_po(f)
    catalog = Catalog(locale=None, project="genbot", charset="utf-8")  # (en_XA: its folder)
    for m in template:
        if m.id:
            words = tuple(f"⟦{form}⟧" for form in m.id) if isinstance(m.id, tuple) \
                else f"⟦{m.id}⟧"  # (a message that follows a number: each form)
            catalog.add(m.id, words, context=m.context)
    po = folder / "en_XA" / "LC_MESSAGES" / "genbot.po"
    po.parent.mkdir(parents=True)
    with po.open("wb") as f:
        write_po(f, catalog)
    return folder


@pytest.fixture
def locales(tmp_path):
    yield pseudo_locale(tmp_path / "locales")
    i18n.use(from_dict({}))  # the shipped languages again, for whatever runs next


def wrapped(text: str) -> bool:
    return text.startswith("⟦") and text.endswith("⟧")


async def test_a_pseudo_locale_answers_in_chat_errs_and_heads_the_results_sheet(
        tmp_path, demo_models, locales):
    config = executor_config(tmp_path / "data", demo_models,
                             i18n={"locales_dir": str(locales)})  # the one line
    async with World(config) as w:
        assert i18n.languages().codes == ["en", "en-XA", "zh"]
        (helped,) = await w.send("/help", lang="en-XA")  # the person's locale, as Slack says
        first, *rest = helped.text.splitlines()
        assert first == "⟦Commands (also without the slash, or after @genbot):⟧"
        assert rest[0].startswith("/gen TEMPLATE [FILE]") and rest[0].endswith(
            "— ⟦queue one image job per row of a sheet you sent me⟧")
        (refused,) = await w.send("/status twelve", lang="en-XA")  # a coded error
        assert refused.text.splitlines()[0] == '⟦"twelve" is not a ⟦batch⟧ number⟧'

        p = w.platform
        files = (p.upload("sheet.csv", b"image,title\nbottle.png,A\nbottle.png,B\n"),
                 p.upload("bottle.png", BOTTLE))
        await w.send("/gen social_thumb sheet.csv", files=files, lang="en-XA")
        await w.send("/cancel 1", lang="en-XA")  # finished at once: the summary is owed
        await w.finish()
        columns = set(w.app.template("social_thumb").params)  # (its own names, not words)
    summary = next(post for post in p.posts if post.file == "results.xlsx")
    assert wrapped(summary.text)
    header = [c.value for c in load_workbook(io.BytesIO(summary.data)).active[1]]
    words = [h for h in header if h not in columns]
    assert header[0] == "⟦row⟧" and len(words) >= 8 and all(wrapped(h) for h in words), header


async def test_the_dashboard_shows_the_pseudo_locale_and_draws_chinese_in_its_own_font(
        tmp_path, demo_models, locales):
    config = api_config(tmp_path, demo_models, i18n={"locales_dir": str(locales)})
    async with ApiWorld(config) as w, launched() as browser:
        status, words = await w.call("GET", "/vocabulary?lang=en-XA", token=None)
        assert words["language"] == "en-XA" and words["words"]["sign_in"] == "⟦Sign in⟧"
        assert {"code": "en-XA", "name": "⟦English⟧"} in words["languages"]
        assert all(wrapped(s["label"]) for s in words["states"] + words["priorities"])

        # A browser whose person reads en-XA gets it from the start (Accept-Language).
        page = await (await browser.new_context(locale="en-XA")).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        fetched: list[tuple[str, int]] = []
        page.on("response", lambda r: fetched.append((r.url.rsplit("/", 1)[-1], r.status))
                if "/fonts/" in r.url else None)
        await page.goto(f"{w.url}/dashboard/")
        await page.wait_for_selector("#sign-in")
        assert await page.text_content("#sign-in h2") == "⟦Sign in⟧"
        assert await page.eval_on_selector_all(
            "#lang option", "os => os.map(o => [o.value, o.textContent])") == \
            [["en", "English"], ["en-XA", "⟦English⟧"], ["zh", "中文"]]
        cjk = """() => document.fonts.ready.then(() => Object.fromEntries(
            [...document.fonts].filter(f => f.family.includes("genbot CJK"))
                               .map(f => [f.unicodeRange.startsWith("U+3000") ? "rest"
                                                                         : "names", f.status])))"""
        # Only the language menu's "中文" is Chinese here: its two characters' face, 2 kB.
        assert await page.evaluate(cjk) == {"names": "loaded", "rest": "unloaded"}
        assert fetched == [("genbot-cjk-names.woff2", 200)]

        await page.select_option("#lang", "zh")
        await page.wait_for_selector("#sign-in h2 >> text='登录'")
        assert await page.evaluate(cjk) == {"names": "loaded", "rest": "loaded"}
        assert fetched[1:] == [("genbot-cjk.woff2", 200)]
        assert await page.evaluate(
            "document.fonts.check('14px \"genbot CJK\"', '登录 服务配置中的令牌')")
        # What Chromium drew each Chinese character with: the served font, every one.
        cdp = await page.context.new_cdp_session(page)
        await cdp.send("DOM.enable")
        await cdp.send("CSS.enable")
        root = (await cdp.send("DOM.getDocument", {"depth": -1}))["root"]["nodeId"]
        for selector in ("#sign-in h2", "#sign-in label", "#sign-in p", "#sign-in button",
                         "#lang"):  # (the menu shows once signed in)
            node = await cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})
            drawn = (await cdp.send("CSS.getPlatformFontsForNode", node))["fonts"]
            text = await page.eval_on_selector(selector, "e => e.tagName === 'SELECT' ? "
                                               "e.selectedOptions[0].text : e.textContent")
            han = sum(1 for ch in text if any(lo <= ord(ch) <= hi for lo, hi in CJK))
            served = sum(f["glyphCount"] for f in drawn
                         if f["isCustomFont"] and f["familyName"] == "Noto Sans CJK SC")
            assert han and served == han, (selector, text, drawn)
        await page.screenshot(path=str(tmp_path / "zh-sign-in.png"))  # (to look at)

        await page.fill("#token", ALICE)  # typed, then the language changed: the token stays
        await page.select_option("#lang", "en-XA")  # and signed in, the page's words
        await page.wait_for_selector("#sign-in h2 >> text='⟦Sign in⟧'")
        assert await page.input_value("#token") == ALICE
        await page.click("#sign-in button[type=submit]")
        await page.wait_for_selector('[data-count="queued"] .badge')
        assert await page.text_content('#nav a[href="#/"]') == "⟦Overview⟧"
        assert await page.text_content('[data-count="queued"] .badge') == "⟦queued⟧"
        assert await page.text_content("#me") == "api:alice (⟦submitter⟧)"
        await page.screenshot(path=str(tmp_path / "en-XA-overview.png"))
        assert errors == []
