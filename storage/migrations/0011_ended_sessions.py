"""Sign-out ends a dashboard session on the server: its cookie is refused from then on,
even where a copy of it was kept."""

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0010_job_workflow")]

    operations = [
        ops.CreateModel(
            name="EndedSession",
            fields=[
                ("nonce", fields.CharField(primary_key=True, max_length=64, unique=True,
                                           db_index=True)),
                ("expires_at", fields.FloatField()),
            ],
            options={"table": "ended_sessions", "app": "storage",
                     "indexes": [Index(fields=["expires_at"])], "pk_attr": "nonce",
                     "table_description": "A dashboard session signed out before its cookie "
                                          "expires: refused until then."},
            bases=["Model"],
        ),
    ]
