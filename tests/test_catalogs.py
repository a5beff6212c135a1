"""The words are standard gettext catalogs, kept true by the suite: the committed template
is what Babel extracts from the code now (`python -m bot.i18n` refreshes it), every
shipped language has every message — translated, not fuzzy, with the English's
placeholders — and every code a front can ask for, named literally or built from a
registry (an action's verb, a command's help, a job state …), is in all of them."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from bot import i18n
from bot.messages import CATALOG, KINDS, PLURALS
from tests.conftest import ROOT

REFRESH = "run `python -m bot.i18n` (docs/architecture.md, \"a message\")"


def read(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f)


def entries(catalog: Catalog) -> dict[str, tuple[str | tuple, str | tuple, bool]]:
    """msgctxt (the code) -> (msgid, msgstr, fuzzy), the header left out; a message that
    follows a number (NP_) has a tuple of each: its English for one and many, its forms."""
    return {m.context: (m.id, m.string, m.fuzzy) for m in catalog if m.id}


def forms(text: str | tuple) -> tuple[str, ...]:
    return text if isinstance(text, tuple) else (text,)


def placeholders(text: str | tuple) -> set[str]:
    """The {fields} a str.format template fills, in any of its forms (raises on a
    malformed one)."""
    return {field for form in forms(text) for _, field, _, _ in string.Formatter().parse(form)
            if field is not None}


SHIPPED = {locale: po for locale, (po,) in i18n.catalogs((i18n.SHIPPED,)).items()}


def test_the_committed_template_is_what_the_code_holds_now():
    fresh = [(m.context, m.id, sorted({f for f, _ in m.locations}))
             for m in i18n.extract() if m.id]
    committed = [(m.context, m.id, sorted({f for f, _ in m.locations}))
                 for m in read(i18n.TEMPLATE) if m.id]
    assert fresh == committed, f"bot/locales/genbot.pot is stale: {REFRESH}"
    assert [code for code, _, _ in fresh] == list(CATALOG)  # each message, once, in order
    assert all(english in (CATALOG[code], (CATALOG[code], PLURALS.get(code)))
               for code, english, _ in fresh)
    assert all("count" in placeholders(english) for code, english, _ in fresh
               if code in PLURALS)  # (the number its words follow)


def test_english_and_simplified_chinese_ship_and_the_source_is_english():
    assert {"en", "zh_Hans"} <= set(SHIPPED)
    offered = i18n.Languages()
    assert offered.codes[0] == i18n.SOURCE == "en"
    assert offered.code("zh") == offered.code("zh-CN") == offered.code("zh_Hans") == "zh"


@pytest.mark.parametrize("locale", sorted(SHIPPED))
def test_every_language_has_every_message_translated_with_its_placeholders(locale):
    template = entries(read(i18n.TEMPLATE))
    words = entries(read(SHIPPED[locale]))
    missing, extra = template.keys() - words.keys(), words.keys() - template.keys()
    assert not missing and not extra, f"{locale}: missing {sorted(missing)}, not in the " \
                                      f"template {sorted(extra)}: {REFRESH}"
    problems = []
    for code, (english, translated, fuzzy) in words.items():
        if english != template[code][0]:
            problems.append(f"{code}: its English changed: {REFRESH}")
        if locale == i18n.SOURCE and not any(forms(translated)):
            continue  # (the source's msgstr may stay empty: the msgid is its words)
        if not all(forms(translated)) or fuzzy:
            problems.append(f"{code}: {'fuzzy' if fuzzy else 'untranslated'}")
            continue
        try:
            theirs = placeholders(translated)
        except ValueError as e:
            problems.append(f"{code}: {translated!r} is no format string: {e}")
            continue
        if theirs != placeholders(english):
            problems.append(f"{code}: placeholders {sorted(theirs)}, the English has "
                            f"{sorted(placeholders(english))}")
    assert not problems, f"{locale}:\n" + "\n".join(problems)


def codes_named_in_the_code() -> dict[str, str]:
    """Every message code written literally where a message is asked for: say("x"),
    turn.add/say/announce("x"), Phrase("x"), a coded error or problem("x", …) — both
    sides of a conditional. code -> where."""
    import importlib
    import pkgutil

    import bot
    from bot.errors import Coded
    for module in pkgutil.walk_packages(bot.__path__, "bot."):  # (so every kind of
        # coded error bot defines is a subclass below)
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    kinds, seen = [Coded], set()
    while kinds:
        kind = kinds.pop()
        seen.add(kind.__name__)
        kinds += kind.__subclasses__()
    askers = seen | {"say", "announce", "add", "Phrase", "Problem", "Issue"}
    found: dict[str, str] = {}
    for path in (ROOT / "bot").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in askers or name == "add" and not (
                    isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "turn"):
                continue
            first = node.args[0]
            for value in (first.body, first.orelse) if isinstance(first, ast.IfExp) else (first,):
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found[value.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def codes_from_the_registries() -> set[str]:
    """Every code a front builds from a registry rather than writes out."""
    from typing import get_args

    from bot.app.permissions import Role
    from bot.chat.commands import COMMANDS
    from bot.web.webhooks import State
    from storage.records import DOINGS, Priority, Status
    from storage.workers import STATES
    from templates.actions import ACTIONS
    codes = {"language_name", "list_separator"}
    for spec in ACTIONS.values():  # a button's verb, chat's help line, the CLI's help
        codes |= {spec.verb, f"help_{spec.name}", f"about_{spec.name}"}
    codes |= {f"help_{name}" for name in COMMANDS.specs}
    codes |= {f"state_{s.value}" for s in Status} | {f"priority_{p.label}" for p in Priority}
    codes |= {f"delivery_{s}" for s in get_args(State)} | {f"worker_{s}" for s in STATES}
    codes |= {f"doing_{d}" for d in DOINGS} | {f"role_{r.value}" for r in Role}
    codes |= {kind.code for kind in KINDS.values()}
    codes |= {f"sheet_{label}" for label in ("rows", "help", "column", "type", "required",
                                             "default", "allowed", "aliases", "about", "yes",
                                             "no")}
    return codes


def test_every_code_a_front_can_ask_for_is_in_every_language():
    named = codes_named_in_the_code()
    built = codes_from_the_registries()
    assert len(named) > 200 and len(built) > 60  # (the walk found what it walks)
    unknown = {code: where for code, where in named.items() if code not in CATALOG}
    assert not unknown, f"asked for, but no such message: {unknown}"
    assert not built - CATALOG.keys(), f"no message for {sorted(built - CATALOG.keys())}"
    for locale, po in SHIPPED.items():
        if locale == i18n.SOURCE:
            continue
        words = entries(read(po))
        untold = sorted(c for c in {*named, *built} if not words.get(c, ("", "", True))[1])
        assert not untold, f"{locale} lacks {untold}"


def test_a_language_named_in_the_config_must_be_offered(tmp_path):
    from storage.config import ConfigError, from_dict
    for data, said in (
            ({"chat": {"language": "fr"}}, '[chat] language: "fr" is not a language offered '
                                           "here (en, zh)"),
            ({"chat": {"languages": ["slack:C1=de"]}}, '[chat] languages: "slack:C1=de"'),
            ({"i18n": {"languages": ["en", "xx"]}}, '[i18n] languages: "xx" has no catalog'),
            ({"i18n": {"languages": ["en"]}, "chat": {"language": "zh"}}, "(en)"),
            ({"i18n": {"locales_dir": "nowhere"}}, "[i18n] locales_dir")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            i18n.use(from_dict(data, base_dir=str(tmp_path)))
    offered = i18n.use(from_dict({"i18n": {"languages": ["zh_Hans", "en"]},
                                  "chat": {"language": "zh-CN"}}))
    assert offered.codes == ["zh", "en"]  # (in the order the config gives)
    assert i18n.use(from_dict({})).codes == ["en", "zh"]
