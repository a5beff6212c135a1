"""The attachment inbox: files people sent the bot, for a later /gen to name."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('storage', '0003_partial_indexes')]

    initial = False

    operations = [
        ops.CreateModel(
            name='Attachment',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('platform', fields.CharField(max_length=32)),
                ('user_id', fields.CharField(max_length=200)),
                ('conversation', fields.CharField(max_length=200)),
                ('message_id', fields.CharField(null=True, max_length=200)),
                ('name', fields.CharField(max_length=500)),
                ('name_key', fields.CharField(description='the name as matched: NFKC, casefolded', max_length=500)),
                ('size', fields.BigIntField()),
                ('handle', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('received_at', fields.FloatField()),
                ('expires_at', fields.FloatField()),
            ],
            options={'table': 'attachments', 'app': 'storage', 'indexes': [Index(fields=['platform', 'user_id', 'received_at']), Index(fields=['expires_at'])], 'pk_attr': 'id', 'table_description': 'A file someone sent the bot, kept a while so that a later /gen can name it.'},
            bases=['Model'],
        ),
    ]
