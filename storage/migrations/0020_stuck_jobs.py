"""What tells a stuck job from a busy one: when a job's lease was taken (`leased_at`: a
job claimed ahead that has waited far longer than a job runs is held by an executor that
will never start it), and its last progress event (`progressed_at`: a running job whose
executor still renews its lease but whose steps stopped is wedged). Both are written by
the statements that make them true (storage.queries: the claims; PROGRESSED beside
every progress write); rows from before have neither, and are read by their
`updated_at` and `started_at` instead (LEASED_IDLE)."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0019_queue_storage")]

    operations = [
        ops.AddField(model_name="Job", name="leased_at", field=fields.FloatField(
            null=True, description="when its lease was taken")),
        ops.AddField(model_name="Job", name="progressed_at", field=fields.FloatField(
            null=True, description="its last progress event")),
    ]
