"""Template versions: every template the service sees is kept, numbered per name, with the
labels (production …) that say which version a plain name means."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [("storage", "0014_lineage_ratings")]

    initial = False

    operations = [
        ops.CreateModel(
            name="TemplateVersion",
            fields=[
                ("id", fields.BigIntField(generated=True, primary_key=True, unique=True,
                                          db_index=True)),
                ("name", fields.CharField(max_length=200)),
                ("number", fields.IntField(description="1, 2, 3 … per name, in the order "
                                                       "first seen")),
                ("hash", fields.CharField(description="templates.loader.version_of",
                                          max_length=64)),
                ("content", fields.JSONField(
                    description="the template file, and its ComfyUI workflow",
                    encoder=functools.partial(dumps, separators=(",", ":")), decoder=loads)),
                ("source", fields.CharField(description="who or what first showed it",
                                            max_length=300)),
                ("created_at", fields.FloatField()),
            ],
            options={"table": "template_versions", "app": "storage", "pk_attr": "id",
                     "unique_together": (("name", "number"), ("name", "hash")),
                     "table_description": "A template as the service saw it: numbered per "
                     "name, one row per distinct content,"},
            bases=["Model"],
        ),
        ops.CreateModel(
            name="TemplateLabel",
            fields=[
                ("id", fields.BigIntField(generated=True, primary_key=True, unique=True,
                                          db_index=True)),
                ("name", fields.CharField(max_length=200)),
                ("label", fields.CharField(max_length=64)),
                ("number", fields.IntField()),
                ("moved_by", fields.CharField(max_length=200)),
                ("moved_at", fields.FloatField()),
            ],
            options={"table": "template_labels", "app": "storage", "pk_attr": "id",
                     "unique_together": (("name", "label"),),
                     "table_description": "A name for one version of a template, moved by "
                     "`promote` (e.g. production: the"},
            bases=["Model"],
        ),
    ]
