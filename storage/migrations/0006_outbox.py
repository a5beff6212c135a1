"""Durable delivery: the outbox of messages owed, and event-log cursors."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('storage', '0005_grants_audit')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Cursor',
            fields=[
                ('name', fields.CharField(primary_key=True, unique=True, db_index=True, max_length=64)),
                ('seq', fields.BigIntField()),
            ],
            options={'table': 'cursors', 'app': 'storage', 'pk_attr': 'name', 'table_description': 'How far a reader of the event log has got (e.g. the notifier), to resume from.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='OutboxMessage',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('key', fields.CharField(unique=True, max_length=200)),
                ('platform', fields.CharField(max_length=32)),
                ('conversation', fields.CharField(max_length=200)),
                ('thread', fields.CharField(null=True, max_length=200)),
                ('kind', fields.CharField(description='text, image, file or progress', max_length=16)),
                ('payload', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('status', fields.CharField(description='pending, sent or failed', max_length=16)),
                ('attempts', fields.IntField(default=0)),
                ('version', fields.IntField(default=0, description='bumped by each newer progress state')),
                ('next_at', fields.FloatField()),
                ('platform_id', fields.CharField(null=True, max_length=200)),
                ('error', fields.TextField(null=True, unique=False)),
                ('created_at', fields.FloatField()),
                ('updated_at', fields.FloatField()),
            ],
            options={'table': 'outbox', 'app': 'storage', 'indexes': [Index(fields=['status', 'next_at']), Index(fields=['platform', 'conversation', 'thread', 'id'])], 'pk_attr': 'id', 'table_description': 'A message the bot owes someone: acceptance, progress, an image, a notice, a summary.'},
            bases=['Model'],
        ),
    ]
