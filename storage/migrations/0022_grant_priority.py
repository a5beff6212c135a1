"""A grant may raise one person's highest priority above their role's ([chat]
submitter_max_priority …): `max_priority`, a Priority's number (0 urgent … 3 low); null
leaves the role's. Rows from before have none."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0021_status_check")]

    operations = [
        ops.AddField(model_name="Grant", name="max_priority", field=fields.SmallIntField(
            null=True, description="the most urgent priority granted (null: that of the role)")),
    ]
