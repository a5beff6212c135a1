"""Jobs counted by status and priority as they change, so /queue and /metrics cost the
same with two hundred jobs in the history as with two million.

The database keeps the counts itself, in the statement that changes a job (as it keeps
the event log): no code path can forget them, and they are never behind. On PostgreSQL
the counts are spread over 16 shards by job id, so writers changing different jobs
rarely wait on one counter row, and one statement-level trigger per statement counts
a 5,000-row enqueue in one upsert; readers sum the shards. SQLite has one writer: one
shard, row triggers.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

TABLE = """CREATE TABLE job_counts (
  status VARCHAR(16) NOT NULL, priority INT NOT NULL, shard INT NOT NULL,
  n BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (status, priority, shard))"""

SQLITE = [
    TABLE,
    """CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
       BEGIN
         INSERT INTO job_counts (status, priority, shard, n) VALUES (NEW.status, NEW.priority, 0, 1)
         ON CONFLICT (status, priority, shard) DO UPDATE SET n = n + 1;
       END""",
    """CREATE TRIGGER jobs_count_update AFTER UPDATE OF status, priority ON jobs
       WHEN NEW.status <> OLD.status OR NEW.priority <> OLD.priority
       BEGIN
         UPDATE job_counts SET n = n - 1
         WHERE status = OLD.status AND priority = OLD.priority AND shard = 0;
         INSERT INTO job_counts (status, priority, shard, n) VALUES (NEW.status, NEW.priority, 0, 1)
         ON CONFLICT (status, priority, shard) DO UPDATE SET n = n + 1;
       END""",
    """CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
       BEGIN
         UPDATE job_counts SET n = n - 1
         WHERE status = OLD.status AND priority = OLD.priority AND shard = 0;
       END""",
    """INSERT INTO job_counts (status, priority, shard, n)
       SELECT status, priority, 0, COUNT(*) FROM jobs GROUP BY status, priority""",
]

# Each function adds the difference its statement made, in one upsert, locking counter
# rows in one order (no two statements can wait on each other's).
_UPSERT = """
         INSERT INTO job_counts (status, priority, shard, n)
         SELECT status, priority, shard, SUM(d) FROM ({rows}) changed
         GROUP BY status, priority, shard HAVING SUM(d) <> 0
         ORDER BY status, priority, shard
         ON CONFLICT (status, priority, shard) DO UPDATE SET n = job_counts.n + excluded.n;"""
_NEW = "SELECT status, priority, id % 16 AS shard, 1 AS d FROM new_jobs"
_OLD = "SELECT status, priority, id % 16 AS shard, -1 AS d FROM old_jobs"

POSTGRES = [
    TABLE,
    f"""CREATE FUNCTION genbot_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN {_UPSERT.format(rows=_NEW)}
         RETURN NULL;
       END $$""",
    f"""CREATE FUNCTION genbot_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN {_UPSERT.format(rows=f"{_OLD} UNION ALL {_NEW}")}
         RETURN NULL;
       END $$""",
    f"""CREATE FUNCTION genbot_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN {_UPSERT.format(rows=_OLD)}
         RETURN NULL;
       END $$""",
    """CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS new_jobs
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_count_inserted()""",
    """CREATE TRIGGER jobs_count_update AFTER UPDATE ON jobs
       REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_count_updated()""",
    """CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_jobs
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_count_deleted()""",
    """INSERT INTO job_counts (status, priority, shard, n)
       SELECT status, priority, id % 16, COUNT(*) FROM jobs GROUP BY 1, 2, 3""",
]


async def create_counts(apps, schema_editor) -> None:
    statements = SQLITE if schema_editor.DIALECT == "sqlite" else POSTGRES
    for statement in statements:
        await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0011_ended_sessions")]

    operations = [ops.RunPython(create_counts)]
