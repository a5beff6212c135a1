"""Webhook endpoints: where signed event notices go, and whether each still takes them.

Deliveries themselves are outbox rows (platform `webhook:<endpoint>`), sent and retried
like chat messages. This table remembers each endpoint's address and, once it answered
410 Gone, that it is disabled — across restarts and on every host. The index lists one
endpoint's deliveries, newest first, without walking the chat's outbox."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


async def index(apps, schema_editor) -> None:
    await schema_editor.client.execute_query(
        "CREATE INDEX outbox_platform ON outbox (platform, id)")


class Migration(migrations.Migration):
    dependencies = [("storage", "0015_template_versions")]

    initial = False

    operations = [
        ops.CreateModel(
            name="WebhookEndpoint",
            fields=[
                ("id", fields.CharField(max_length=24, primary_key=True, unique=True,
                                        db_index=True)),
                ("url", fields.TextField()),
                ("kind", fields.CharField(description="config (a [[webhooks]] entry) or "
                                                      "callback (a submission callback_url)",
                                          max_length=16)),
                ("description", fields.CharField(default="", max_length=300)),
                ("disabled_at", fields.FloatField(null=True)),
                ("disabled_reason", fields.TextField(null=True)),
                ("created_at", fields.FloatField()),
            ],
            options={"table": "webhook_endpoints", "app": "storage", "pk_attr": "id",
                     "table_description": "Where signed event notices go, disabled once it "
                     "answers 410 Gone."},
            bases=["Model"],
        ),
        ops.RunPython(index),
    ]
