"""Renditions (storage.renditions): the files made from a job's image for each sales
channel — its name as delivered, where it is stored, its checksum, and what the channel's
checks found. One row per job, channel and rendition: a job that runs again replaces
its rows."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops

_json = functools.partial(dumps, separators=(",", ":"))


class Migration(migrations.Migration):
    dependencies = [("storage", "0023_reviews")]

    initial = False

    operations = [
        ops.CreateModel(
            name="RenditionFile",
            fields=[
                ("id", fields.BigIntField(generated=True, primary_key=True, unique=True,
                                          db_index=True)),
                ("job_id", fields.BigIntField()),
                ("batch_id", fields.BigIntField()),
                ("channel", fields.CharField(max_length=40)),
                ("rendition", fields.CharField(max_length=40)),
                ("name", fields.CharField(description="its file name, as delivered",
                                          max_length=200)),
                ("path", fields.CharField(description="in the output store", max_length=500)),
                ("width", fields.IntField()),
                ("height", fields.IntField()),
                ("bytes", fields.BigIntField()),
                ("sha256", fields.CharField(max_length=64)),
                ("findings", fields.JSONField(default=list, description="the rules it breaks, "
                                              "empty when it passes", encoder=_json, decoder=loads)),
                ("labels", fields.JSONField(default=dict, description="the AI-content labels "
                                            "it carries", encoder=_json, decoder=loads)),
                ("created_at", fields.FloatField()),
            ],
            options={"table": "renditions", "app": "storage", "pk_attr": "id",
                     "unique_together": (("job_id", "channel", "rendition"),),
                     "indexes": [Index(fields=["batch_id", "channel"])],
                     "table_description": "A file made from the image of a job for a sales "
                     "channel, and what its checks found."},
            bases=["Model"],
        ),
    ]
