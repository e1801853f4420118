"""The PostgreSQL engine's statements, by name: one round trip each.

Each keeps the guards of the shared ORM steps (state, lease token, worker);
only the number of round trips changes. Results are read by column name, so
every statement names the columns it returns.

The states are written into the text, not passed as parameters, on purpose:
the planner matches a partial index (``WHERE state = 'queued'``) only against
a literal, and a parameter would turn the claim into a scan of the backlog.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache, lru_cache

from psycopg import sql

from ...models import Job
from ...states import TRANSITIONS, BatchState, JobState, Transition
from ...wakeup import CHANNEL
from .positions import parameter_names

# A quoted literal (kept as it is); a parenthesis or comma with the whitespace
# and comments around it (the mark alone); other whitespace and comments (one
# space).
_GAP = r"(?:\s|--[^\n]*+)"  # a comment runs to the end of its line
_TOKENS = re.compile(rf"('(?:[^']|'')*')|{_GAP}*([(),]){_GAP}*|{_GAP}+")


def _squeezed(match: re.Match[str]) -> str:
    return match.group(1) or match.group(2) or " "


def _compact(text: str) -> str:
    """The statement without its comments and with single spaces, as sent.

    The comments are for readers of this module. Sent, they made the
    completion longer than the 4,096 characters below which psycopg caches a
    statement's conversion, so it split the text again on every batch (3 % of
    a busy worker's time); the fair claim needs the spaces around its commas
    and parentheses gone too. Quoted literals are kept as they are.
    """
    return _TOKENS.sub(_squeezed, text).strip()


def _states(transition: Transition) -> str:
    return ", ".join(f"'{s}'" for s in sorted(TRANSITIONS[transition].sources))


# The claim. The CTE is there on purpose: a plain ``UPDATE ... WHERE id IN
# (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` lets the planner run the
# subquery more than once and update more rows than the limit. Locking in a
# CTE evaluates it exactly once. The WHERE/ORDER BY match the partial index
# django_jobs_claim_idx (queue, priority DESC, run_after) WHERE state='queued'.
# statement_timestamp() is the clock of every statement here, as it is of the
# ORM's Now() (guards.ready): one instant for every row and lease of a
# statement, and a job enqueued after its transaction began is due at once —
# inside a test's transaction (django_jobs.testing) too, where now() would
# stay at the test's start and leave every job enqueued since not yet due.
def _queue_scan(condition: str) -> str:
    """One ordered scan of a queue's ready jobs on django_jobs_claim_idx, locking them."""
    return f"""
        SELECT id, state, priority, run_after
        FROM django_jobs_job
        WHERE state = '{JobState.QUEUED}'
          AND queue = wanted.queue
          AND run_after <= statement_timestamp()
          AND (expires_at IS NULL OR expires_at > statement_timestamp())
          AND {condition}
        ORDER BY priority DESC, run_after
        LIMIT {{limit}}
        FOR UPDATE SKIP LOCKED"""


# A queue's three scans from a position (positions.py): by priority, from it.
_HIGHER = _queue_scan("priority > wanted.priority")
_RESUMED = _queue_scan(
    "priority = wanted.priority"
    " AND run_after >= wanted.since - %(lag)s::float8 * interval '1 second'"
)
_LOWER = _queue_scan("priority < wanted.priority")

_PICK_PLAIN = f"""
    SELECT head.id, head.state
    FROM (VALUES {{positions}}) AS wanted(queue, priority, since)
    -- Ordered scans of django_jobs_claim_idx per queue: with a plain
    -- queue = ANY(...) PostgreSQL 15 cannot read that index in order and
    -- falls back to sorting every queued row (or, with stale statistics, to
    -- a sequential scan). Each queue yields at most the batch; the best of
    -- them are taken below.
    --
    -- Each queue is read from the worker's position in it (positions.py):
    -- its jobs of a higher priority than the position's, from their head;
    -- then those of the position's priority due at or after its run_after
    -- (less the lag); then those of a lower priority, from their head. Each
    -- scan runs only if those before it left the batch short. From the head,
    -- the position's priority is below any job's: the first scan reads the
    -- whole queue in order, the others find nothing. Locking is not allowed
    -- beside a UNION, hence the subqueries.
    CROSS JOIN LATERAL (
        SELECT * FROM ({_HIGHER}) AS higher
        UNION ALL
        SELECT * FROM ({_RESUMED}) AS resumed
        UNION ALL
        SELECT * FROM ({_LOWER}) AS lower
        LIMIT {{limit}}
    ) AS head
    WHERE wanted.queue NOT IN (SELECT queue FROM django_jobs_queuestate WHERE paused)
    ORDER BY head.priority DESC, head.run_after
    LIMIT {{limit}}
"""

# The distinct tenants of one queue's queued jobs, by a recursive "loose index
# scan" on django_jobs_fair_idx: one index probe per tenant instead of reading
# the whole backlog. Shared by both fair statements below.
_TENANTS = f"""tenants AS (
        (SELECT tenant FROM django_jobs_job
         WHERE state = '{JobState.QUEUED}' AND queue = %(queue)s
         ORDER BY tenant LIMIT 1)
        UNION ALL
        SELECT (SELECT job.tenant FROM django_jobs_job AS job
                WHERE job.state = '{JobState.QUEUED}' AND job.queue = %(queue)s
                  AND job.tenant > tenants.tenant
                ORDER BY job.tenant LIMIT 1)
        FROM tenants WHERE tenants.tenant IS NOT NULL
"""

# A fair queue's pick (fairness.py): the head of each tenant's line (a
# recursive scan of the distinct tenants on django_jobs_fair_idx, one probe per
# tenant, then each tenant's next jobs), ranked by the tenant's clock — what it
# has received — plus (turn - 0.5) / weight. Each picked row carries its
# tenant's base and weight, which the claim then adds to the clock.
_PICK_FAIR = f"""
    WITH RECURSIVE {_TENANTS}    ), heads AS (
        SELECT head.id, head.state, head.priority, head.run_after, tenants.tenant,
               row_number() OVER (PARTITION BY tenants.tenant
                                  ORDER BY head.priority DESC, head.run_after) AS turn
        FROM tenants
        CROSS JOIN LATERAL (
            SELECT id, state, priority, run_after
            FROM django_jobs_job AS job
            WHERE job.state = '{JobState.QUEUED}' AND job.queue = %(queue)s
              AND job.tenant = tenants.tenant
              AND job.run_after <= statement_timestamp()
              AND (job.expires_at IS NULL OR job.expires_at > statement_timestamp())
            ORDER BY job.priority DESC, job.run_after
            LIMIT 2 * %(limit)s
        ) AS head
        WHERE tenants.tenant IS NOT NULL
          AND %(queue)s NOT IN (SELECT queue FROM django_jobs_queuestate WHERE paused)
    ), clocks AS (
        SELECT clock.tenant, clock.start, clock.finish
        FROM django_jobs_fairclock AS clock
        WHERE clock.queue = %(queue)s
          AND clock.tenant IN (SELECT tenant FROM tenants WHERE tenant IS NOT NULL)
    ), queue_time AS (
        SELECT COALESCE(max(clocks.start), 0) AS now FROM clocks
    ), weights AS (
        SELECT * FROM unnest(%(weight_tenants)s::text[], %(weights)s::float8[]) AS w(tenant, weight)
    ), based AS (
        SELECT heads.*, GREATEST(clocks.finish, queue_time.now) AS base,
               COALESCE(weights.weight, 1.0) AS weight
        FROM heads
        CROSS JOIN queue_time
        LEFT JOIN clocks ON clocks.tenant = heads.tenant
        LEFT JOIN weights ON weights.tenant = heads.tenant
    ), ranked AS (
        SELECT id, state, base, weight,
               row_number() OVER (
                   ORDER BY base + (turn - 0.5) / weight, priority DESC, run_after) AS place
        FROM based
        ORDER BY place
        LIMIT 2 * %(limit)s
    )
    -- Twice the batch is ranked and locked in rank order, skipping rows that
    -- a concurrent claimer holds: two workers that ranked the same heads then
    -- take consecutive batches of the fair order instead of one taking all and
    -- the other nothing. The state is compared with the ranked row's, not
    -- with the constant: PostgreSQL rechecks it on the row as locked (a row
    -- another worker claimed meanwhile is skipped, and the batch still
    -- fills), but cannot read it as "state = 'queued'" and plan a scan of
    -- every queued row through a partial index, as it did for a plan made on
    -- an empty table. Each ranked row is one primary-key probe, written as a
    -- lateral subquery so that no other plan exists: as a join, a plan made
    -- while the table was small kept the whole table in memory and compared
    -- every row with every ranked one (24 ms a claim of 64 once the table
    -- held 10,000 finished jobs, and growing with them).
    SELECT job.id, job.state, ranked.base, ranked.weight
    FROM ranked
    CROSS JOIN LATERAL (
        SELECT id, state
        FROM django_jobs_job
        WHERE id = ranked.id AND state = ranked.state
        FOR UPDATE SKIP LOCKED
    ) AS job
    ORDER BY ranked.place
    LIMIT %(limit)s
"""


# Everything after the pick: mark the picked rows running, leased to this
# worker on the row itself, and give each an attempt, in the same statement.
# ``carried`` names columns of the pick kept on the claimed rows (the fair
# pick's base and weight) for ``then``: more steps of the same statement.
def _claim_rest(*carried: str, then: str = "") -> str:
    from_pick = "".join(f", picked.{column}" for column in carried)
    return f"""
), claimed AS (
    UPDATE django_jobs_job AS job
    SET state = '{TRANSITIONS[Transition.CLAIM].target}',
        attempts = job.attempts + 1,
        started_at = COALESCE(job.started_at, statement_timestamp()),
        updated_at = statement_timestamp(),
        leased_by = %(worker_id)s,
        leased_at = statement_timestamp()
    FROM picked
    -- The compare-and-set is on the state read under the row lock we hold
    -- (picked.state), not on job.state: a condition on job.state would let
    -- the planner read every queued row through a partial index whenever
    -- the statistics say the queue is short (a table analysed empty).
    WHERE job.id = picked.id AND picked.state IN ({_states(Transition.CLAIM)})
    RETURNING job.id, job.attempts, job.task_name, job.args, job.kwargs, job.queue,
              job.priority, job.max_attempts, job.timeout, job.tenant,
              job.idempotency_key, job.backend, job.enqueued_at, job.started_at,
              job.lost_streak, job.run_after, job.trace_context, job.task_version{from_pick},
              -- The attempt's id is taken here, so the attempt is written
              -- from this row alone: joining the CTEs back together was a
              -- nested loop over both, batch² comparisons (a quarter of a
              -- 100-job claim's time). The sequence is looked up once per
              -- statement (a subquery); per row, pg_get_serial_sequence cost
              -- 2.4 µs, eight times nextval itself.
              nextval((SELECT pg_get_serial_sequence('django_jobs_attempt', 'id')::regclass))
                  AS attempt_id
), attempt AS (
    INSERT INTO django_jobs_attempt
        (id, job_id, number, worker_id, worker_name, outcome, started_at,
         error_type, error_message, traceback)
    SELECT attempt_id, id, attempts, %(worker_id)s, %(worker_name)s, 'running',
           statement_timestamp(),
           '', '', ''
    FROM claimed
){then}
-- The inserts above run to completion whether or not anything reads them.
SELECT id AS job_id, attempt_id, attempts AS token, task_name, args, kwargs, queue,
       priority, max_attempts, timeout, tenant, idempotency_key, backend, enqueued_at,
       started_at, lost_streak > 0 AS suspect, trace_context, task_version,
       -- Where the claim leaves its queue, as text: it goes back as a
       -- parameter unchanged, and no time zone is converted on the way.
       run_after::text AS position
FROM claimed
ORDER BY priority DESC, run_after

"""


_CLAIM = _compact(f"WITH picked AS ({_PICK_PLAIN}{_claim_rest()}")


# The batch sizes a claim statement is written for: every size up to STEP,
# then multiples of STEP (claim_sizes).
STEP = 16


def claim_sizes(limit: int) -> list[int]:
    """The statements' sizes that make up a claim of ``limit``: at most two.

    Each size is a statement of its own, prepared on each worker connection
    with its plan (about 200 kB of the server process's memory), so a worker
    must not use a hundred of them. A claim of 63 is one of 48, then — when
    those 48 were all there — one of 15: a second round trip only for a claim
    of more than STEP jobs, and at most STEP + CLAIM_BATCH // STEP statements.
    """
    if limit <= STEP:
        return [limit] if limit > 0 else []
    whole = limit - limit % STEP
    return [whole, limit - whole] if whole < limit else [whole]


@lru_cache(maxsize=256)
def claim(queues: Sequence[str], limit: int) -> str:
    """The plain claim of ``limit`` jobs from ``queues``, both written into the text.

    As parameters, they kept PostgreSQL from ever moving the prepared claim to
    its generic plan: with an array and a limit it cannot see, it costs the
    generic plan for ten queues and a tenth of the backlog, far above a custom
    plan's, so it planned every claim again (0.4 ms of a 1 ms idle pickup on
    our benchmark host). Written in, the generic plan costs what the custom
    ones did, and after five claims each worker's statement is planned no
    more. A worker's queues are fixed, and its sizes few (``claim_sizes``).
    Each queue's position is a pair of parameters (``positions.py``).
    """
    # Literal() quotes without a connection (E'' where a backslash needs it);
    # a % in a name is doubled, as the statement still takes parameters.
    positions = ", ".join(
        f"({sql.Literal(queue).as_string(None).replace('%', '%%')}, "
        f"%({priority})s::integer, %({since})s::timestamptz)"
        for (priority, since), queue in zip(parameter_names(len(queues)), queues, strict=True)
    )
    return _CLAIM.format(positions=positions, limit=int(limit))


# A tenant's clock moves on by its jobs / its weight, counted from the base
# its ranks used or from where a claim that committed meanwhile left it, if
# later (fairness.advance). ``served`` is a row source of (tenant, n, base,
# weight). The rows come in tenant order, so two claimers lock clocks in one
# order and wait for each other's commit, never in a cycle.
def _move_clocks(served: str) -> str:
    return f"""
INSERT INTO django_jobs_fairclock AS clock
    (queue, tenant, start, finish, claims, weight, updated_at)
SELECT %(queue)s, tenant, base + (n - 1) / weight, base + n / weight, n, weight,
       statement_timestamp()
FROM {served}
ORDER BY tenant
ON CONFLICT (queue, tenant) DO UPDATE
SET start = GREATEST(clock.finish, EXCLUDED.finish - EXCLUDED.claims / EXCLUDED.weight)
            + (EXCLUDED.claims - 1) / EXCLUDED.weight,
    finish = GREATEST(clock.finish, EXCLUDED.finish - EXCLUDED.claims / EXCLUDED.weight)
             + EXCLUDED.claims / EXCLUDED.weight,
    claims = clock.claims + EXCLUDED.claims,
    weight = EXCLUDED.weight,
    updated_at = EXCLUDED.updated_at"""


# The fair claim counts what it gave each tenant in the same statement, so the
# claim and its accounting commit together. Written after the commit (as it
# was), another claimer could see the jobs gone and the clock not yet moved,
# rank the same tenant's next job level with the late tenant's, give it the
# tie as the older job, and the queue's time moved past the late tenant's
# clock: a turn lost for good, each time (315 claims for a late tenant's
# 100 jobs with two one-slot workers, where 200 are its share).
CLAIM_FAIR = _compact(
    f"WITH picked AS ({_PICK_FAIR}"
    + _claim_rest(
        "base",
        "weight",
        then=f""", served AS (
    SELECT tenant, count(*) AS n, base, weight
    FROM claimed
    GROUP BY tenant, base, weight
), clocked AS ({_move_clocks("served")}
)""",
    )
)

# The clocks of a fair queue with limits (flow.py), in the claim's
# transaction: each served tenant's count and the base its ranks used.
RECORD_FAIR_CLAIMS = _compact(
    _move_clocks(
        "unnest(%(tenants)s::text[], %(counts)s::bigint[], %(bases)s::float8[],"
        " %(weights)s::float8[]) AS served(tenant, n, base, weight)"
    )
    + " RETURNING clock.tenant"
)

# Success, for a batch of reports: of the jobs this worker still holds the
# lease of under these tokens, and only of those, mark the job succeeded (its
# lease ended) and the attempt too; count the members of batches.
# Reports whose lease is gone are absent from the result: they are stale.
#
# The reports come as three texts, not as Python lists: psycopg adapts a list
# element by element (a UUID, an int, a Jsonb each), which cost a worker 4.7 µs
# per job, more than all the rest of building the statement. Here the ids are
# one array literal, the tokens another, and the results one JSON array, cut
# into its elements once, in order.
COMPLETE = _compact(f"""
WITH report AS (
    SELECT *
    FROM unnest(
        %(job_ids)s::uuid[],
        %(tokens)s::integer[],
        ARRAY(SELECT result
              FROM jsonb_array_elements(%(results)s::jsonb) WITH ORDINALITY AS given(result, n)
              ORDER BY n)
    ) AS r(job_id, token, result)
), job AS (
    UPDATE django_jobs_job AS job
    SET state = '{TRANSITIONS[Transition.COMPLETE].target}',
        result = report.result,
        finished_at = statement_timestamp(),
        updated_at = statement_timestamp(),
        last_error = '',
        lost_streak = 0,
        leased_by = NULL,
        leased_at = NULL
    FROM report
    WHERE job.id = report.job_id
      AND job.attempts = report.token
      AND job.leased_by = %(worker_id)s
      AND job.state IN ({_states(Transition.COMPLETE)})
    -- The state it left, from the row as updated: a leased job has asked
    -- for a cancel (cancel_requested_at) exactly when it is cancelling, and
    -- the completion leaves that column as it was.
    RETURNING job.id, job.attempts AS token, job.batch_id,
              CASE WHEN job.cancel_requested_at IS NULL
                   THEN '{JobState.RUNNING}' ELSE '{JobState.CANCELLING}' END AS was
), member AS (
    -- Members of batches (engine/batches.py): the batch rows, locked in one
    -- order for every completer, and one more success counted in each below.
    -- The lock is held until the commit, so of the completers that finish a
    -- batch's last members the one that brings it to its total sees every
    -- other's count. Jobs outside a batch skip both steps.
    SELECT batch.id, counted.n
    FROM django_jobs_batch AS batch
    JOIN (SELECT batch_id, count(*) AS n FROM job WHERE batch_id IS NOT NULL
          GROUP BY batch_id) AS counted ON counted.batch_id = batch.id
    ORDER BY batch.id
    FOR NO KEY UPDATE OF batch
), counted AS (
    UPDATE django_jobs_batch AS batch
    SET succeeded = batch.succeeded + member.n
    FROM member
    WHERE batch.id = member.id
    -- Its callbacks are due (engine/batches.fire_due enqueues them): every
    -- member settled, or every member succeeded, for the first time.
    RETURNING batch.id,
              batch.state <> '{BatchState.OPEN}' AND (
                  (batch.finished_at IS NULL
                   AND batch.succeeded + batch.failed + batch.cancelled >= batch.total)
                  OR (batch.succeeded_at IS NULL AND batch.succeeded >= batch.total)
              ) AS due
), released AS (
    -- Jobs enqueued after these (dependencies.py): one unmet dependency
    -- fewer each, and queued, due now, when none is left. Each decrement
    -- locks the waiting row, so of two completions racing for the same job
    -- the second sees the first's count.
    UPDATE django_jobs_job AS waiting
    SET waiting_on = waiting.waiting_on - met.n,
        state = CASE WHEN waiting.waiting_on = met.n
                     THEN '{TRANSITIONS[Transition.DEPENDENCIES_MET].target}'
                     ELSE waiting.state END,
        run_after = CASE WHEN waiting.waiting_on = met.n
                         THEN greatest(waiting.run_after, statement_timestamp())
                         ELSE waiting.run_after END,
        updated_at = statement_timestamp()
    FROM (
        SELECT dependency.job_id, count(*) AS n
        FROM django_jobs_dependency AS dependency
        JOIN job ON job.id = dependency.depends_on_id
        GROUP BY dependency.job_id
    ) AS met
    WHERE waiting.id = met.job_id
      AND waiting.state IN ({_states(Transition.DEPENDENCIES_MET)})
    RETURNING waiting.id, waiting.queue, waiting.state
), woken AS (
    -- The queues of the jobs just queued: their workers are woken at the
    -- commit, like an enqueue's (wakeup.py). Read by the last column below,
    -- since a plain SELECT in WITH runs only if something reads it.
    SELECT pg_notify('{CHANNEL}', queue)
    FROM (SELECT DISTINCT queue FROM released
          WHERE state = '{TRANSITIONS[Transition.DEPENDENCIES_MET].target}') AS queued
), attempt AS (
    UPDATE django_jobs_attempt AS attempt
    SET outcome = 'succeeded', finished_at = statement_timestamp()
    FROM job
    WHERE attempt.job_id = job.id AND attempt.number = job.token
      AND attempt.outcome = 'running'
    RETURNING attempt.id
), worker AS (
    UPDATE django_jobs_worker
    SET jobs_done = jobs_done + (SELECT count(*) FROM job)
    WHERE id = %(worker_id)s
    RETURNING id
)
-- Each applied success with the state it left, and (on every row) the jobs
-- it queued: the signals are sent from these rows, so connecting a receiver
-- never moves a completion off this statement.
SELECT job.id AS job_id, job.token, job.was,
       (SELECT count(*) FROM woken) AS woken,
       (SELECT array_agg(released.id) FROM released
        WHERE released.state = '{TRANSITIONS[Transition.DEPENDENCIES_MET].target}') AS queued,
       (SELECT array_agg(counted.id) FROM counted WHERE counted.due) AS due_batches
FROM job
""")

# One completed step of a running attempt (context.step): written only while
# this worker holds the job's lease under the attempt's token. The job row is
# locked FOR KEY SHARE, so a reaper, a release or a failure's completion
# ending the lease (all of which lock the row FOR UPDATE first) either goes
# before us — and we find no lease: stale — or waits until the step is
# committed, and the next attempt sees it. (A success is reported only after
# the task returned, its steps committed; an operator's cancel need not wait.)
# ON CONFLICT keeps an existing record of the name as it is.
RECORD_STEP = _compact(f"""
WITH holder AS (
    SELECT job.id AS job_id
    FROM django_jobs_job AS job
    WHERE job.id = %(job_id)s
      AND job.attempts = %(token)s
      AND job.leased_by = %(worker_id)s
      AND job.state IN ({_states(Transition.COMPLETE)})
    FOR KEY SHARE OF job
), recorded AS (
    INSERT INTO django_jobs_step (job_id, name, attempt, result, recorded_at)
    SELECT job_id, %(name)s, %(token)s, %(result)s, statement_timestamp()
    FROM holder
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM holder) AS held, EXISTS (SELECT 1 FROM recorded) AS recorded
""")

# Fair candidates: the distinct tenants of a queue's queued jobs by a
# recursive "loose index scan" (one index probe per tenant instead of reading
# the whole backlog), then each tenant's next jobs. Ranking across tenants is
# done in Python (fairness.order), where the weights are.
FAIR_CANDIDATES = _compact(f"""
WITH RECURSIVE {_TENANTS}
)
SELECT head.id, tenants.tenant, head.priority, head.run_after, head.concurrency_key
FROM tenants
CROSS JOIN LATERAL (
    SELECT id, priority, run_after, concurrency_key
    FROM django_jobs_job AS job
    -- The state is a constant, not a parameter: a generic plan (PostgreSQL
    -- switches a prepared statement to one when it looks no costlier) can
    -- then use the partial indexes of queued jobs; with a parameter it could
    -- not, and read every queued job of the tenant.
    WHERE job.state = '{JobState.QUEUED}' AND job.queue = %(queue)s
      AND job.tenant = tenants.tenant
      AND job.run_after <= statement_timestamp()
      AND (job.expires_at IS NULL OR job.expires_at > statement_timestamp())
      -- keys already at their limit (limits.KeyCounts.at_limit)
      AND (job.concurrency_key IS NULL OR job.concurrency_key <> ALL(%(blocked)s::text[]))
    ORDER BY job.priority DESC, job.run_after
    LIMIT %(k)s
) AS head
WHERE tenants.tenant IS NOT NULL
""")


# Queue-wide advisory lock of a flow-controlled claim: the first key names
# our namespace, the second the queue.
LOCK_NAMESPACE = 0x6A6F6273  # "jobs"
LOCK_QUEUE = "SELECT pg_advisory_xact_lock(%s, hashtext(%s))"
# The enqueues of one unique key (scope|key), apart from the queue locks.
UNIQUE_NAMESPACE = 0x756E6971  # "uniq"
LOCK_UNIQUE = LOCK_QUEUE

# Turns a session's sequential scans and JIT off (session.pin_plans says why).
PIN_PLANS = "SELECT set_config('enable_seqscan', 'off', false), set_config('jit', 'off', false)"


@cache
def insert_job(notify: bool, keyed: bool = False) -> str:
    """One job's INSERT, its columns in model order; with its queue's NOTIFY if asked.

    ``keyed``: the job has an idempotency key, and a job that holds the key
    already (committed, or inserted earlier in this transaction) wins: the
    insert does nothing, waiting first for a transaction that is inserting
    the same key, and the one row returned counts what was inserted (0 or 1).
    No savepoint and no lookup beforehand, as the ORM's path needs. The NOTIFY
    goes either way (a duplicate wakes workers for nothing, harmlessly): the
    transaction counts its queue as notified.
    """
    fields = Job._meta.concrete_fields
    columns = ", ".join(f'"{field.column}"' for field in fields)
    values = ", ".join(
        "%s::jsonb" if field.attname in ("args", "kwargs") else "%s" for field in fields
    )
    insert = f"INSERT INTO {Job._meta.db_table} ({columns}) VALUES ({values})"
    if keyed:
        # The conflict target names django_jobs_idempotency_uniq (a partial index).
        insert += (
            " ON CONFLICT (dedup_scope, idempotency_key) WHERE idempotency_key IS NOT NULL"
            " DO NOTHING RETURNING 1"
        )
        notice = ", pg_notify(%s, %s)" if notify else ""
        return f"WITH job AS ({insert}) SELECT count(*) AS inserted{notice} FROM job"
    if not notify:
        return insert
    # A data-modifying CTE runs to completion whether or not it is read.
    return f"WITH job AS ({insert}) SELECT pg_notify(%s, %s)"


# What the planner believes a table holds: the admin's count of a huge list.
ESTIMATED_ROWS = "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass"

# Our tables' dead row versions (the statistics collector's count) and latest
# vacuum, for those this role may vacuum: their owner's members (superusers
# included). Names resolve through the search path, as Django's queries do.
DEAD_ROWS = """
SELECT t.name AS table_name,
       pg_stat_get_dead_tuples(c.oid) AS dead,
       greatest(pg_stat_get_last_vacuum_time(c.oid),
                pg_stat_get_last_autovacuum_time(c.oid)) AS vacuumed_at
FROM unnest(%(tables)s::text[]) AS t(name)
JOIN pg_class c ON c.oid = to_regclass(quote_ident(t.name))
WHERE pg_has_role(c.relowner, 'USAGE')
ORDER BY t.name
"""

# One of our tables vacuumed, its name quoted. SKIP_LOCKED: if autovacuum or
# another worker is at it, it is in hand, and this one does nothing.
VACUUM = "VACUUM (SKIP_LOCKED) {table}"

# How many times a table has been vacuumed by hand (not by autovacuum): read
# before and after our VACUUM, which skips a table another vacuum holds.
VACUUM_COUNT = "SELECT pg_stat_get_vacuum_count(to_regclass(quote_ident(%s)))"

# The dependencies of a batch of new jobs: every (new job, job it waits for).
ADD_DEPENDENCIES = """
INSERT INTO django_jobs_dependency (job_id, depends_on_id)
SELECT job.id, depends_on.id
FROM unnest(%s::uuid[]) AS job(id) CROSS JOIN unnest(%s::uuid[]) AS depends_on(id)
"""

# The states of the jobs a new job waits for, held until it commits.
DEPENDED_ON = "SELECT id, state, tenant FROM django_jobs_job WHERE id = ANY(%s) FOR SHARE"
