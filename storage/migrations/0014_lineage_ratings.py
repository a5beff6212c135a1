"""Iterating on images: a job remembers the image it was made from (`parent_job_id`) and
how (`action`: again, vary, upscale, edit), and a finished image carries its rating
(kept 1, rejected -1) with who gave it and when. Rows already queued have none of these.
The indexes find an image's children (its lineage) without walking the jobs table, and
the message of ours a reaction or a thread reply names without walking the outbox."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


async def index(apps, schema_editor) -> None:
    await schema_editor.client.execute_query(
        "CREATE INDEX jobs_parent ON jobs (parent_job_id) WHERE parent_job_id IS NOT NULL")
    # A reaction or a reply names our message by the platform's id: find it by that.
    await schema_editor.client.execute_query(
        "CREATE INDEX outbox_platform_id ON outbox (platform, conversation, platform_id)"
        " WHERE platform_id IS NOT NULL")


class Migration(migrations.Migration):
    dependencies = [("storage", "0013_claim_ahead")]

    operations = [
        ops.AddField(model_name="Job", name="parent_job_id", field=fields.BigIntField(null=True)),
        ops.AddField(model_name="Job", name="action",
                     field=fields.CharField(max_length=16, null=True)),
        ops.AddField(model_name="Job", name="rating", field=fields.SmallIntField(
            null=True, description="1 kept, -1 rejected, null unrated")),
        ops.AddField(model_name="Job", name="rated_by",
                     field=fields.CharField(max_length=200, null=True)),
        ops.AddField(model_name="Job", name="rated_at", field=fields.FloatField(null=True)),
        ops.RunPython(index),
    ]
