"""The tables. Only `storage.queue` writes batches, jobs and queue state.

Times are Unix seconds (floats) from the queue's clock, so the same SQL compares
them on SQLite and PostgreSQL and tests can move time forward.
"""

from tortoise import fields
from tortoise.models import Model


class Batch(Model):
    """One submission: a template applied to the rows of one sheet."""

    id = fields.BigIntField(primary_key=True)
    template = fields.CharField(max_length=200)
    submitter = fields.CharField(max_length=200, description="platform:user id")
    platform = fields.CharField(max_length=32)
    conversation = fields.CharField(max_length=200, null=True)
    thread = fields.CharField(max_length=200, null=True)
    priority = fields.SmallIntField(description="0 urgent, 1 high, 2 normal, 3 low")
    idempotency_key = fields.CharField(max_length=200, null=True, unique=True)
    total_jobs = fields.IntField()
    meta = fields.JSONField(default=dict)
    created_at = fields.FloatField()
    signed_off_by = fields.CharField(max_length=200, null=True, description="who approved it")
    signed_off_at = fields.FloatField(null=True)

    class Meta:
        table = "batches"


class Job(Model):
    """One row of a batch. Status moves queued -> running -> succeeded | failed | canceled."""

    id = fields.BigIntField(primary_key=True)
    batch = fields.ForeignKeyField("storage.Batch", related_name="jobs", on_delete=fields.CASCADE)
    row = fields.IntField(description="the row number the user sees in the sheet")
    workflow = fields.JSONField()  # the template with this row's values bound in
    status = fields.CharField(max_length=16)
    # Copied from the batch so a claim reads one table.
    priority = fields.SmallIntField()
    submitter = fields.CharField(max_length=200)
    fair_rank = fields.BigIntField(description="round-robin turn among submitters of a class")
    affinity = fields.CharField(max_length=200, null=True, description="e.g. the model it needs")
    attempts = fields.IntField(default=0)
    not_before = fields.FloatField(default=0)
    lease_owner = fields.CharField(max_length=200, null=True)
    lease_token = fields.CharField(max_length=64, null=True)
    lease_expires_at = fields.FloatField(null=True)
    leased_at = fields.FloatField(null=True, description="when its lease was taken")
    cancel_requested = fields.BooleanField(default=False)
    outputs = fields.JSONField(default=list)
    error = fields.TextField(null=True)
    enqueued_at = fields.FloatField()
    started_at = fields.FloatField(null=True)
    progressed_at = fields.FloatField(null=True, description="its last progress event")
    finished_at = fields.FloatField(null=True)
    updated_at = fields.FloatField()
    # Iteration (keep, again, vary, upscale, edit): the image a job was made from, how, and
    # the rating people gave its image. No foreign key: retention may forget the parent.
    parent_job_id = fields.BigIntField(null=True)
    action = fields.CharField(max_length=16, null=True)
    # Its review, by storage.reviews' codes: 1 approved (kept), -1 rejected, 2 changes
    # requested, null unreviewed (the description is as migration 0014 wrote it).
    rating = fields.SmallIntField(null=True, description="1 kept, -1 rejected, null unrated")
    rated_by = fields.CharField(max_length=200, null=True)
    rated_at = fields.FloatField(null=True)
    review_note = fields.TextField(null=True, description="a rejection's reason, a change's note")
    stars = fields.SmallIntField(null=True, description="1-5, a reviewer's grade")

    class Meta:
        table = "jobs"
        # The claim path's indexes are partial (WHERE status = ...), which tortoise cannot
        # declare: they are created in migration 0003_partial_indexes.
        indexes = (("batch_id",),)


class Event(Model):
    """Append-only log of every transition. Consumers resume from their last seq.

    Job transitions are written by database triggers (migration 0002), so no
    code path can change a job's state without leaving its event.
    (No semicolons in model docstrings: they become table comments, and tortoise's
    SQLite migrator splits statements on them.)
    """

    seq = fields.BigIntField(primary_key=True)
    at = fields.FloatField()
    kind = fields.CharField(max_length=32)
    batch_id = fields.BigIntField(null=True)
    job_id = fields.BigIntField(null=True)
    data = fields.JSONField(default=dict)

    class Meta:
        table = "events"


class QueueState(Model):
    ("A single row (id 1): whether claiming is paused. "
     "Lives in the database so pause survives restart.")

    id = fields.IntField(primary_key=True)
    paused = fields.BooleanField(default=False)
    changed_by = fields.CharField(max_length=200, null=True)
    changed_at = fields.FloatField(null=True)

    class Meta:
        table = "queue_state"


class Attachment(Model):
    """A file someone sent the bot, kept a while so that a later /gen can name it.

    `handle` is what the platform needs to download it (a URL, a file id, a downloadCode).
    """

    id = fields.BigIntField(primary_key=True)
    platform = fields.CharField(max_length=32)
    user_id = fields.CharField(max_length=200)
    conversation = fields.CharField(max_length=200)
    message_id = fields.CharField(max_length=200, null=True)
    name = fields.CharField(max_length=500)
    name_key = fields.CharField(max_length=500, description="the name as matched: NFKC, casefolded")
    size = fields.BigIntField()
    handle = fields.JSONField(default=dict)
    received_at = fields.FloatField()
    expires_at = fields.FloatField()

    class Meta:
        table = "attachments"
        indexes = (("platform", "user_id", "received_at"), ("expires_at",))


class Grant(Model):
    """A role given by /grant, on top of the roles in the config."""

    id = fields.BigIntField(primary_key=True)
    platform = fields.CharField(max_length=32)
    user_id = fields.CharField(max_length=200)
    role = fields.CharField(max_length=16)
    granted_by = fields.CharField(max_length=200)
    granted_at = fields.FloatField()
    max_priority = fields.SmallIntField(
        null=True, description="the most urgent priority granted (null: that of the role)")

    class Meta:
        table = "grants"
        unique_together = (("platform", "user_id"),)


class EndedSession(Model):
    """A dashboard session signed out before its cookie expires: refused until then."""

    nonce = fields.CharField(max_length=64, primary_key=True)
    expires_at = fields.FloatField()

    class Meta:
        table = "ended_sessions"
        indexes = (("expires_at",),)


class AuditEntry(Model):
    """Who did or was refused what, when and where: every refusal and every admin action."""

    id = fields.BigIntField(primary_key=True)
    at = fields.FloatField()
    platform = fields.CharField(max_length=32)
    user_id = fields.CharField(max_length=200)
    conversation = fields.CharField(max_length=200, null=True)
    action = fields.CharField(max_length=64)
    allowed = fields.BooleanField()
    detail = fields.JSONField(default=dict)

    class Meta:
        table = "audit"
        indexes = (("at",),)


class OutboxMessage(Model):
    """A message the bot owes someone: acceptance, progress, an image, a notice, a summary.

    Written before it is sent and marked with the platform's id once it is, so after a
    crash nothing owed is lost and nothing sent is sent again. `key` makes writing the
    same message twice a no-op (the notifier may replay events after a restart).
    """

    id = fields.BigIntField(primary_key=True)
    key = fields.CharField(max_length=200, unique=True)
    platform = fields.CharField(max_length=32)
    conversation = fields.CharField(max_length=200)
    thread = fields.CharField(max_length=200, null=True)
    kind = fields.CharField(max_length=16, description="text, image, file or progress")
    payload = fields.JSONField(default=dict)
    status = fields.CharField(max_length=16, description="pending, sent or failed")
    attempts = fields.IntField(default=0)
    version = fields.IntField(default=0, description="bumped by each newer progress state")
    next_at = fields.FloatField()
    platform_id = fields.CharField(max_length=200, null=True)
    error = fields.TextField(null=True)
    created_at = fields.FloatField()
    updated_at = fields.FloatField()

    class Meta:
        table = "outbox"
        indexes = (("status", "next_at"), ("platform", "conversation", "thread", "id"))


class Cursor(Model):
    """How far a reader of the event log has got (e.g. the notifier), to resume from."""

    name = fields.CharField(max_length=64, primary_key=True)
    seq = fields.BigIntField()

    class Meta:
        table = "cursors"


class Schedule(Model):
    """A recurring batch: a sheet run on a cron, kept here so it survives restarts.

    The sheet and the pictures it names are copied into the file store when the
    schedule is made (chat uploads expire); each firing reads them again, so seeds left
    empty are new each time.
    """

    id = fields.BigIntField(primary_key=True)
    cron = fields.CharField(max_length=100, description="five fields, as crontab")
    timezone = fields.CharField(max_length=64)
    template = fields.CharField(max_length=200)
    sheet = fields.CharField(max_length=300, description="the sheet, relative to the file store")
    files = fields.JSONField(default=dict, description="picture name -> its stored path")
    submitter = fields.CharField(max_length=200, description="platform:user id")
    platform = fields.CharField(max_length=32)
    conversation = fields.CharField(max_length=200, null=True)
    priority = fields.SmallIntField()
    meta = fields.JSONField(default=dict)
    created_at = fields.FloatField()
    fired_at = fields.FloatField(description="the last fire time queued (creation at first)")

    class Meta:
        table = "schedules"


class Worker(Model):
    """An executor process, as its heartbeats describe it: where it runs, what it holds,
    what it is doing. One row per process (its lease owner name); kept after it stops so
    `/queue` and the dashboard can say it stopped or was lost."""

    id = fields.CharField(max_length=200, primary_key=True, description="its lease owner name")
    host = fields.CharField(max_length=200)
    pid = fields.IntField()
    device = fields.CharField(max_length=32)
    version = fields.CharField(max_length=32)
    state = fields.CharField(max_length=16, description="idle, busy, stopped or lost")
    job_id = fields.BigIntField(null=True, description="the job it runs (the first of a group)")
    memory_total = fields.BigIntField(null=True, description="device memory, bytes")
    memory_used = fields.BigIntField(null=True)
    models = fields.JSONField(default=list, description="models resident on its device")
    allow = fields.JSONField(null=True, description="models it may run, null for any")
    stats = fields.JSONField(default=dict, description="jobs run, model cache counters")
    started_at = fields.FloatField()
    seen_at = fields.FloatField(description="its last heartbeat")

    class Meta:
        table = "workers"


class TemplateVersion(Model):
    """A template as the service saw it: numbered per name, one row per distinct content,
    so every host and executor sees the same versions and a job names the one it ran."""

    id = fields.BigIntField(primary_key=True)
    name = fields.CharField(max_length=200)
    number = fields.IntField(description="1, 2, 3 … per name, in the order first seen")
    hash = fields.CharField(max_length=64, description="templates.loader.version_of")
    content = fields.JSONField(description="the template file, and its ComfyUI workflow")
    source = fields.CharField(max_length=300, description="who or what first showed it")
    created_at = fields.FloatField()

    class Meta:
        table = "template_versions"
        unique_together = (("name", "number"), ("name", "hash"))


class TemplateLabel(Model):
    """A name for one version of a template, moved by `promote` (e.g. production: the
    version used when no version is named)."""

    id = fields.BigIntField(primary_key=True)
    name = fields.CharField(max_length=200)
    label = fields.CharField(max_length=64)
    number = fields.IntField()
    moved_by = fields.CharField(max_length=200)
    moved_at = fields.FloatField()

    class Meta:
        table = "template_labels"
        unique_together = (("name", "label"),)


class WebhookEndpoint(Model):
    """Where signed event notices go, disabled once it answers 410 Gone."""

    id = fields.CharField(max_length=24, primary_key=True)
    url = fields.TextField()
    kind = fields.CharField(max_length=16, description="config (a [[webhooks]] entry) or "
                                                       "callback (a submission callback_url)")
    description = fields.CharField(max_length=300, default="")
    disabled_at = fields.FloatField(null=True)
    disabled_reason = fields.TextField(null=True)
    created_at = fields.FloatField()

    class Meta:
        table = "webhook_endpoints"


class RenditionFile(Model):
    """A file made from the image of a job for a sales channel, and what its checks found."""

    id = fields.BigIntField(primary_key=True)
    job_id = fields.BigIntField()
    batch_id = fields.BigIntField()
    channel = fields.CharField(max_length=40)
    rendition = fields.CharField(max_length=40)
    name = fields.CharField(max_length=200, description="its file name, as delivered")
    path = fields.CharField(max_length=500, description="in the output store")
    width = fields.IntField()
    height = fields.IntField()
    bytes = fields.BigIntField()
    sha256 = fields.CharField(max_length=64)
    findings = fields.JSONField(default=list,
                                description="the rules it breaks, empty when it passes")
    labels = fields.JSONField(default=dict, description="the AI-content labels it carries")
    created_at = fields.FloatField()

    class Meta:
        table = "renditions"
        unique_together = (("job_id", "channel", "rendition"),)
        indexes = (("batch_id", "channel"),)
