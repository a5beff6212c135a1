"""`genbot_placement`: what an autoscaler needs, per placement, as one cheap view.

One row per (engine, affinity) with work: `ready` (queued, due, not claimed ahead —
zero while the queue is paused, since nothing could take them), `ahead` (claimed
ahead by a busy executor), `running`, `delayed` (waiting for a retry's backoff) and
`oldest_ready_seconds`. `engine` is "diffusers" for genbot's own jobs and the prefix
of an "ENGINE:NAME" affinity otherwise; `affinity` is the model (diffusers) or the
template (comfyui), empty for a job any executor may take.

/metrics serves the same rows (bot.web.metrics); KEDA's postgresql trigger can query
the view directly (deploy/kubernetes). It reads only the queued and running jobs,
through their partial indexes, so it costs the same at any history size.
"""

from tortoise import migrations
from tortoise.migrations import operations as ops

_VIEW = """CREATE VIEW genbot_placement AS
SELECT engine, affinity,
  SUM(CASE WHEN ready THEN 1 ELSE 0 END) AS ready,
  SUM(CASE WHEN status = 'queued' AND lease_token IS NOT NULL THEN 1 ELSE 0 END) AS ahead,
  SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running,
  SUM(CASE WHEN status = 'queued' AND not_before > now THEN 1 ELSE 0 END) AS delayed,
  COALESCE(MAX(CASE WHEN ready THEN now - {waiting_since} END), 0) AS oldest_ready_seconds
FROM (
  SELECT {engine} AS engine, {affinity} AS affinity, status, lease_token, not_before,
    enqueued_at, now,
    (status = 'queued' AND lease_token IS NULL AND not_before <= now AND NOT paused) AS ready
  FROM jobs, (SELECT {now} AS now, paused FROM queue_state WHERE id = 1) clock
  WHERE status IN ('queued', 'running')
) placed
GROUP BY engine, affinity"""

_WAITING_SINCE = "CASE WHEN not_before > enqueued_at THEN not_before ELSE enqueued_at END"

SQLITE = _VIEW.format(
    engine="CASE WHEN instr(affinity, ':') > 0 THEN substr(affinity, 1, instr(affinity, ':') - 1)"
           " ELSE 'diffusers' END",
    affinity="CASE WHEN instr(affinity, ':') > 0 THEN substr(affinity, instr(affinity, ':') + 1)"
             " ELSE COALESCE(affinity, '') END",
    now="(julianday('now') - 2440587.5) * 86400.0", waiting_since=_WAITING_SINCE)

POSTGRES = _VIEW.format(
    engine="CASE WHEN strpos(affinity, ':') > 0 THEN split_part(affinity, ':', 1)"
           " ELSE 'diffusers' END",
    affinity="CASE WHEN strpos(affinity, ':') > 0 THEN substr(affinity, strpos(affinity, ':') + 1)"
             " ELSE COALESCE(affinity, '') END",
    now="EXTRACT(EPOCH FROM clock_timestamp())::double precision",
    waiting_since=_WAITING_SINCE)


async def create_view(apps, schema_editor) -> None:
    await schema_editor.client.execute_query(
        SQLITE if schema_editor.DIALECT == "sqlite" else POSTGRES)


class Migration(migrations.Migration):
    dependencies = [("storage", "0016_webhook_endpoints")]

    operations = [ops.RunPython(create_view)]
