"""Languages as data: one gettext catalog per language, English the source.

The English of every message stays in Python beside its code (`bot.messages`), marked with
`N_(code, english)`; `pybabel extract` (keywords and paths: bot/locales/babel.cfg) collects
them into bot/locales/genbot.pot with the code as each message's msgctxt, and each
language's words are a standard catalog, `<folder>/<locale>/LC_MESSAGES/genbot.po`. The
catalogs are compiled here in memory (Babel reads the .po, writes the .mo into a buffer,
`gettext.GNUTranslations` reads that), once per process: no binary file is committed.

A language is found, not declared: every locale folder under bot/locales and under
[i18n] locales_dir is one; [i18n] languages may narrow the ones offered. Its code is its
folder's tag with "-" ("en-XA"), or just its language ("zh" for zh_Hans) where no other
offered catalog shares that language — so "zh" names Simplified Chinese everywhere it
did before. Anything that names a language (a config value, a batch's meta, `?lang=`,
Accept-Language, a platform's locale) is read with `Languages.find`; a language not
offered reads English.
"""

from __future__ import annotations

import gettext
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from babel.messages.catalog import Catalog
    from babel.plural import PluralRule

    from storage.config import Config

DOMAIN = "genbot"
SOURCE = "en"  # the language the code is written in: its msgids
SHIPPED = Path(__file__).resolve().parent / "locales"
HAN_SCRIPTS = frozenset({"Hans", "Hant", "Hani"})


def N_(code: str, english: str) -> tuple[str, str]:
    """A message: its code and its English. Only a marker (Babel's keyword `N_:1c,2`: the
    code is the msgctxt, so the same English under two codes is two messages, and a
    translator sees the code); `bot.messages.say` translates."""
    return code, english


def NP_(code: str, one: str, many: str) -> tuple[str, str, str]:
    """A message whose words follow a number, its `count` detail ("1 new image", "3 new
    images"): its code and its English for one and for many. Only a marker too (Babel's
    keyword `NP_:1c,2,3`: msgid and msgid_plural); each catalog has the forms of its
    language, chosen by its Plural-Forms header (English two, Chinese one)."""
    return code, one, many


def han(text: str) -> bool:
    """Any Chinese character: the Chinese alias of a column, a command typed in Chinese."""
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _tag(text: str) -> str:
    """A language tag compared as genbot compares them: "zh_Hans" and "zh-hans" alike."""
    return text.strip().replace("_", "-").lower()


def _likely(tag: str) -> tuple[str, str | None]:
    """(language, script) of a tag, the script filled in as CLDR's likely subtags say
    ("zh-CN" -> zh, Hans; "zh-TW" -> zh, Hant; "en" -> en, Latn); a tag CLDR does not
    know (a pseudo-locale) keeps what it says."""
    from babel.core import get_global
    parts = tag.replace("-", "_").split("_")
    language = parts[0].lower()
    script = next((p.title() for p in parts[1:] if len(p) == 4 and p.isalpha()), None)
    if script is None:
        likely = get_global("likely_subtags")
        region = next((p.upper() for p in parts[1:] if len(p) in (2, 3)), None)
        full = (likely.get(f"{language}_{region}") if region else None) or likely.get(language)
        if full:
            script = next((p for p in full.split("_")[1:] if len(p) == 4), None)
    return language, script


@dataclass(frozen=True)
class Language:
    code: str  # as genbot names it: "en", "zh", "en-XA"
    locale: str  # its catalog's folder: "en", "zh_Hans", "en_XA"
    pos: tuple[Path, ...]  # its catalogs, the first one's words winning

    @property
    def script(self) -> str | None:
        """ISO 15924, as likely for its locale: Latn, Hans …"""
        return _likely(self.locale)[1]

    @property
    def writes_han(self) -> bool:
        return self.script in HAN_SCRIPTS


def catalogs(folders: Iterable[Path]) -> dict[str, tuple[Path, ...]]:
    """locale -> its genbot.po in each folder that has one, in the folders' order."""
    found: dict[str, tuple[Path, ...]] = {}
    for folder in folders:
        for po in sorted(folder.glob(f"*/LC_MESSAGES/{DOMAIN}.po")):
            locale = po.parents[1].name
            found[locale] = (*found.get(locale, ()), po)
    return found


class Languages:
    """The languages offered, found as catalogs in `folders` (narrowed to `offered` when
    given: tags as a person writes them)."""

    def __init__(self, folders: tuple[Path, ...] = (SHIPPED,), offered: tuple[str, ...] = ()):
        self.folders = folders
        found = catalogs(folders)
        by_language: dict[str, int] = {}
        for locale in found:
            language = _likely(locale)[0]
            by_language[language] = by_language.get(language, 0) + 1

        def code(locale: str) -> str:
            language = _likely(locale)[0]
            return language if by_language[language] == 1 else locale.replace("_", "-")

        self.found = [Language(code(locale), locale, pos) for locale, pos in found.items()]
        if offered:
            chosen: list[Language] = []
            for tag in offered:
                match = self._match(tag, self.found)
                if match is None:
                    raise LookupError(tag)
                if match not in chosen:
                    chosen.append(match)
            self.offered = tuple(chosen)
        else:
            self.offered = tuple(sorted(self.found, key=lambda x: (x.code != SOURCE, x.code)))
        self._known: dict[str, Language | None] = {}

    @property
    def codes(self) -> list[str]:
        return [language.code for language in self.offered]

    @staticmethod
    def _match(tag: str, among: Iterable[Language]) -> Language | None:
        """The language `tag` names: its code or locale; else the one of the same language
        and script (zh-CN: zh_Hans); else one of the same language."""
        among = list(among)
        wanted = _tag(tag)
        for one in among:
            if wanted in (_tag(one.code), _tag(one.locale)):
                return one
        if not re.fullmatch(r"[a-z]{2,3}(-[a-z0-9]{1,8})*", wanted):
            return None
        language, script = _likely(wanted)
        same = [x for x in among if _likely(x.locale)[0] == language]
        return next((x for x in same if _likely(x.locale)[1] == script), None) or \
            next(iter(same), None)

    def find(self, tag: str | None) -> Language | None:
        """The offered language `tag` names, or None."""
        if not tag:
            return None
        if tag in self._known:
            return self._known[tag]
        found = self._match(tag, self.offered)
        if len(self._known) < 512:  # (tags come from outside: ?lang=, Accept-Language)
            self._known[tag] = found
        return found

    def code(self, tag: str | None, default: str = SOURCE) -> str:
        """The code of the offered language `tag` names, else `default`."""
        found = self.find(tag)
        return found.code if found else default

    def negotiate(self, header: str | None) -> Language | None:
        """The first offered language an Accept-Language header asks for."""
        asked: list[tuple[float, int, str]] = []
        for i, part in enumerate((header or "").split(",")):
            tag, _, params = part.strip().partition(";")
            q = 1.0
            if params.strip().startswith("q="):
                try:
                    q = float(params.strip()[2:])
                except ValueError:
                    q = 0.0
            if tag and tag != "*" and q > 0:
                asked.append((-q, i, tag))
        for _, _, tag in sorted(asked):
            found = self.find(tag)
            if found:
                return found
        return None

    def written_in(self, text: str) -> Language | None:
        """The offered language a person who writes `text` reads, where its script tells
        (who types 帮助 reads Chinese); else None."""
        if han(text):
            return next((x for x in self.offered if x.writes_han), None)
        return None


_languages = Languages()


def languages() -> Languages:
    """The languages this process offers (set from the config by `use`)."""
    return _languages


def use(config: Config) -> Languages:
    """Offer the languages `config` names ([i18n]) from now on; check every key that
    names one ([chat] language, [chat] languages). Raises ConfigError."""
    from bot.settings import ChatConfig, I18nConfig
    from storage.config import ConfigError
    global _languages
    settings = config[I18nConfig]
    folders: tuple[Path, ...] = (SHIPPED,)
    if settings.locales_dir:
        extra = config.path(settings.locales_dir)
        if not extra.is_dir():
            raise ConfigError(f"{config.source}: [i18n] locales_dir = "
                              f'"{settings.locales_dir}": no folder {extra}')
        folders = (extra, SHIPPED)  # (its words for a shipped language come first)
    try:
        made = Languages(folders, tuple(settings.languages))
    except LookupError as e:
        known = ", ".join(x.code for x in Languages(folders).found)
        raise ConfigError(f'{config.source}: [i18n] languages: "{e.args[0]}" has no catalog '
                          f"(found: {known})") from None
    chat = config[ChatConfig]
    named = [("[chat] language", chat.language)] + [
        (f'[chat] languages: "{entry}"', entry.rpartition("=")[2]) for entry in chat.languages]
    for where, tag in named:
        if made.find(tag) is None:
            raise ConfigError(f'{config.source}: {where}: "{tag}" is not a language offered '
                              f"here ({', '.join(made.codes)})")
    _languages = made
    return made


def _compiled(po: Path) -> gettext.GNUTranslations:
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po
    with po.open("rb") as f:
        catalog = read_po(f)
    mo = io.BytesIO()
    write_mo(mo, catalog)  # (fuzzy entries left out, as msgfmt does)
    mo.seek(0)
    return gettext.GNUTranslations(mo)


@cache
def translations(language: Language) -> gettext.NullTranslations:
    """The language's catalogs, each compiled once per process, chained: a message the
    first lacks is looked up in the next (an operator's few words over genbot's own)."""
    chain: gettext.NullTranslations = gettext.NullTranslations()
    for po in reversed(language.pos):
        made = _compiled(po)
        made.add_fallback(chain)
        chain = made
    return chain


def text(code: str, english: str, lang: str | None) -> str:
    """The words of message `code` in `lang`: its catalog's, else the English."""
    language = _languages.find(lang)
    if language is None:
        return english
    return translations(language).pgettext(code, english)


def plural_category(lang: str | None) -> PluralRule:
    """`lang`'s CLDR plural rule: a count's category ("one", "few", "other" …), and in
    `.tags` the categories it has besides "other"."""
    from babel import Locale, UnknownLocaleError
    language = _languages.find(lang)
    locale = language.locale if language else SOURCE
    for tag in (locale, locale.partition("_")[0]):  # (a pseudo-locale: its language's)
        try:
            return Locale.parse(tag).plural_form
        except (ValueError, UnknownLocaleError):
            continue
    return Locale.parse(SOURCE).plural_form


def plural(code: str, one: str, many: str, count: int, lang: str | None) -> str:
    """The words of message `code` for `count` in `lang`: the form its catalog's plural
    rule picks, else the English one (1) or many (any other count)."""
    language = _languages.find(lang)
    if language is None:
        return one if count == 1 else many
    return translations(language).npgettext(code, one, many, count)


# --- keeping the catalogs: python -m bot.i18n ---------------------------------------------
MAPPING = SHIPPED / "babel.cfg"  # what is extracted, with which keyword
TEMPLATE = SHIPPED / f"{DOMAIN}.pot"
CODE = SHIPPED.parent  # the package extracted; locations read bot/…


def extract() -> Catalog:
    """Every message marked in the code, as `pybabel extract -F bot/locales/babel.cfg bot`
    finds it."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
    from babel.messages.frontend import parse_mapping_cfg
    with MAPPING.open(encoding="utf-8") as f:
        methods, options = parse_mapping_cfg(f, str(MAPPING))
    catalog = Catalog(project="genbot", copyright_holder="genbot", charset="utf-8",
                      msgid_bugs_address="", fuzzy=False)
    for name, _, message, comments, context in extract_from_dir(
            CODE, methods, options, keywords=DEFAULT_KEYWORDS):  # (as pybabel's, N_ aside)
        catalog.add(message, None, [(f"{CODE.name}/{name}", 0)], auto_comments=comments,
                    context=context)
    return catalog


def _write(catalog: Catalog, path: Path) -> bool:
    """Write the catalog unless only its dates would change; whether it was written."""
    from babel.messages.pofile import write_po
    out = io.BytesIO()
    write_po(out, catalog, width=100, include_lineno=False, ignore_obsolete=True)

    def undated(text: bytes) -> list[bytes]:
        return [line for line in text.splitlines() if not line.startswith(
            (b'"POT-Creation-Date:', b'"PO-Revision-Date:', b"# Copyright (C)",
             b"# FIRST AUTHOR"))]
    if path.exists() and undated(path.read_bytes()) == undated(out.getvalue()):
        return False
    path.write_bytes(out.getvalue())
    return True


def refresh() -> list[Path]:
    """Extract the template afresh and bring each shipped catalog up to date with it (as
    `pybabel update`: a new message untranslated or, where one close to it was, that
    translation marked fuzzy for a translator to check; a removed one dropped). The files
    that changed (more than their dates)."""
    from babel.messages.pofile import read_po
    template = extract()
    written = [TEMPLATE] if _write(template, TEMPLATE) else []
    for locale, (po,) in catalogs((SHIPPED,)).items():
        with po.open("rb") as f:
            catalog = read_po(f, locale=None)
        catalog.update(template, no_fuzzy_matching=locale == SOURCE,
                       update_header_comment=False)
        if _write(catalog, po):
            written.append(po)
    return written


if __name__ == "__main__":  # python -m bot.i18n: the template and each catalog refreshed
    changed = refresh()
    for path in changed:
        print(path.relative_to(CODE.parent))
    if not changed:
        print("the catalogs are up to date")
