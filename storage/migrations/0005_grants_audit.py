"""Permissions: roles given by /grant, and the audit log."""

import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    dependencies = [('storage', '0004_attachments')]

    initial = False

    operations = [
        ops.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('at', fields.FloatField()),
                ('platform', fields.CharField(max_length=32)),
                ('user_id', fields.CharField(max_length=200)),
                ('conversation', fields.CharField(null=True, max_length=200)),
                ('action', fields.CharField(max_length=64)),
                ('allowed', fields.BooleanField()),
                ('detail', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
            ],
            options={'table': 'audit', 'app': 'storage', 'indexes': [Index(fields=['at'])], 'pk_attr': 'id', 'table_description': 'Who did or was refused what, when and where: every refusal and every admin action.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Grant',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('platform', fields.CharField(max_length=32)),
                ('user_id', fields.CharField(max_length=200)),
                ('role', fields.CharField(max_length=16)),
                ('granted_by', fields.CharField(max_length=200)),
                ('granted_at', fields.FloatField()),
            ],
            options={'table': 'grants', 'app': 'storage', 'unique_together': (('platform', 'user_id'),), 'pk_attr': 'id', 'table_description': 'A role given by /grant, on top of the roles in the config.'},
            bases=['Model'],
        ),
    ]
