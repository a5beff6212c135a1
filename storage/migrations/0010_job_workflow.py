"""A job's bound workflow is called what it is: the column `params` becomes `workflow`.

(It always held the whole bound workflow — nodes, outputs and the row's values — not
only the parameters.) Rows are kept as they are; only the column's name changes."""

from tortoise import migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0009_event_notify")]

    operations = [ops.RenameField(model_name="Job", old_name="params", new_name="workflow")]
