"""Recurring batches (schedules), kept in the database so they survive restarts."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('storage', '0006_outbox')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Schedule',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('cron', fields.CharField(description='five fields, as crontab', max_length=100)),
                ('timezone', fields.CharField(max_length=64)),
                ('template', fields.CharField(max_length=200)),
                ('sheet', fields.CharField(description='the sheet, relative to the file store', max_length=300)),
                ('files', fields.JSONField(default=dict, description='picture name -> its stored path', encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('submitter', fields.CharField(description='platform:user id', max_length=200)),
                ('platform', fields.CharField(max_length=32)),
                ('conversation', fields.CharField(null=True, max_length=200)),
                ('priority', fields.SmallIntField()),
                ('meta', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('created_at', fields.FloatField()),
                ('fired_at', fields.FloatField(description='the last fire time queued (creation at first)')),
            ],
            options={'table': 'schedules', 'app': 'storage', 'pk_attr': 'id', 'table_description': 'A recurring batch: a sheet run on a cron, kept here so it survives restarts.'},
            bases=['Model'],
        ),
    ]

