"""Review (storage.reviews): a rejection's reason or a change's note and a 1-5 grade on
each job; who signed a batch off, and when. jobs.rating gains the code 2 (changes
requested; its column's description stays: altering it would rebuild the table on
SQLite, under its views). Rows from before have none of these."""

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0022_grant_priority")]

    operations = [
        ops.AddField(model_name="Job", name="review_note", field=fields.TextField(
            null=True, description="a rejection's reason, a change's note")),
        ops.AddField(model_name="Job", name="stars", field=fields.SmallIntField(
            null=True, description="1-5, a reviewer's grade")),
        ops.AddField(model_name="Batch", name="signed_off_by", field=fields.CharField(
            max_length=200, null=True, description="who approved it")),
        ops.AddField(model_name="Batch", name="signed_off_at", field=fields.FloatField(
            null=True)),
    ]
