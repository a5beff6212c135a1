"""PostgreSQL: storage settings for tables rewritten all day.

A job row is updated several times in its life (claimed, heartbeats, finished) and the
worker registry, the job counts and the queue state are rewritten every second. Each
update leaves a dead row version behind until vacuum removes it; a queue whose dead
versions pile up reads more pages per claim. So:
- fillfactor leaves room in each page for the next version of its rows (an update that
  stays on its page is cheaper, and can skip the indexes where none changed);
- autovacuum looks at these tables after a few hundred changes instead of after a
  fifth of the table (the default), and the tiny hot tables after any 200 changes;
- analyze keeps the claim's plan on the queue index (see Queue.enqueue).
What no setting can undo — a transaction held open for minutes keeps every dead row
alive — is measured in bench/bloat_bench.py.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

POSTGRES = [
    """ALTER TABLE jobs SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
       autovacuum_vacuum_threshold = 500, autovacuum_analyze_scale_factor = 0.02,
       autovacuum_analyze_threshold = 500, autovacuum_vacuum_cost_delay = 1)""",
    """ALTER TABLE outbox SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.05,
       autovacuum_vacuum_threshold = 500)""",
    """ALTER TABLE workers SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
       autovacuum_vacuum_threshold = 200)""",
    """ALTER TABLE job_counts SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
       autovacuum_vacuum_threshold = 200)""",
    """ALTER TABLE queue_state SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
       autovacuum_vacuum_threshold = 200)""",
]


async def storage_settings(apps, schema_editor) -> None:
    if schema_editor.DIALECT != "sqlite":
        for statement in POSTGRES:
            await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0018_statement_events")]

    operations = [ops.RunPython(storage_settings)]
