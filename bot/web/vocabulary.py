"""GET /vocabulary: the registries every front shows, with their words in each language,
for the dashboard (and any client) to read instead of keeping a copy of its own: the
image actions (templates.actions.ACTIONS) with their verbs, who may take them and what
they take."""

from __future__ import annotations

from aiohttp import web
from msgspec import Struct

from bot import i18n
from bot.app.permissions import Action, needs
from bot.messages import say
from bot.web.callers import Callers
from bot.web.http import respond
from bot.web.routes import Answer, Route
from templates.actions import ACTIONS


class ActionWords(Struct):
    """An action on a finished image (POST /jobs/{id}/actions)."""
    name: str
    verb: dict[str, str]  # language -> its verb ("Vary", "变体")
    icon: str  # before the verb on a button
    role: str  # the least role that may take it
    takes: list[str]  # besides the image: count, strength, factor, values
    button: bool  # offered under each finished image


class Vocabulary(Struct):
    languages: list[str]
    actions: list[ActionWords]  # in the order to offer them


class VocabularyRoutes:
    def __init__(self, callers: Callers):
        self.callers = callers

    def routes(self) -> list[Route]:
        return [Route("GET", "/vocabulary", self.vocabulary,
                      "The image actions and their words in each language",
                      {200: Answer("OK", Vocabulary)})]

    async def vocabulary(self, request: web.Request) -> web.Response:
        await self.callers.allowed(request, Action.TEMPLATES)  # whoever may read templates
        langs = i18n.languages().codes
        return respond(Vocabulary(langs, [
            ActionWords(s.name, {lang: say(s.verb, lang) for lang in langs}, s.icon,
                        needs(s.name).value, list(s.takes), s.button)
            for s in ACTIONS.values()]))
