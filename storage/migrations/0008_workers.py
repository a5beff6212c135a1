"""The worker registry: one row per executor process, refreshed by its heartbeats."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.migrations import operations as ops

_json = dict(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)


class Migration(migrations.Migration):
    dependencies = [('storage', '0007_schedules')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Worker',
            fields=[
                ('id', fields.CharField(primary_key=True, description='its lease owner name', max_length=200, unique=True, db_index=True)),
                ('host', fields.CharField(max_length=200)),
                ('pid', fields.IntField()),
                ('device', fields.CharField(max_length=32)),
                ('version', fields.CharField(max_length=32)),
                ('state', fields.CharField(description='idle, busy, stopped or lost', max_length=16)),
                ('job_id', fields.BigIntField(null=True, description='the job it runs (the first of a group)')),
                ('memory_total', fields.BigIntField(null=True, description='device memory, bytes')),
                ('memory_used', fields.BigIntField(null=True)),
                ('models', fields.JSONField(default=list, description='models resident on its device', **_json)),
                ('allow', fields.JSONField(null=True, description='models it may run, null for any', **_json)),
                ('stats', fields.JSONField(default=dict, description='jobs run, model cache counters', **_json)),
                ('started_at', fields.FloatField()),
                ('seen_at', fields.FloatField(description='its last heartbeat')),
            ],
            options={'table': 'workers', 'app': 'storage', 'pk_attr': 'id', 'table_description': 'An executor process, as its heartbeats describe it: where it runs, what it holds,'},
            bases=['Model'],
        ),
    ]
