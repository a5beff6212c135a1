"""The attachment inbox on SQLite and PostgreSQL: which file a /gen means."""

from __future__ import annotations

import pytest

from storage.db import Database
from storage.inbox import Inbox, name_key


@pytest.fixture
async def inbox(db_url, clock):
    db = await Database(db_url).open()
    yield Inbox(db, keep_seconds=3600, clock=clock)
    await db.close()


async def send(inbox, clock, name, *, user="U1", conversation="C1", message=None, platform="slack"):
    clock.advance(1)
    return await inbox.record(platform=platform, user=user, conversation=conversation,
                              name=name, size=100, handle={"url": f"https://files/{name}"},
                              message=message)


async def test_a_named_file_from_the_same_message_first(inbox, clock):
    await send(inbox, clock, "sheet.xlsx", conversation="C1")
    mine = await send(inbox, clock, "Sheet.xlsx", conversation="C2", message="M9")
    await send(inbox, clock, "sheet.xlsx", conversation="C2")  # later, but not in the message
    found = await inbox.find_sheet(platform="slack", user="U1", conversation="C2",
                                   name="ｓｈｅｅｔ.XLSX", message="M9")
    assert found.found == mine and found.found.handle == {"url": "https://files/Sheet.xlsx"}


async def test_a_named_file_this_conversation_first_then_anywhere(inbox, clock):
    here = await send(inbox, clock, "a.xlsx", conversation="C1")
    there = await send(inbox, clock, "a.xlsx", conversation="DM")  # the newest, elsewhere
    assert (await inbox.find_sheet(platform="slack", user="U1", conversation="C1",
                                   name="a.xlsx")).found == here
    assert (await inbox.find_sheet(platform="slack", user="U1", conversation="C9",
                                   name="a.xlsx")).found == there  # e.g. sent in a DM


async def test_no_file_named_the_latest_spreadsheet(inbox, clock):
    older = await send(inbox, clock, "old.csv", conversation="C1")
    await send(inbox, clock, "photo.png", conversation="C1")
    newer = await send(inbox, clock, "new.xlsx", conversation="DM")
    assert (await inbox.find_sheet(platform="slack", user="U1", conversation="C1")).found == older
    assert (await inbox.find_sheet(platform="slack", user="U1", conversation="C2")).found == newer


async def test_several_sheets_in_one_message_are_ambiguous(inbox, clock):
    a = await send(inbox, clock, "a.xlsx", message="M1")
    b = await send(inbox, clock, "b.csv", message="M1")
    await send(inbox, clock, "p.png", message="M1")
    lookup = await inbox.find_sheet(platform="slack", user="U1", conversation="C1", message="M1")
    assert lookup.found is None and lookup.ambiguous
    assert {u.name for u in lookup.candidates} == {a.name, b.name}


async def test_nothing_found_lists_what_the_person_sent_lately(inbox, clock):
    await send(inbox, clock, "p.png", conversation="DM")
    await send(inbox, clock, "q.png", conversation="C1")
    await send(inbox, clock, "x.xlsx", user="U2")  # someone else's
    lookup = await inbox.find_sheet(platform="slack", user="U1", conversation="C1", name="x.xlsx")
    assert lookup.found is None and not lookup.ambiguous
    assert [u.name for u in lookup.candidates] == ["q.png", "p.png"]  # this conversation first
    none = await inbox.find_sheet(platform="dingtalk", user="U1", conversation="C1")
    assert none.found is None and none.candidates == ()


async def test_uploads_expire_and_are_purged(inbox, clock):
    await send(inbox, clock, "a.xlsx")
    await send(inbox, clock, "b.png", message="M1")
    clock.advance(3600)
    assert (await inbox.find_sheet(platform="slack", user="U1", conversation="C1")).found is None
    assert await inbox.message_files(platform="slack", message="M1") == []
    assert await inbox.purge() == 2


async def test_message_files_are_the_images_a_sheet_may_name(inbox, clock):
    sheet = await send(inbox, clock, "s.xlsx", message="M1")
    image = await send(inbox, clock, "bottle.png", message="M1")
    await send(inbox, clock, "other.png", message="M2")
    assert await inbox.message_files(platform="slack", message="M1") == [sheet, image]


def test_names_match_after_width_and_case_folding():
    assert name_key(" Ｓｈｅｅｔ.XLSX ") == name_key("sheet.xlsx")
