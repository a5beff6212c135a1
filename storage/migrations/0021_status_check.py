"""The database refuses a job status that is not one of the states (storage.states): a
misspelt state in a statement, a hand-edited row or a migration's UPDATE fails there and
then instead of leaving a job no claim, count or front will ever see again.

`status_check` is written to be called again: a migration that adds a state calls it
with the new list (docs/architecture.md, "a job state"). The states are spelled out
here, not read from storage.states, so this migration means the same thing forever.

PostgreSQL adds the constraint NOT VALID and validates it separately, so the jobs table
is locked against writes only for the catalog change, not for the scan. SQLite cannot
add a constraint to a table: the table is rebuilt (sqlite.org/lang_altertable.html,
"other kinds of table schema changes") — copied into a new one with the constraint, its
indexes, triggers and the views that read it made again, its id sequence kept (ids a
retention sweep removed are never handed out again). The copy takes about a second per
million jobs, once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tortoise import migrations
from tortoise.migrations import operations as ops

STATES = ("queued", "running", "succeeded", "failed", "canceled")
NAME = "jobs_status_known"


def _check(states: Sequence[str]) -> str:
    return f"CHECK (status IN ({', '.join(repr(s) for s in states)}))"


async def status_check(schema_editor: Any, states: Sequence[str]) -> None:
    """Make jobs.status accept exactly `states` (replacing an earlier list)."""
    client = schema_editor.client
    if schema_editor.DIALECT != "sqlite":
        await client.execute_script(
            f"ALTER TABLE jobs DROP CONSTRAINT IF EXISTS {NAME};\n"
            f"ALTER TABLE jobs ADD CONSTRAINT {NAME} {_check(states)} NOT VALID;\n"
            f"ALTER TABLE jobs VALIDATE CONSTRAINT {NAME};")
        return
    _, rows = await client.execute_query(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE sql IS NOT NULL "
        "AND name <> 'jobs' AND (tbl_name = 'jobs' OR sql LIKE '%jobs%') ORDER BY rowid")
    again = [dict(r) for r in rows if r["type"] in ("index", "trigger", "view")
             and (r["tbl_name"] == "jobs" or re.search(r"\bjobs\b", r["sql"]))]
    _, table = await client.execute_query(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'jobs'")
    _, sequence = await client.execute_query(
        "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'")
    create = re.sub(rf",\s*CONSTRAINT {NAME} CHECK \([^)]*\)\)", "", table[0]["sql"])
    create = create.replace('CREATE TABLE "jobs"', 'CREATE TABLE "jobs_rebuilt"', 1)
    cut = create.rindex(")")
    create = f"{create[:cut]}, CONSTRAINT {NAME} {_check(states)})"
    for other in reversed(again):  # what would name a missing table while it is rebuilt
        if other["type"] == "view" or (other["type"] == "trigger" and other["tbl_name"] != "jobs"):
            await client.execute_query(f'DROP {other["type"].upper()} "{other["name"]}"')
    await client.execute_query(create)
    await client.execute_query("INSERT INTO jobs_rebuilt SELECT * FROM jobs")
    await client.execute_query("DROP TABLE jobs")
    await client.execute_query('ALTER TABLE jobs_rebuilt RENAME TO "jobs"')
    for made in again:
        await client.execute_query(made["sql"])
    await client.execute_query("DELETE FROM sqlite_sequence WHERE name = 'jobs'")
    if sequence:
        await client.execute_query("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)",
                                   [sequence[0]["seq"]])


async def known_states(apps: Any, schema_editor: Any) -> None:
    await status_check(schema_editor, STATES)


class Migration(migrations.Migration):
    dependencies = [("storage", "0020_stuck_jobs")]

    operations = [ops.RunPython(known_states)]
