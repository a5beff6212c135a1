"""PostgreSQL: a job statement's events are written by one INSERT per statement, not one
per row.

Migration 0002 wrote each changed job's event from a row trigger: a claim or completion
of k jobs ran k INSERTs, each taking the event log's lock and sending its NOTIFY
(migrations 0009, 0013). Batched claims and completions (storage.queries.CLAIM_MANY,
COMPLETE_MANY) change many jobs in one statement, so the events are now written from a
statement trigger over the statement's transition tables: one INSERT, one lock, one
NOTIFY, the events in job-id order. A statement that changes no status and asks no
cancel (a heartbeat) writes nothing and wakes nobody. The events are the same as before.
SQLite keeps its row triggers: it has one writer, no lock and no NOTIFY.

The job counts (migration 0012) were spread over 16 shards by job id, so a batch of
ten jobs touched up to ten counter rows per status. They are now spread by the writing
connection: one statement adds its difference to one counter row per (status,
priority), and two connections still rarely share one. A shard's own figure may go
below zero (jobs queued through one connection and claimed through another); readers
sum the shards, as before.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

_CHANGED = """FROM new_jobs n JOIN old_jobs o ON o.id = n.id
           WHERE n.status IS DISTINCT FROM o.status
              OR (n.cancel_requested AND NOT o.cancel_requested)"""

POSTGRES = [
    f"""CREATE FUNCTION genbot_jobs_events() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF EXISTS (SELECT 1 {_CHANGED}) THEN
           INSERT INTO events (at, kind, batch_id, job_id, data)
           SELECT n.updated_at,
                  CASE WHEN n.status IS DISTINCT FROM o.status THEN n.status
                       ELSE 'cancel_requested' END,
                  n.batch_id, n.id,
                  CASE WHEN n.status IS DISTINCT FROM o.status
                       THEN jsonb_build_object('from', o.status, 'row', n.row,
                                               'attempts', n.attempts,
                                               'owner', COALESCE(n.lease_owner, o.lease_owner),
                                               'error', n.error)
                       ELSE jsonb_build_object('row', n.row, 'owner', n.lease_owner) END
           {_CHANGED}
           ORDER BY n.id;
         END IF;
         RETURN NULL;
       END $$""",
    "DROP TRIGGER jobs_event ON jobs",
    "DROP FUNCTION genbot_job_event()",
    """CREATE TRIGGER jobs_events AFTER UPDATE ON jobs
       REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_jobs_events()""",
]


async def statement_events(apps, schema_editor) -> None:
    if schema_editor.DIALECT != "sqlite":
        for statement in POSTGRES + by_connection():
            await schema_editor.client.execute_query(statement)


def by_connection() -> list[str]:
    """Migration 0012's counting functions, sharded by the writing connection."""
    import importlib
    counts = importlib.import_module("storage.migrations.0012_job_counts")
    new = counts._NEW.replace("id % 16", "pg_backend_pid() % 16")
    old = counts._OLD.replace("id % 16", "pg_backend_pid() % 16")
    return [statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
            for statement in counts.POSTGRES[1:4]
            for statement in [statement.replace(counts._NEW, new).replace(counts._OLD, old)]]


class Migration(migrations.Migration):
    dependencies = [("storage", "0017_placement_view")]

    operations = [ops.RunPython(statement_events)]
