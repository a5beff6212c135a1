"""Claiming ahead, and an event log whose writers no longer wait on one another.

- `jobs_ahead`: queued jobs an executor claimed ahead hold a lease expiry; this partial
  index finds the expired ones (and tells every claim there are none) without walking
  the queue.
- PostgreSQL's event log: migration 0002 made every writer take one exclusive lock
  before inserting events, held to commit, so sequence order was commit order and
  "everything after my last seq" exact. It also made every job transition of every
  executor wait for the one before it to commit. Now writers take that lock *shared*
  (they never wait on each other) and readers take it exclusively, in
  genbot_events_after / genbot_last_event_seq: a reader waits only for the writers
  that are between their insert and their commit, so when it reads, no event with a
  lower seq can still appear. Readers are few (one notifier and one metrics reader per
  service, a stream per dashboard); writers are every executor's every step.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

BOTH = [
    "CREATE INDEX jobs_ahead ON jobs (lease_expires_at)"
    " WHERE status = 'queued' AND lease_expires_at IS NOT NULL",
]

POSTGRES = [
    """CREATE OR REPLACE FUNCTION genbot_events_serialize() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         PERFORM pg_advisory_xact_lock_shared(1734700660);
         RETURN NULL;
       END $$""",
    """CREATE FUNCTION genbot_events_after(after BIGINT, n INT)
       RETURNS SETOF events LANGUAGE plpgsql AS $$
       BEGIN
         PERFORM pg_advisory_xact_lock(1734700660);
         RETURN QUERY SELECT * FROM events WHERE seq > after ORDER BY seq LIMIT n;
       END $$""",
    """CREATE FUNCTION genbot_last_event_seq() RETURNS BIGINT LANGUAGE plpgsql AS $$
       BEGIN
         PERFORM pg_advisory_xact_lock(1734700660);
         RETURN (SELECT COALESCE(MAX(seq), 0) FROM events);
       END $$""",
]


async def create(apps, schema_editor) -> None:
    statements = BOTH + (POSTGRES if schema_editor.DIALECT != "sqlite" else [])
    for statement in statements:
        await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0012_job_counts")]

    operations = [ops.RunPython(create)]
