"""Every SQL statement of the job queue, in one place, by name.

Written once for both backends with named parameters (:owner, :now), which
storage.db numbers for each driver; callers pass a mapping. Where the dialects differ
the statement is a template with {placeholders}, filled per backend by `for_dialect`.

Each state change is ONE statement, so it is atomic without a transaction on
both backends and costs one commit. The event log is written by triggers
(migration 0002) in the same statement. The states, their sets and the cancel-wins
rule are storage.states', filled in as this module loads.
"""

from __future__ import annotations

import functools
import re

from storage import states
from storage.states import ACTIVE, TERMINAL, Status


def _listed(states: frozenset[Status]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in Status if s in states) + ")"


# The job states, written in the SQL as {queued}, {running} …; the sets as {active} and
# {terminal}; and the rule that a cancel asked of a running job wins over however it
# would otherwise end (done, failed, handed back, its lease run out), as {cancel_wins},
# a branch of the CASE that says what it becomes. All from storage.records; filled in
# every statement of this module as it is loaded (the end of this file).
_STATES = {**{f"{{{s.value}}}": f"'{s.value}'" for s in Status},
           "{active}": _listed(ACTIVE), "{terminal}": _listed(TERMINAL),
           "{cancel_wins}": f"WHEN cancel_requested THEN '{states.CANCEL_WINS}'"}

_DIALECT = {
    "sqlite": {
        "{skip_locked}": "",
        # Without statistics SQLite prefers the index that yields turn order and walks
        # the whole class; this one finds a submitter's jobs for a model directly.
        "{by_submitter}": "INDEXED BY jobs_queued_by_submitter",
        # a swept value of a job (its workflow's axes), as text; the template version of
        # a batch (its meta's)
        "{axis_value}": "CAST(json_extract(workflow, '$.axes.' || json_quote(:axis)) AS TEXT)",
        "{batch_version}": "CAST(json_extract(b.meta, '$.version') AS INTEGER)",
    },
    "postgres": {
        "{skip_locked}": "FOR UPDATE SKIP LOCKED",
        "{by_submitter}": "",
        "{axis_value}": "(workflow -> 'axes' ->> CAST(:axis AS TEXT))",
        "{batch_version}": "CAST(b.meta ->> 'version' AS INTEGER)",
    },
}


# {json_list(:name)}: the JSON list in parameter :name, as rows.
_JSON_LIST = {"sqlite": r"SELECT value FROM json_each(\1)",
              "postgres": r"SELECT jsonb_array_elements_text(CAST(\1 AS jsonb))"}
# {id_list(:name)}: the JSON list of job ids in :name, as rows of numbers.
_ID_LIST = {"sqlite": r"SELECT value FROM json_each(\1)",
            "postgres": r"SELECT CAST(jsonb_array_elements_text(CAST(\1 AS jsonb)) AS bigint)"}
# {done_rows(:name)}: the JSON list of {"id", "token", "outputs"} in :name, as rows.
_DONE_ROWS = {
    "sqlite": r"SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.token') AS token, "
              r"json_extract(value, '$.outputs') AS outputs FROM json_each(\1)",
    "postgres": r"SELECT (r->>'id')::bigint AS id, r->>'token' AS token, r->'outputs' AS outputs "
                r"FROM jsonb_array_elements(CAST(\1 AS jsonb)) AS x(r)"}
# {job_rows(:name)}: the JSON list of new jobs in :name, as rows numbered from 0.
_JOB_ROWS = {
    "sqlite": r"SELECT key AS n, json_extract(value, '$.row') AS row, "
              r"json_extract(value, '$.workflow') AS workflow, "
              r"json_extract(value, '$.affinity') AS affinity, "
              r"json_extract(value, '$.parent') AS parent, "
              r"json_extract(value, '$.action') AS action FROM json_each(\1)",
    "postgres": r"SELECT n - 1 AS n, (r->>'row')::int AS row, r->'workflow' AS workflow, "
                r"r->>'affinity' AS affinity, (r->>'parent')::bigint AS parent, "
                r"r->>'action' AS action "
                r"FROM jsonb_array_elements(CAST(\1 AS jsonb)) WITH ORDINALITY AS x(r, n)"}
# {lease_rows(:name)}: the JSON list of {"id", "token"} in :name (leases: a job and
# the token it is held under), as rows. Leases are fenced by both: a token may cover
# several jobs (a micro-batch), and the same job may come back to the same executor
# under a new token after its old lease ran out.
_LEASE_ROWS = {
    "sqlite": r"SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.token') AS token "
              r"FROM json_each(\1)",
    "postgres": r"SELECT (r->>'id')::bigint AS id, r->>'token' AS token "
                r"FROM jsonb_array_elements(CAST(\1 AS jsonb)) AS x(r)"}
# {progress_rows(:name)}: the JSON list of progress records in :name, as rows.
_PROGRESS_ROWS = {
    "sqlite": r"SELECT key AS n, json_extract(value, '$.id') AS id, "
              r"json_extract(value, '$.token') AS token, json_extract(value, '$.at') AS at, "
              r"json_extract(value, '$.data') AS data FROM json_each(\1)",
    "postgres": r"SELECT n, (r->>'id')::bigint AS id, r->>'token' AS token, "
                r"(r->>'at')::double precision AS at, r->'data' AS data "
                r"FROM jsonb_array_elements(CAST(\1 AS jsonb)) WITH ORDINALITY AS x(r, n)"}
# {rank_rows(:name)}: the JSON list of {"id", "rank"} in :name (new turns), as rows.
_RANK_ROWS = {
    "sqlite": r"SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.rank') AS rank "
              r"FROM json_each(\1)",
    "postgres": r"SELECT (r->>'id')::bigint AS id, (r->>'rank')::bigint AS rank "
                r"FROM jsonb_array_elements(CAST(\1 AS jsonb)) AS x(r)"}
_MACROS = {"json_list": _JSON_LIST, "id_list": _ID_LIST, "done_rows": _DONE_ROWS,
           "job_rows": _JOB_ROWS, "lease_rows": _LEASE_ROWS, "progress_rows": _PROGRESS_ROWS,
           "rank_rows": _RANK_ROWS}

# Placement. An affinity "ENGINE:NAME" (e.g. "comfyui:portrait") is another engine's job:
# only a claim for that engine takes it, and only if NAME's whole affinity is in its
# list :only (`ENGINE_ONLY`). Other affinities are model names (never with a colon): a
# worker that may run only some models claims jobs needing one of them, or none
# (`ALLOWED`); one that runs anything takes every job of its own engine (`ANYTHING`).
ANYTHING = {"{allowed}": "AND (affinity IS NULL OR affinity NOT LIKE '%:%')",
            "{allowed_h}": "AND (h.affinity IS NULL OR h.affinity NOT LIKE '%:%')"}
ALLOWED = {"{allowed}": "AND (affinity IS NULL OR affinity IN ({json_list(:only)}))",
           "{allowed_h}": "AND (h.affinity IS NULL OR h.affinity IN ({json_list(:only)}))"}
ENGINE_ONLY = {"{allowed}": "AND affinity IN ({json_list(:only)})",
               "{allowed_h}": "AND h.affinity IN ({json_list(:only)})"}


def placed(sql: str, placement: dict[str, str]) -> str:
    for placeholder, text in placement.items():
        sql = sql.replace(placeholder, text)
    return sql


@functools.cache
def for_dialect(sql: str, dialect: str) -> str:
    for macro, spelled in _MACROS.items():
        sql = re.sub(r"\{" + macro + r"\((:\w+)\)\}", spelled[dialect], sql)
    for placeholder, text in _DIALECT[dialect].items():
        sql = sql.replace(placeholder, text)
    return sql


# --- Enqueue (one transaction; see Queue.enqueue) ------------------------------

# Serialises enqueues on PostgreSQL so the size check and idempotency lookup
# cannot race. (On SQLite, BEGIN IMMEDIATE already holds the write lock.)
LOCK_QUEUE_STATE = "SELECT paused FROM queue_state WHERE id = 1 FOR UPDATE"

BATCH_BY_IDEMPOTENCY_KEY = "SELECT id, total_jobs FROM batches WHERE idempotency_key = :key"

# Two counts, so each reads its own partial index (not the whole history).
ACTIVE_COUNTS = """
SELECT (SELECT COUNT(*) FROM jobs WHERE status = {queued}) AS queued,
       (SELECT COUNT(*) FROM jobs WHERE status = {running}) AS running"""

# The round-robin "now" of a priority class: the turn of the next job to be claimed.
# A newcomer's first job takes this turn, so it alternates with those already waiting
# instead of queueing behind all of them.
CLASS_TURN = """
SELECT MIN(fair_rank) AS turn FROM jobs
WHERE status = {queued} AND priority = :priority AND not_before <= :now"""

# With nothing due at the class, the turn after every waiting job of it (or 0).
CLASS_TURN_AFTER_ALL = """
SELECT COALESCE(MAX(fair_rank) + 1, 0) AS turn FROM jobs
WHERE status = {queued} AND priority = :priority"""

# A submitter's later submissions continue after their own waiting jobs (FIFO per person).
SUBMITTER_LAST_TURN = """
SELECT MAX(fair_rank) AS turn FROM jobs
WHERE status = {queued} AND priority = :priority AND submitter = :submitter"""

INSERT_BATCH = """
INSERT INTO batches (template, submitter, platform, conversation, thread, priority,
                     idempotency_key, total_jobs, meta, created_at)
VALUES (:template, :submitter, :platform, :conversation, :thread, :priority, :key, :total,
        :meta, :now)
RETURNING id"""

# Every job of a submission in one statement (one trigger run, one round trip), from the
# JSON list :jobs of {"row", "workflow", "affinity", "parent", "action"}, in order: their
# turns are :start, :start + 1, ... and their ids follow the list.
INSERT_JOBS = """
INSERT INTO jobs (batch_id, row, workflow, status, priority, submitter, fair_rank, affinity,
                  attempts, not_before, cancel_requested, outputs, enqueued_at, updated_at,
                  parent_job_id, action)
SELECT :batch, j.row, j.workflow, {queued}, :priority, :submitter, :start + j.n, j.affinity,
  0, :not_before, FALSE, '[]', :now, :now, j.parent, j.action
FROM ({job_rows(:jobs)}) j ORDER BY j.n"""

INSERT_EVENT = """
INSERT INTO events (at, kind, batch_id, job_id, data) VALUES (:at, :kind, :batch, :job, :data)"""

NOTIFY = "SELECT pg_notify(:channel, :payload)"

ANALYZE_JOBS = "ANALYZE jobs"  # PostgreSQL, after a burst (Queue.enqueue)


# --- Claim ----------------------------------------------------------------------

# A queued job may be *claimed ahead*: leased to an executor (owner, token, expiry) while
# it still waits, because that executor will start it the moment its current work leaves
# the GPU. It stays `queued` (its position, counts and ETA are a waiting job's), no attempt
# is used until it starts, and every other claim passes it by (lease_token IS NULL).
# Cancel ends it at once like any queued job; pause, a stopping executor or its lease
# running out hand it back untouched.

# Whether any lease has run out. Claims return this too (expired_seen), so the sweep
# below runs only when there is something to sweep, at no extra round trip.
_EXPIRED = """(EXISTS (SELECT 1 FROM jobs WHERE status = {running} AND lease_expires_at < :now)
  OR EXISTS (SELECT 1 FROM jobs WHERE status = {queued} AND lease_expires_at IS NOT NULL
             AND lease_expires_at < :now))"""
ANY_LEASE_EXPIRED = "SELECT " + _EXPIRED + " AS x"

# A job whose executor stopped heartbeating goes back to the queue at once (keeping its
# place), or fails if it has used all its attempts, or ends canceled if that was asked.
EXPIRE_LEASES = """
UPDATE jobs SET
  status = CASE {cancel_wins}
                WHEN attempts >= :max_attempts THEN {failed} ELSE {queued} END,
  error = CASE WHEN cancel_requested THEN error
               ELSE 'lease expired: executor ' || COALESCE(lease_owner, '?')
                    || ' stopped heartbeating' END,
  finished_at = CASE WHEN cancel_requested OR attempts >= :max_attempts
                     THEN CAST(:now AS DOUBLE PRECISION) ELSE NULL END,
  lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now
WHERE status = {running} AND lease_expires_at < :now"""

# A job claimed ahead by an executor that went silent: simply free again, no attempt used.
EXPIRE_AHEAD = """
UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now
WHERE status = {queued} AND lease_expires_at IS NOT NULL AND lease_expires_at < :now"""

# The executor holding these leases is known dead (its supervisor saw it exit): they end
# now, and the next claim sweeps them back through EXPIRE_LEASES / EXPIRE_AHEAD.
END_LEASES_OF = """
UPDATE jobs SET lease_expires_at = :now
WHERE status IN {active} AND lease_owner = :owner AND lease_expires_at > :now"""

# Claiming starts the job: an attempt is counted now, before it runs, so a job that kills
# its executor every time is bounded by max_attempts (promise 5).
_CLAIM_SET = """
UPDATE jobs SET status = {running}, attempts = attempts + 1, lease_owner = :owner,
  lease_token = :token, lease_expires_at = :expires, leased_at = :now, started_at = :now,
  updated_at = :now
"""

# Claiming ahead leases the job and leaves it queued; `START` starts it later.
_AHEAD_SET = """
UPDATE jobs SET lease_owner = :owner, lease_token = :token, lease_expires_at = :expires,
  leased_at = :now, updated_at = :now
"""

# The next job in claim order: priority class, then round-robin turn among
# submitters (fair_rank), then FIFO (id); not one another executor claimed ahead.
_HEAD = """
SELECT id FROM jobs WHERE status = {queued} AND not_before <= :now AND lease_token IS NULL
  {allowed}
ORDER BY priority, fair_rank, id LIMIT 1 {skip_locked}"""

_NOT_PAUSED_RETURNING = """
AND status = {queued} AND lease_token IS NULL AND NOT (SELECT paused FROM queue_state WHERE id = 1)
RETURNING id, batch_id, row, workflow, attempts, priority, submitter, affinity, fair_rank,
  """ + _EXPIRED + " AS expired_seen"

# Whether the job taken went ahead of its submitter's own turn (an affinity preference):
# only then does GIVE_BACK_TURN have anything to do.
_OUT_OF_TURN = """,
  EXISTS (SELECT 1 FROM jobs o WHERE o.status = {queued} AND o.priority = jobs.priority
          AND o.submitter = jobs.submitter AND o.not_before <= :now AND o.lease_token IS NULL
          AND o.fair_rank < jobs.fair_rank AND o.id <> jobs.id) AS out_of_turn"""

# The same, except that within the head job's class and submitter (whose turn it is),
# a job whose affinity (e.g. its model) is in the JSON list :prefer goes first.
# Priority and fairness are untouched; only that submitter's own order bends.
_PREFERRING = """
WHERE id = COALESCE(
  (SELECT j.id FROM jobs j {by_submitter}
   WHERE j.status = {queued} AND j.not_before <= :now AND j.lease_token IS NULL
     AND j.affinity IN ({json_list(:prefer)})
     AND (j.priority, j.submitter) = (
       SELECT h.priority, h.submitter FROM jobs h WHERE h.status = {queued} AND h.not_before <= :now
         AND h.lease_token IS NULL {allowed_h}
       ORDER BY h.priority, h.fair_rank, h.id LIMIT 1)
   ORDER BY j.fair_rank, j.id LIMIT 1 {skip_locked}),
  (""" + _HEAD + "))" + _NOT_PAUSED_RETURNING + _OUT_OF_TURN

# The claims are composed from these parts, never written out twice: what they write
# (_CLAIM_SET starts the job, _AHEAD_SET only leases it) times which job (the head, or the
# head bent by a preference), each for a placement (`placed`). They stay separate
# statements where one would cost every claim: a preference is an extra index probe,
# needed only when there is something to prefer; claiming ahead changes neither status
# nor attempts, which a CASE on a parameter would still write (firing the status
# triggers' checks on every claim). Every variant is in tests/sql/queries.sql.
CLAIM = _CLAIM_SET + "WHERE id = (" + _HEAD + ")" + _NOT_PAUSED_RETURNING
CLAIM_PREFERRING = _CLAIM_SET + _PREFERRING
CLAIM_AHEAD = _AHEAD_SET + "WHERE id = (" + _HEAD + ")" + _NOT_PAUSED_RETURNING
CLAIM_AHEAD_PREFERRING = _AHEAD_SET + _PREFERRING

# Micro-batching: more jobs of the batch just claimed (:batch) for the same model
# (:affinity), the next ones in its order, up to :limit, under the same lease token.
# (Materialized: as a plain IN (subquery) PostgreSQL may re-run it and take more.)
_FOLLOWERS = """
WITH picked AS MATERIALIZED (
  SELECT id FROM jobs WHERE batch_id = :batch AND status = {queued} AND not_before <= :now
    AND lease_token IS NULL AND affinity = :affinity
  ORDER BY fair_rank, id LIMIT :limit {skip_locked})
"""
CLAIM_FOLLOWERS = _FOLLOWERS + _CLAIM_SET + "WHERE id IN (SELECT id FROM picked)" \
    + _NOT_PAUSED_RETURNING
CLAIM_FOLLOWERS_AHEAD = _FOLLOWERS + _AHEAD_SET + "WHERE id IN (SELECT id FROM picked)" \
    + _NOT_PAUSED_RETURNING

# Batched: the next :limit jobs in claim order, in one statement under one lease token, for
# an executor (or a group of them) that runs many quick jobs; priorities, turns, placement
# and leases as for CLAIM. (No preference: a loaded model is a one-job concern.)
_MANY = """
WITH picked AS MATERIALIZED (
  SELECT id FROM jobs WHERE status = {queued} AND not_before <= :now AND lease_token IS NULL
    {allowed}
  ORDER BY priority, fair_rank, id LIMIT :limit {skip_locked})
"""
CLAIM_MANY = _MANY + _CLAIM_SET + "WHERE id IN (SELECT id FROM picked)" + _NOT_PAUSED_RETURNING

# Reordering (an admin moves a batch or a job within its submitter's waiting jobs): the
# submitter's queued jobs of a class not claimed ahead, in turn order; then their turns
# dealt out again in the new order — the same turns, so no one else's share changes.
SUBMITTER_WAITING = """
SELECT id, batch_id, fair_rank FROM jobs
WHERE status = {queued} AND priority = :priority AND submitter = :submitter
  AND lease_token IS NULL
ORDER BY fair_rank, id"""
SET_TURNS = """
UPDATE jobs SET fair_rank = (SELECT r.rank FROM ({rank_rows(:ranks)}) r WHERE r.id = jobs.id)
WHERE id IN (SELECT r.id FROM ({rank_rows(:ranks)}) r)
  AND status = {queued} AND lease_token IS NULL"""
QUEUED_OF_BATCH = """
SELECT priority, submitter FROM jobs WHERE batch_id = :batch AND status = {queued}
  AND lease_token IS NULL LIMIT 1"""

# After a preferred job was taken out of its turn: the submitter's job whose turn it
# used takes the claimed job's place (:rank), so a preference never grants an extra turn.
GIVE_BACK_TURN = """
UPDATE jobs SET fair_rank = :rank
WHERE id = (SELECT id FROM jobs WHERE status = {queued} AND priority = :priority
              AND submitter = :submitter AND not_before <= :now AND lease_token IS NULL
            ORDER BY fair_rank, id LIMIT 1)
  AND status = {queued} AND fair_rank < :rank"""

# Jobs claimed ahead start: the leases in the JSON list :leases (a claim and its followers),
# unless canceled, handed back or the queue paused meanwhile. The attempt counts from
# here. :expires: the new lease expiry.
START = """
UPDATE jobs SET status = {running}, attempts = attempts + 1, started_at = :now, updated_at = :now,
  lease_expires_at = :expires
FROM ({lease_rows(:leases)}) h
WHERE jobs.id = h.id AND jobs.lease_token = h.token AND jobs.status = {queued}
  AND NOT (SELECT paused FROM queue_state WHERE id = 1)
RETURNING jobs.id, jobs.attempts"""

# Of those leases, the jobs running under them already: a start sent again after its
# answer was lost finds its jobs started, and they are the executor's to run.
RUNNING_UNDER = """
SELECT jobs.id, jobs.attempts FROM jobs JOIN ({lease_rows(:leases)}) h
  ON jobs.id = h.id AND jobs.lease_token = h.token
WHERE jobs.status = {running}"""

# Jobs claimed ahead go back to waiting, untouched (the executor stops, or will not
# start them): by lease, or every one (pause).
UNCLAIM_AHEAD = """
UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now
FROM ({lease_rows(:leases)}) h
WHERE jobs.id = h.id AND jobs.lease_token = h.token AND jobs.status = {queued}"""
UNCLAIM_ALL_AHEAD = """
UPDATE jobs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now
WHERE status = {queued} AND lease_expires_at IS NOT NULL"""


@functools.cache
def complete_then(claim_sql: str) -> str:
    """PostgreSQL: COMPLETE and a claim statement as one statement, each a
    data-modifying CTE (their parameters are disjoint but for :now, the same moment);
    one row: the completed job's status and the claimed job's columns (NULL when
    nothing was claimed)."""
    return (f"WITH done AS ({COMPLETE}), taken AS ({claim_sql})\n"
            "SELECT (SELECT status FROM done) AS done_status, taken.* "
            "FROM (SELECT 1 AS one) AS one LEFT JOIN taken ON TRUE")


@functools.cache
def complete_many_then(claim_sql: str) -> str:
    """PostgreSQL: COMPLETE_MANY and a claim statement as one statement. Rows: the
    claimed jobs' columns (one row of NULLs when nothing was claimed), each with `done`,
    the JSON list of the completions [{"id", "status"}] (a job whose lease was lost is
    missing from it)."""
    return (f"WITH done AS ({COMPLETE_MANY}), taken AS ({claim_sql})\n"
            "SELECT (SELECT COALESCE(jsonb_agg(jsonb_build_object('id', id, 'status', status)),"
            " '[]'::jsonb) FROM done)::text AS done, taken.* "
            "FROM (SELECT 1 AS one) AS one LEFT JOIN taken ON TRUE")


# --- Running job: heartbeat and finish (fenced by the lease token) --------------

HEARTBEAT = """
UPDATE jobs SET lease_expires_at = :expires
WHERE id = :job AND lease_token = :lease AND status IN {active}
RETURNING cancel_requested"""

# Every lease an executor holds (running, finishing, claimed ahead), in one statement:
# the leases in the JSON list :leases. A lease missing from the answer is no longer this
# executor's (it ran out and another took the job, or the job was canceled while ahead).
HEARTBEAT_ALL = """
UPDATE jobs SET lease_expires_at = :expires
FROM ({lease_rows(:leases)}) h
WHERE jobs.id = h.id AND jobs.lease_token = h.token AND jobs.status IN {active}
RETURNING jobs.id, jobs.lease_token AS token, jobs.status, jobs.cancel_requested"""

# A leased job handed back (at :now, because :why): claimed ahead, free again untouched;
# running, queued again with its attempt given back (or canceled, if that was asked).
_HANDED_BACK = """
UPDATE jobs SET
  status = CASE WHEN status = {queued} THEN status {cancel_wins} ELSE {queued} END,
  attempts = CASE WHEN status = {running} AND NOT cancel_requested THEN attempts - 1
                  ELSE attempts END,
  finished_at = CASE WHEN status = {running} AND cancel_requested
                     THEN CAST(:now AS DOUBLE PRECISION) ELSE finished_at END,
  error = CASE WHEN status = {running} THEN CAST(:why AS TEXT) ELSE error END,
  lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now"""


# What an executor (:owner) holds a lease on but does not know it holds — not among the
# leases it renews (:leases) — goes back to the queue: a claim whose answer was lost (the
# database went away after committing it, or a statement sent again took a second job
# under the same token), or a lease its executor dropped by mistake. Nothing else could
# ever run or renew it: left alone it would wait out its lease, or, renewed by a token
# the executor still uses, forever. Claimed ahead: free again, untouched. Running (it
# never ran there): queued, its attempt given back; canceled if that was asked. (:why
# says why; :expires is HEARTBEAT_ALL's, which it runs beside.) The partial indexes of
# running jobs and of jobs claimed ahead find the owner's few rows.
HAND_BACK_UNHELD = _HANDED_BACK + """
WHERE id IN (SELECT id FROM jobs WHERE status = {running} AND lease_owner = :owner
             UNION ALL
             SELECT id FROM jobs WHERE status = {queued} AND lease_expires_at IS NOT NULL
               AND lease_owner = :owner)
  AND lease_owner = :owner AND status IN {active} AND lease_token IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ({lease_rows(:leases)}) h
                  WHERE h.id = jobs.id AND h.token = jobs.lease_token)
RETURNING id, status"""

# PostgreSQL: both in one statement. The two never touch the same row (the hand-back
# leaves out every lease renewed), so they may run as sibling data-modifying CTEs.
HEARTBEAT_AND_HAND_BACK = (
    "WITH renewed AS (" + HEARTBEAT_ALL + "), handed AS (" + HAND_BACK_UNHELD + ")\n"
    "SELECT id, token, status, cancel_requested, FALSE AS handed_back FROM renewed\n"
    "UNION ALL SELECT id, NULL, status, FALSE, TRUE FROM handed")

# An operator's hand-back of stuck jobs (genbot queue doctor): the jobs in the JSON list
# :jobs, if still leased, go back to the queue: claimed ahead, freed untouched; running,
# queued again without using an attempt (or canceled, if that was asked). Whoever held
# the lease finds it gone at its next heartbeat and stops. (:why says why.)
HAND_BACK_JOBS = _HANDED_BACK + """
WHERE id IN ({id_list(:jobs)}) AND lease_token IS NOT NULL AND status IN {active}
RETURNING id, status"""

COMPLETE = """
UPDATE jobs SET status = CASE {cancel_wins} ELSE {succeeded} END,
  outputs = :outputs, error = NULL, finished_at = :now, updated_at = :now,
  lease_token = NULL, lease_expires_at = NULL
WHERE id = :job AND lease_token = :lease AND status = {running}
RETURNING status"""

# Many jobs done, in one statement: the JSON list :done of {"id", "token", "outputs"}; each
# fenced by its own lease token, as COMPLETE.
COMPLETE_MANY = """
UPDATE jobs SET status = CASE {cancel_wins} ELSE {succeeded} END,
  outputs = d.outputs, error = NULL, finished_at = :now, updated_at = :now,
  lease_token = NULL, lease_expires_at = NULL
FROM ({done_rows(:done)}) d
WHERE jobs.id = d.id AND jobs.lease_token = d.token AND jobs.status = {running}
RETURNING jobs.id, jobs.status"""

# :retry: may this error be retried; :retry_at: when a retry may start.
FAIL = """
UPDATE jobs SET
  status = CASE {cancel_wins}
                WHEN CAST(:retry AS BOOLEAN) AND attempts < :max_attempts THEN {queued}
                ELSE {failed} END,
  not_before = CASE WHEN NOT cancel_requested AND :retry AND attempts < :max_attempts
                    THEN CAST(:retry_at AS DOUBLE PRECISION) ELSE not_before END,
  finished_at = CASE WHEN NOT cancel_requested AND :retry AND attempts < :max_attempts
                     THEN NULL ELSE CAST(:now AS DOUBLE PRECISION) END,
  error = :error, updated_at = :now, lease_token = NULL, lease_expires_at = NULL
WHERE id = :job AND lease_token = :lease AND status = {running}
RETURNING status"""


# An executor that stops (shutdown) hands its job back without using up an attempt.
RELEASE = """
UPDATE jobs SET status = CASE {cancel_wins} ELSE {queued} END,
  attempts = CASE WHEN cancel_requested THEN attempts ELSE attempts - 1 END,
  finished_at = CASE WHEN cancel_requested THEN CAST(:now AS DOUBLE PRECISION) ELSE NULL END,
  error = :why, updated_at = :now, lease_token = NULL, lease_expires_at = NULL
WHERE id = :job AND lease_token = :lease AND status = {running}
RETURNING status"""

# Progress of several running jobs in one statement: the JSON list :updates of
# {"id", "token", "at", "data"}, in order; a job no longer held is left out.
PROGRESS_ALL = """
INSERT INTO events (at, kind, batch_id, job_id, data)
SELECT p.at, 'progress', j.batch_id, j.id, p.data
FROM ({progress_rows(:updates)}) p JOIN jobs j ON j.id = p.id AND j.lease_token = p.token
WHERE j.status = {running} ORDER BY p.n
RETURNING seq"""

# ... and each job's sign of life (`progressed_at`, migration 0020: what tells a running
# job that makes no progress from one that does), beside it: one transaction on SQLite,
# one statement on PostgreSQL (PROGRESS_ALL_PG).
PROGRESSED = """
UPDATE jobs SET progressed_at = p.at
FROM (SELECT id, token, MAX(at) AS at FROM ({progress_rows(:updates)}) r GROUP BY id, token) p
WHERE jobs.id = p.id AND jobs.lease_token = p.token AND jobs.status = {running}"""
PROGRESS_ALL_PG = ("WITH written AS (" + PROGRESS_ALL + "), progressed AS (" + PROGRESSED
                   + ")\nSELECT seq FROM written")

# Leased jobs and how long each has shown no sign of life, longest first: claimed ahead
# and not started, since the claim; running, since its last progress event (migration
# 0020 keeps `progressed_at`) or its start. A few rows (one or two groups per executor),
# found through the partial indexes. What the stuck-job gauges of /metrics and `genbot
# queue doctor` read, at most :limit.
LEASED_IDLE = """
SELECT * FROM (
  SELECT id, batch_id, row, status, attempts, lease_owner, lease_expires_at,
    CAST(:now AS DOUBLE PRECISION) - COALESCE(leased_at, updated_at) AS idle_seconds
  FROM jobs WHERE status = {queued} AND lease_expires_at IS NOT NULL
  UNION ALL
  SELECT id, batch_id, row, status, attempts, lease_owner, lease_expires_at,
    CAST(:now AS DOUBLE PRECISION) - CASE WHEN progressed_at > started_at THEN progressed_at
                                        ELSE started_at END AS idle_seconds
  FROM jobs WHERE status = {running}
) leased ORDER BY idle_seconds DESC, id LIMIT :limit"""

# Running jobs of one executor that someone asked to cancel (polled between steps).
CANCELS_ASKED = """
SELECT id FROM jobs WHERE status = {running} AND cancel_requested AND lease_owner = :owner"""


# --- Cancel: queued jobs end at once; running ones are asked (the executor sees it) --

_CANCEL = """
UPDATE jobs SET
  status = CASE WHEN status = {queued} THEN {canceled} ELSE status END,
  cancel_requested = CASE WHEN status = {running} THEN TRUE ELSE cancel_requested END,
  finished_at = CASE WHEN status = {queued} THEN :now ELSE finished_at END,
  error = CASE WHEN status = {queued} THEN :why ELSE error END,
  lease_owner = CASE WHEN status = {queued} THEN NULL ELSE lease_owner END,
  lease_token = CASE WHEN status = {queued} THEN NULL ELSE lease_token END,
  lease_expires_at = CASE WHEN status = {queued} THEN NULL ELSE lease_expires_at END,
  updated_at = :now
WHERE (status = {queued} OR (status = {running} AND NOT cancel_requested)) AND {scope}
RETURNING id, status"""

CANCEL_JOB = _CANCEL.replace("{scope}", "id = :target")
CANCEL_BATCH = _CANCEL.replace("{scope}", "batch_id = :target")
CANCEL_SUBMITTER = _CANCEL.replace("{scope}", "submitter = :target")
CANCEL_ALL = _CANCEL.replace("{scope}", "TRUE")


# --- Pause (persisted; the claim statements read it) -----------------------------

SET_PAUSED = """
UPDATE queue_state SET paused = :paused, changed_by = :by, changed_at = :now
WHERE id = 1 AND paused <> :paused"""

QUEUE_STATE = "SELECT paused, changed_by, changed_at FROM queue_state WHERE id = 1"


# --- Reads -------------------------------------------------------------------------

JOB = "SELECT * FROM jobs WHERE id = :job"
BATCH = "SELECT * FROM batches WHERE id = :batch"

# Jobs ahead of :job in claim order (affinity preference aside).
JOBS_AHEAD = """
SELECT COUNT(*) AS n FROM jobs j, jobs me
WHERE me.id = :job AND me.status = {queued} AND j.status = {queued}
  AND (j.priority < me.priority
       OR (j.priority = me.priority AND (j.fair_rank < me.fair_rank
           OR (j.fair_rank = me.fair_rank AND j.id < me.id))))"""

BATCH_FIRST_QUEUED = """
SELECT id FROM jobs WHERE batch_id = :batch AND status = {queued}
ORDER BY priority, fair_rank, id LIMIT 1"""

BATCH_LAST_QUEUED = """
SELECT id FROM jobs WHERE batch_id = :batch AND status = {queued}
ORDER BY priority DESC, fair_rank DESC, id DESC LIMIT 1"""

BATCH_JOBS = "SELECT * FROM jobs WHERE batch_id = :batch ORDER BY row, id"

# Iteration: a finished image's review (storage.reviews); the jobs made from images.
# An image of a signed-off batch keeps its review (the sign-off was of these).
RATE = """
UPDATE jobs SET rating = :rating, review_note = :note, rated_by = :by, rated_at = :now
WHERE id = :job AND status = {succeeded}
  AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.id = jobs.batch_id
                  AND b.signed_off_at IS NOT NULL)
RETURNING id"""
STAR = """
UPDATE jobs SET stars = :stars, rated_by = :by, rated_at = :now
WHERE id = :job AND status = {succeeded}
  AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.id = jobs.batch_id
                  AND b.signed_off_at IS NOT NULL)
RETURNING id"""
# A batch's images by review (rating codes; NULL: unreviewed), and its jobs not ended.
REVIEW_COUNTS = """
SELECT rating, COUNT(*) AS n FROM jobs WHERE batch_id = :batch AND status = {succeeded}
GROUP BY rating"""
BATCH_ACTIVE = "SELECT COUNT(*) AS n FROM jobs WHERE batch_id = :batch AND status IN {active}"
# Signed off only while every image it made is reviewed and nothing of it still runs:
# checked in the statement itself, so a review racing the sign-off cannot slip between.
SIGN_OFF = """
UPDATE batches SET signed_off_by = :by, signed_off_at = :now
WHERE id = :batch AND signed_off_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs WHERE batch_id = :batch AND status = {succeeded})
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE batch_id = :batch
                  AND (status IN {active} OR (status = {succeeded} AND rating IS NULL)))
RETURNING id"""
REOPEN = """
UPDATE batches SET signed_off_by = NULL, signed_off_at = NULL
WHERE id = :batch AND signed_off_at IS NOT NULL RETURNING id"""
CHILDREN = "SELECT * FROM jobs WHERE parent_job_id = :job ORDER BY id"
# Everything made from a batch's images, and from those, in one statement (the parent index).
DESCENDANTS = """
WITH RECURSIVE tree(id) AS (
    SELECT id FROM jobs WHERE parent_job_id IN (SELECT id FROM jobs WHERE batch_id = :batch)
    UNION SELECT j.id FROM jobs j JOIN tree t ON j.parent_job_id = t.id)
SELECT * FROM jobs WHERE id IN (SELECT id FROM tree) ORDER BY id"""
# The latest batch in a conversation (where a platform has no threads, "row 3" is its).
LATEST_BATCH_IN = """
SELECT id FROM batches WHERE platform = :platform AND conversation = :conversation
ORDER BY id DESC LIMIT 1"""
# The batches submitted inside a platform thread.
BATCHES_IN_THREAD = """
SELECT id FROM batches
WHERE platform = :platform AND conversation = :conversation AND thread = :thread ORDER BY id"""

# Per-person limits: jobs waiting or running, and submissions since a time.
ACTIVE_BY_SUBMITTER = """
SELECT COUNT(*) AS n FROM jobs WHERE status IN {active} AND submitter = :submitter"""
BATCHES_SINCE = """
SELECT COUNT(*) AS n FROM batches WHERE submitter = :submitter AND created_at > :since"""

# /status without a number: the person's latest batch.
LATEST_BATCH = "SELECT id FROM batches WHERE submitter = :submitter ORDER BY id DESC LIMIT 1"
BATCHES_OF = "SELECT id FROM batches WHERE submitter = :submitter AND id > :after ORDER BY id"

# The API's job list: newest first, a page after the cursor, each filter optional.
# A rating filter is a review's code, or 0 (unreviewed: NULL in the table); stars: at least.
PAGE_JOBS = """
SELECT * FROM jobs
WHERE (CAST(:before AS BIGINT) IS NULL OR id < :before)
  AND (CAST(:batch AS BIGINT) IS NULL OR batch_id = :batch)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:submitter AS TEXT) IS NULL OR submitter = :submitter)
  AND (CAST(:rating AS INTEGER) IS NULL OR COALESCE(rating, 0) = :rating)
  AND (CAST(:stars AS INTEGER) IS NULL OR COALESCE(stars, 0) >= :stars)
  AND (CAST(:model AS TEXT) IS NULL OR affinity = :model)
  AND (CAST(:template AS TEXT) IS NULL
       OR batch_id IN (SELECT b.id FROM batches b WHERE b.template = :template))
  AND (CAST(:version AS BIGINT) IS NULL
       OR batch_id IN (SELECT b.id FROM batches b WHERE {batch_version} = :version))
  AND (CAST(:row AS BIGINT) IS NULL OR row = :row)
  AND (CAST(:axis AS TEXT) IS NULL OR {axis_value} IN ({json_list(:axis_values)}))
ORDER BY id DESC LIMIT :limit OFFSET :offset"""

COUNT_JOBS = """
SELECT COUNT(*) AS n FROM jobs
WHERE (CAST(:batch AS BIGINT) IS NULL OR batch_id = :batch)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:submitter AS TEXT) IS NULL OR submitter = :submitter)
  AND (CAST(:rating AS INTEGER) IS NULL OR COALESCE(rating, 0) = :rating)
  AND (CAST(:stars AS INTEGER) IS NULL OR COALESCE(stars, 0) >= :stars)
  AND (CAST(:model AS TEXT) IS NULL OR affinity = :model)
  AND (CAST(:template AS TEXT) IS NULL
       OR batch_id IN (SELECT b.id FROM batches b WHERE b.template = :template))
  AND (CAST(:version AS BIGINT) IS NULL
       OR batch_id IN (SELECT b.id FROM batches b WHERE {batch_version} = :version))
  AND (CAST(:row AS BIGINT) IS NULL OR row = :row)
  AND (CAST(:axis AS TEXT) IS NULL OR {axis_value} IN ({json_list(:axis_values)}))"""

# The dashboard's and the API's batch list: newest first, then their jobs counted.
PAGE_BATCHES = """
SELECT * FROM batches
WHERE (CAST(:before AS BIGINT) IS NULL OR id < :before)
  AND (CAST(:submitter AS TEXT) IS NULL OR submitter = :submitter)
ORDER BY id DESC LIMIT :limit"""
BATCH_RANGE_COUNTS = """
SELECT batch_id, status, COUNT(*) AS n FROM jobs WHERE batch_id BETWEEN :first AND :last
GROUP BY batch_id, status"""

# The daily digest: what finished in (:since, :until], and who made the most.
DIGEST_JOBS = """
SELECT status, COUNT(*) AS n, AVG(finished_at - started_at) AS seconds FROM jobs
WHERE finished_at > :since AND finished_at <= :until GROUP BY status"""
DIGEST_BATCHES = """
SELECT COUNT(*) AS n FROM batches WHERE created_at > :since AND created_at <= :until"""
DIGEST_SUBMITTERS = """
SELECT submitter, COUNT(*) AS n FROM jobs
WHERE finished_at > :since AND finished_at <= :until AND status = {succeeded}
GROUP BY submitter ORDER BY n DESC, submitter LIMIT 3"""

# Retention: batches created and wholly finished before :before.
OLD_BATCHES = """
SELECT b.id FROM batches b WHERE b.created_at < :before AND NOT EXISTS (
  SELECT 1 FROM jobs j WHERE j.batch_id = b.id
    AND (j.status IN {active} OR COALESCE(j.finished_at, 0) >= :before))
ORDER BY b.id LIMIT :limit"""
FORGET_EVENTS = "DELETE FROM events WHERE batch_id = :batch"
BATCH_EVENTS = "SELECT * FROM events WHERE batch_id = :batch ORDER BY seq"
# Events of no batch (pause, resume, a worker lost) older than :before, :limit at a time.
FORGET_LOOSE_EVENTS = """
DELETE FROM events WHERE seq IN (
  SELECT seq FROM events WHERE batch_id IS NULL AND at < :before ORDER BY seq LIMIT :limit)"""
FORGET_JOBS = "DELETE FROM jobs WHERE batch_id = :batch"
FORGET_RENDITIONS = "DELETE FROM renditions WHERE batch_id = :batch"
FORGET_BATCH = "DELETE FROM batches WHERE id = :batch"

# /queue, the dashboard, /metrics: what runs now and what is next. Running jobs say whether
# they have shown a step since they started (`stepped`: an executor started its group, but
# works through it one job at a time); jobs claimed ahead are still queued. A few rows (a
# group or two per executor), found through the partial indexes.
NOW_AND_NEXT = """
SELECT j.id, j.batch_id, j.row, j.submitter, j.priority, j.status, j.started_at,
  j.lease_owner, b.template, CASE WHEN j.progressed_at >= j.started_at THEN 1 ELSE 0 END AS stepped
FROM jobs j JOIN batches b ON b.id = j.batch_id WHERE j.status = {running}
UNION ALL
SELECT j.id, j.batch_id, j.row, j.submitter, j.priority, j.status, j.started_at,
  j.lease_owner, b.template, 0 AS stepped
FROM jobs j JOIN batches b ON b.id = j.batch_id
WHERE j.status = {queued} AND j.lease_expires_at IS NOT NULL"""

BATCH_COUNTS = "SELECT status, COUNT(*) AS n FROM jobs WHERE batch_id = :batch GROUP BY status"
BATCH_MODELS = """
SELECT DISTINCT affinity FROM jobs WHERE batch_id = :batch AND affinity IS NOT NULL
ORDER BY affinity"""

BATCH_WAITING_FOR = """
SELECT DISTINCT affinity FROM jobs WHERE batch_id = :batch AND status = {queued}
  AND affinity IS NOT NULL ORDER BY affinity"""

BATCHES_WAITING_ON = """
SELECT DISTINCT batch_id FROM jobs WHERE status = {queued} AND affinity = :affinity
ORDER BY batch_id LIMIT :limit"""

# Kept by the database as jobs change (migration 0012): a few rows, at any history size.
COUNTS = "SELECT status, priority, SUM(n) AS n FROM job_counts GROUP BY status, priority"

# /queue: which models the queued jobs wait for (placement: is any executor taking them?).
QUEUED_BY_AFFINITY = """
SELECT affinity, COUNT(*) AS n FROM jobs WHERE status = {queued} AND affinity IS NOT NULL
GROUP BY affinity ORDER BY affinity"""

# Each table's size on disk with its indexes, and (PostgreSQL) its live and dead rows:
# bloat shows as dead rows and bytes growing with no more jobs. (SQLite's dbstat reads
# every page: /metrics reads it seldom.)
TABLE_SIZES_PG = """
SELECT s.relname AS name, pg_total_relation_size(s.relid) AS bytes, s.n_live_tup AS live,
  s.n_dead_tup AS dead
FROM pg_stat_user_tables s WHERE s.schemaname = current_schema() ORDER BY s.relname"""
TABLE_SIZES_SQLITE = """
SELECT COALESCE(m.tbl_name, d.name) AS name, SUM(d.pgsize) AS bytes, NULL AS live,
  NULL AS dead
FROM dbstat d LEFT JOIN sqlite_schema m ON m.name = d.name
WHERE COALESCE(m.tbl_name, d.name) NOT LIKE 'sqlite_%' GROUP BY 1 ORDER BY 1"""

# PostgreSQL: how long the oldest open snapshot of this database has been held (0: none):
# while one is held vacuum can remove no dead row younger than it, and every claim walks
# more of them (bench/bloat_bench.py). Other databases' snapshots hold back only the
# catalogs here.
OLDEST_SNAPSHOT_PG = """
SELECT COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - MIN(xact_start)), 0) AS seconds
FROM pg_stat_activity
WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()"""

# What an autoscaler sizes pools by (migration 0017): one row per engine and affinity.
PLACEMENT = "SELECT * FROM genbot_placement ORDER BY engine, affinity"

RUNNING_EXECUTORS = """
SELECT COUNT(DISTINCT lease_owner) AS n FROM jobs WHERE status = {running}"""

# Mean run time of the last :limit succeeded jobs: the basis of every ETA.
RECENT_DURATION = """
SELECT AVG(finished_at - started_at) AS seconds FROM (
  SELECT finished_at, started_at FROM jobs WHERE status = {succeeded}
  ORDER BY finished_at DESC LIMIT :limit) recent"""

# When something may next become claimable: a delayed job falling due or a lease expiring.
NEXT_DUE = """
SELECT MIN(t) AS t FROM (
  SELECT MIN(not_before) AS t FROM jobs WHERE status = {queued} AND not_before > :now
  UNION ALL
  SELECT MIN(lease_expires_at) AS t FROM jobs WHERE status = {running}
  UNION ALL
  SELECT MIN(lease_expires_at) AS t FROM jobs
  WHERE status = {queued} AND lease_expires_at IS NOT NULL) due"""

EVENTS_AFTER = """
SELECT seq, at, kind, batch_id, job_id, data FROM events WHERE seq > :after
ORDER BY seq LIMIT :limit"""

LAST_EVENT_SEQ = "SELECT COALESCE(MAX(seq), 0) AS seq FROM events"

# PostgreSQL: the same through functions that first wait for the writers between their
# insert and their commit (migration 0013), so no lower seq can appear after a read.
EVENTS_AFTER_PG = """
SELECT seq, at, kind, batch_id, job_id, data FROM genbot_events_after(:after, :limit)"""
LAST_EVENT_SEQ_PG = "SELECT genbot_last_event_seq() AS seq"


def _with_states(sql: str) -> str:
    for placeholder, text in _STATES.items():
        sql = sql.replace(placeholder, text)
    return sql


for _name, _sql in list(globals().items()):  # every statement and fragment above
    if _name.lstrip("_").isupper() and isinstance(_sql, str):
        globals()[_name] = _with_states(_sql)
