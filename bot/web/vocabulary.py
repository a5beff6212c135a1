"""GET /vocabulary: every word the dashboard shows, in one language, with the registries
they name — so the page keeps no catalog and no list of states of its own.

For `?lang=` (else the first language Accept-Language asks for that is offered, else
English): the dashboard's labels (the `dash_*` messages of bot.messages, from the same
gettext catalogs as every other front), the job states in their order with which are
active and which terminal (storage.records: Status, ACTIVE, TERMINAL), the priorities
(Priority), a webhook delivery's states (bot.web.webhooks.State), an executor's states and
what may keep it from its jobs (storage.workers.STATES, storage.records.DOINGS), the roles
(bot.app.permissions.Role), the image actions (templates.actions.ACTIONS), the review
states (storage.reviews) and the reasons offered for a rejection, and the languages
offered, each in its own name.

Public: the sign-in page needs its words before anyone has signed in, and nothing here
is a secret — every word and state is the shipped catalog's or the registries', the same
for everyone; who may take an action is what docs/api.md says, and the API still checks
it on each request."""

from __future__ import annotations

from typing import Annotated, get_args

from aiohttp import web
from msgspec import Meta, Struct

from bot import i18n
from bot.app.permissions import Role, needs
from bot.messages import CATALOG, PLURALS, say, unfilled, unfilled_forms
from bot.web.http import reader_lang, respond
from bot.web.routes import Answer, Param, Route
from bot.web.webhooks import State
from storage.records import ACTIVE, DOINGS, TERMINAL, Priority, Status
from storage.reviews import REVIEWS
from storage.states import STATES as JOB_STATES
from storage.workers import STATES
from templates.actions import ACTIONS

WORDS = "dash_"  # the dashboard's own labels: dash_overview -> words["overview"]
REASONS = "reason_"  # a rejection's offered reasons


class ActionWords(Struct):
    """An action on a finished image (POST /jobs/{id}/actions)."""
    name: str
    verb: str  # its word on a button ("Vary", "变体")
    icon: str  # before the verb on a button
    role: str  # the least role that may take it
    takes: list[str]  # besides the image: count, strength, factor, values
    button: bool  # offered under each finished image


class Named(Struct):
    name: str  # as the API writes it
    label: str  # as a person reads it, in the language asked for


class StateWords(Struct):
    """A job's state (GET /jobs?status=)."""
    name: str
    label: str
    active: bool  # queued or running: it may still change
    terminal: bool  # it has ended
    working: bool  # an executor runs it now: its steps show as they come
    produced: bool  # it ended with its images: they may be kept and acted on


class ReviewWords(Struct):
    """An image's review state (PUT /jobs/{id}/review)."""
    name: str
    label: str
    reviewed: bool  # counts towards a batch's sign-off
    pick: bool  # among the batch's picks
    note: bool  # takes words: a reason, a note
    note_required: bool


class LanguageWords(Struct):
    code: str  # what ?lang= and the other fronts take
    name: str  # in itself: "English", "中文"


class Vocabulary(Struct):
    language: str  # the language of every label here
    languages: list[LanguageWords]  # those offered, in the order to offer them
    words: Annotated[dict[str, str], Meta(description=(
        "the dashboard's labels by key; {name} marks a value the page fills in"))]
    plurals: Annotated[dict[str, dict[str, str]], Meta(description=(
        "the labels whose words follow a number ({count}): by key, their words for each "
        "of the language's plural categories (one, few, other …: as Intl.PluralRules "
        "selects them)"))]
    states: list[StateWords]  # in a job's order: queued … canceled
    priorities: list[Named]  # the most urgent first
    deliveries: list[Named]  # a webhook delivery's states
    workers: list[Named]  # an executor's states
    doings: list[Named]  # what keeps an executor from its jobs ({models}: which)
    roles: list[Named]  # a person's role, the least first
    actions: list[ActionWords]  # in the order to offer them
    reviews: list[ReviewWords] = []  # in the order to offer them
    reasons: Annotated[list[str], Meta(description=(
        "reasons offered for a rejection, in the language asked for (any words may be "
        "sent instead)"))] = []


def vocabulary(lang: str) -> Vocabulary:
    """Every word for `lang` (an offered language's code)."""
    offered = i18n.languages()
    return Vocabulary(
        lang, [LanguageWords(x.code, say("language_name", x.code)) for x in offered.offered],
        {code.removeprefix(WORDS): unfilled(code, lang) for code in CATALOG
         if code.startswith(WORDS) and code not in PLURALS},
        {code.removeprefix(WORDS): unfilled_forms(code, lang) for code in PLURALS
         if code.startswith(WORDS)},
        [StateWords(s.value, say(f"state_{s.value}", lang), s in ACTIVE, s in TERMINAL,
                    JOB_STATES[s].working, JOB_STATES[s].produced) for s in Status],
        [Named(p.label, say(f"priority_{p.label}", lang)) for p in Priority],
        [Named(s, say(f"delivery_{s}", lang)) for s in get_args(State)],
        [Named(s, say(f"worker_{s}", lang)) for s in STATES],
        [Named(d, unfilled(f"doing_{d}", lang)) for d in DOINGS],
        [Named(r.value, say(f"role_{r.value}", lang)) for r in Role],
        [ActionWords(s.name, say(s.verb, lang), s.icon, needs(s.name).value, list(s.takes),
                     s.button) for s in ACTIONS.values()],
        [ReviewWords(r.value, say(f"review_{r.value}", lang), k.reviewed, k.pick, k.note,
                     k.note_required) for r, k in REVIEWS.items()],
        [say(code, lang) for code in CATALOG if code.startswith(REASONS)])


class VocabularyRoutes:
    def routes(self) -> list[Route]:
        return [Route("GET", "/vocabulary", self.vocabulary,
                      "Every word the dashboard shows, and the registries they name",
                      {200: Answer("OK", Vocabulary)}, public=True,
                      params=(Param("lang", "query", str, "a language offered (en, zh …); "
                                    "default: Accept-Language's, else en"),),
                      description=__doc__.split("\n\n")[1])]

    async def vocabulary(self, request: web.Request) -> web.Response:
        return respond(vocabulary(reader_lang(request)))
