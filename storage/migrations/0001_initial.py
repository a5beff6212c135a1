import functools
from json import dumps, loads

from tortoise import fields, migrations
from tortoise.fields.base import OnDelete
from tortoise.indexes import Index
from tortoise.migrations import operations as ops


class Migration(migrations.Migration):
    initial = True

    operations = [
        ops.CreateModel(
            name='Batch',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('template', fields.CharField(max_length=200)),
                ('submitter', fields.CharField(description='platform:user id', max_length=200)),
                ('platform', fields.CharField(max_length=32)),
                ('conversation', fields.CharField(null=True, max_length=200)),
                ('thread', fields.CharField(null=True, max_length=200)),
                ('priority', fields.SmallIntField(description='0 urgent, 1 high, 2 normal, 3 low')),
                ('idempotency_key', fields.CharField(null=True, unique=True, max_length=200)),
                ('total_jobs', fields.IntField()),
                ('meta', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('created_at', fields.FloatField()),
            ],
            options={'table': 'batches', 'app': 'storage', 'pk_attr': 'id', 'table_description': 'One submission: a template applied to the rows of one sheet.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Event',
            fields=[
                ('seq', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('at', fields.FloatField()),
                ('kind', fields.CharField(max_length=32)),
                ('batch_id', fields.BigIntField(null=True)),
                ('job_id', fields.BigIntField(null=True)),
                ('data', fields.JSONField(default=dict, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
            ],
            options={'table': 'events', 'app': 'storage', 'pk_attr': 'seq', 'table_description': 'Append-only log of every transition. Consumers resume from their last seq.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='Job',
            fields=[
                ('id', fields.BigIntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('batch', fields.ForeignKeyField('storage.Batch', source_field='batch_id', db_constraint=True, to_field='id', related_name='jobs', on_delete=OnDelete.CASCADE)),
                ('row', fields.IntField(description='the row number the user sees in the sheet')),
                ('params', fields.JSONField(encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('status', fields.CharField(max_length=16)),
                ('priority', fields.SmallIntField()),
                ('submitter', fields.CharField(max_length=200)),
                ('fair_rank', fields.BigIntField(description='round-robin turn among submitters of a class')),
                ('affinity', fields.CharField(null=True, description='e.g. the model it needs', max_length=200)),
                ('attempts', fields.IntField(default=0)),
                ('not_before', fields.FloatField(default=0)),
                ('lease_owner', fields.CharField(null=True, max_length=200)),
                ('lease_token', fields.CharField(null=True, max_length=64)),
                ('lease_expires_at', fields.FloatField(null=True)),
                ('cancel_requested', fields.BooleanField(default=False)),
                ('outputs', fields.JSONField(default=list, encoder=functools.partial(dumps, separators=(',', ':')), decoder=loads)),
                ('error', fields.TextField(null=True, unique=False)),
                ('enqueued_at', fields.FloatField()),
                ('started_at', fields.FloatField(null=True)),
                ('finished_at', fields.FloatField(null=True)),
                ('updated_at', fields.FloatField()),
            ],
            options={'table': 'jobs', 'app': 'storage', 'indexes': [Index(fields=['status', 'priority', 'fair_rank', 'id']), Index(fields=['status', 'priority', 'submitter', 'affinity', 'fair_rank']), Index(fields=['status', 'lease_expires_at']), Index(fields=['status', 'finished_at']), Index(fields=['batch_id', 'status'])], 'pk_attr': 'id', 'table_description': 'One row of a batch. Status moves queued -> running -> succeeded | failed | canceled.'},
            bases=['Model'],
        ),
        ops.CreateModel(
            name='QueueState',
            fields=[
                ('id', fields.IntField(generated=True, primary_key=True, unique=True, db_index=True)),
                ('paused', fields.BooleanField(default=False)),
                ('changed_by', fields.CharField(null=True, max_length=200)),
                ('changed_at', fields.FloatField(null=True)),
            ],
            options={'table': 'queue_state', 'app': 'storage', 'pk_attr': 'id', 'table_description': 'A single row (id 1): whether claiming is paused. Lives in the database so pause survives restart.'},
            bases=['Model'],
        ),
    ]
