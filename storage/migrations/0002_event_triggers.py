"""Every job transition and pause/resume appends to `events`, written by the database itself.

A trigger cannot be forgotten by a code path, and it commits in the same statement
as the change it records, so the event log is never behind or ahead of the jobs.

On PostgreSQL, sequence numbers are handed out at insert but become visible at
commit, so a reader could see seq 11 before seq 10 commits and then skip 10. A
statement-level lock taken before each insert into `events` (held to commit)
makes sequence order equal commit order, so "everything after my last seq" is
exact on both backends. On SQLite writes are serialised already.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

SQLITE = [
    """CREATE TRIGGER jobs_status_event AFTER UPDATE OF status ON jobs
       WHEN NEW.status <> OLD.status
       BEGIN
         INSERT INTO events (at, kind, batch_id, job_id, data)
         VALUES (NEW.updated_at, NEW.status, NEW.batch_id, NEW.id,
                 json_object('from', OLD.status, 'row', NEW.row, 'attempts', NEW.attempts,
                             'owner', COALESCE(NEW.lease_owner, OLD.lease_owner),
                             'error', NEW.error));
       END""",
    """CREATE TRIGGER jobs_cancel_event AFTER UPDATE OF cancel_requested ON jobs
       WHEN NEW.cancel_requested AND NOT OLD.cancel_requested AND NEW.status = OLD.status
       BEGIN
         INSERT INTO events (at, kind, batch_id, job_id, data)
         VALUES (NEW.updated_at, 'cancel_requested', NEW.batch_id, NEW.id,
                 json_object('row', NEW.row, 'owner', NEW.lease_owner));
       END""",
    """CREATE TRIGGER queue_state_event AFTER UPDATE OF paused ON queue_state
       WHEN NEW.paused <> OLD.paused
       BEGIN
         INSERT INTO events (at, kind, data)
         VALUES (NEW.changed_at, CASE WHEN NEW.paused THEN 'paused' ELSE 'resumed' END,
                 json_object('by', NEW.changed_by));
       END""",
    "INSERT INTO queue_state (id, paused) VALUES (1, 0)",
]

POSTGRES = [
    """CREATE FUNCTION genbot_events_serialize() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         PERFORM pg_advisory_xact_lock(1734700660);
         RETURN NULL;
       END $$""",
    """CREATE TRIGGER events_serialize BEFORE INSERT ON events
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_events_serialize()""",
    """CREATE FUNCTION genbot_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.status IS DISTINCT FROM OLD.status THEN
           INSERT INTO events (at, kind, batch_id, job_id, data)
           VALUES (NEW.updated_at, NEW.status, NEW.batch_id, NEW.id,
                   jsonb_build_object('from', OLD.status, 'row', NEW.row,
                                      'attempts', NEW.attempts,
                                      'owner', COALESCE(NEW.lease_owner, OLD.lease_owner),
                                      'error', NEW.error));
         ELSE
           INSERT INTO events (at, kind, batch_id, job_id, data)
           VALUES (NEW.updated_at, 'cancel_requested', NEW.batch_id, NEW.id,
                   jsonb_build_object('row', NEW.row, 'owner', NEW.lease_owner));
         END IF;
         RETURN NULL;
       END $$""",
    """CREATE TRIGGER jobs_event AFTER UPDATE ON jobs FOR EACH ROW
       WHEN (NEW.status IS DISTINCT FROM OLD.status
             OR (NEW.cancel_requested AND NOT OLD.cancel_requested))
       EXECUTE FUNCTION genbot_job_event()""",
    """CREATE FUNCTION genbot_queue_state_event() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO events (at, kind, data)
         VALUES (NEW.changed_at, CASE WHEN NEW.paused THEN 'paused' ELSE 'resumed' END,
                 jsonb_build_object('by', NEW.changed_by));
         RETURN NULL;
       END $$""",
    """CREATE TRIGGER queue_state_event AFTER UPDATE ON queue_state FOR EACH ROW
       WHEN (NEW.paused IS DISTINCT FROM OLD.paused)
       EXECUTE FUNCTION genbot_queue_state_event()""",
    "INSERT INTO queue_state (id, paused) VALUES (1, FALSE)",
]


async def create_triggers(apps, schema_editor) -> None:
    statements = SQLITE if schema_editor.DIALECT == "sqlite" else POSTGRES
    for statement in statements:
        await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0001_initial")]

    operations = [ops.RunPython(create_triggers)]
