-- Statements over the jobs of a group (jobs.job_group), through the jobs_group index.

-- name: job_group_counts
-- The jobs of group $1 per state: an index-only scan of the group's entries.
SELECT state::text AS state, count(*) AS n
FROM {schema}.jobs WHERE job_group = $1
GROUP BY state;

-- name: job_group_outstanding
-- The outstanding (available or running) jobs of each group of $1: two short index ranges per
-- group, however many of its jobs have finished.
SELECT g.name, (SELECT count(*) FROM {schema}.jobs AS j
                WHERE j.job_group = g.name AND j.state IN ('available', 'running')) AS n
FROM unnest($1::text[]) AS g(name);

-- name: job_group_retry_failed
-- Run again up to $2 jobs of group $1 in the states $3 (failed, cancelled), as job_retry does
-- (a fresh attempt budget, the deadline re-armed, a wake-up for a job of a concurrency key),
-- skipping a job whose identity_key another active job holds. Returns the jobs retried. A job
-- another statement holds (the outcome write of a worker a cancel fenced out) is waited for,
-- never skipped: a retry that skipped it would leave it as it was, unseen.
WITH target AS (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.job_group = $1 AND j.state = ANY($3::text[]::{schema}.job_state[])
      AND (j.identity_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {schema}.jobs AS a
          WHERE a.identity_key = j.identity_key AND a.state IN ('available', 'running')))
    ORDER BY j.id
    LIMIT $2
    FOR UPDATE
),
retried AS (
    UPDATE {schema}.jobs AS j SET
        state = 'available', run_at = now(), attempt = 0, crashes = 0, handbacks = 0,
        finished_at = NULL,
        failure_reason = NULL, deadline_at = now() + j.deadline_after
    FROM target AS t WHERE j.id = t.id
    RETURNING j.id, j.concurrency_key, j.run_at
),
woken AS (
    INSERT INTO {schema}.concurrency_wakeups (key, run_at)
    SELECT concurrency_key, min(run_at) FROM retried
    WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key
)
SELECT count(*) FROM retried;

-- name: job_group_list
-- Up to $3 jobs of group $1 in state $2, newest first (ids below $4 when given: keyset pages).
SELECT * FROM {schema}.jobs
WHERE job_group = $1 AND state = $2::text::{schema}.job_state
  AND id < coalesce($4::bigint, 9223372036854775807)
ORDER BY id DESC
LIMIT $3;

-- name: job_group_progress
-- For each group of $1: its jobs available now, available later (waiting for a retry, a snooze
-- or their run_at), and running, the seconds until the last waiting one is due, and its failed
-- and cancelled jobs; the group's entries of its index in those states only (never its
-- completed ones, however many).
SELECT g.name,
       count(j.id) FILTER (WHERE j.state = 'available' AND j.run_at <= now()) AS due,
       count(j.id) FILTER (WHERE j.state = 'available' AND j.run_at > now()) AS waiting,
       count(j.id) FILTER (WHERE j.state = 'running') AS running,
       extract(epoch FROM max(j.run_at) FILTER (WHERE j.state = 'available' AND j.run_at > now())
                     - now())::float8
           AS waiting_seconds,
       count(j.id) FILTER (WHERE j.state = 'failed') AS failed,
       count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled
FROM unnest($1::text[]) AS g(name)
LEFT JOIN {schema}.jobs AS j
       ON j.job_group = g.name AND j.state IN ('available', 'running', 'failed', 'cancelled')
GROUP BY g.name;

-- Closing a group (core/groups.py): the rows of job_groups, one per group. Every insert into
-- jobs locks its groups' rows FOR KEY SHARE (the trigger of core migration 0011); a closer or a
-- firer locks a row FOR UPDATE, which waits for those enqueuers and holds new ones back.

-- name: job_group_seal
-- Seal group $1 with the job to enqueue once it has ended ($2, JSON; NULL to seal only), making
-- its row if it has none; nothing if it is sealed already. Returns a row when this sealed it. It
-- waits for no enqueue into the group (an update of columns no key holds takes a row lock that
-- KEY SHARE does not conflict with): the firing step's FOR UPDATE, after it, waits for those.
INSERT INTO {schema}.job_groups AS g (name, sealed_at, then_spec) VALUES ($1, now(), $2::jsonb)
ON CONFLICT (name) DO UPDATE SET sealed_at = EXCLUDED.sealed_at, then_spec = EXCLUDED.then_spec
WHERE g.sealed_at IS NULL
RETURNING true;

-- name: job_group_get
-- How group $1 stands: sealed, fired, its then job (no row: a group never enqueued into or closed).
SELECT sealed_at IS NOT NULL AS sealed, fired_at IS NOT NULL AS fired, then_job
FROM {schema}.job_groups WHERE name = $1;

-- name: job_group_reopen
-- Let group $1 take jobs again, forgetting its closure (a `then` not fired yet is dropped): a
-- later close fires anew. Waits for a closer or firer holding the row. Whether it was sealed.
UPDATE {schema}.job_groups
SET sealed_at = NULL, then_spec = NULL, fired_at = NULL, then_job = NULL
WHERE name = $1 AND sealed_at IS NOT NULL
RETURNING name;

-- name: job_group_lock_sealed
-- Lock the rows of the groups of $1 that are sealed and not fired, FOR UPDATE in name order,
-- waiting for their holders (a firer that comes second must see what the first committed, and
-- then finds the row fired: EvalPlanQual re-reads it). Nothing outside READ COMMITTED, where the
-- count that follows would read an older snapshot: the maintenance leader fires those.
SELECT name, then_spec::text FROM {schema}.job_groups
WHERE name = ANY($1::text[]) AND sealed_at IS NOT NULL AND fired_at IS NULL
  AND current_setting('transaction_isolation') = 'read committed'
ORDER BY name
FOR UPDATE;

-- name: job_group_lock_sealed_free
-- As job_group_lock_sealed, but rows locked by someone else are skipped (the maintenance leader:
-- their holder fires them, or its next round does).
SELECT name, then_spec::text FROM {schema}.job_groups
WHERE name = ANY($1::text[]) AND sealed_at IS NOT NULL AND fired_at IS NULL
  AND current_setting('transaction_isolation') = 'read committed'
ORDER BY name
FOR UPDATE SKIP LOCKED;

-- name: job_group_sealed_page
-- The maintenance leader's page of sealed, unfired groups: up to $2 after name $1 (from the
-- first when NULL), in name order, read without a lock (job_groups_waiting holds only them).
SELECT name FROM {schema}.job_groups
WHERE sealed_at IS NOT NULL AND fired_at IS NULL AND ($1::text IS NULL OR name > $1)
ORDER BY name
LIMIT $2;

-- name: job_group_ended
-- Which groups of $1 have no job unfinished (available or running): two short ranges of the
-- jobs_group index per group, stopping at the first job found. The firing step runs it twice:
-- before it locks anything (a group with jobs left is not locked: the last of its jobs to end
-- fires it, since that finish's own read comes after every other finish committed), and after
-- the lock, as a statement of its own, whose snapshot sees every finish committed before it.
SELECT g.name FROM unnest($1::text[]) AS g(name)
WHERE NOT EXISTS (SELECT FROM {schema}.jobs AS j
                  WHERE j.job_group = g.name AND j.state IN ('available', 'running'));

-- name: job_group_fired
-- Record that groups $1 ended and fired, with the job each enqueued ($2; NULL without a then).
-- The clock, not now(): the mark comes after the count that found every job ended.
UPDATE {schema}.job_groups AS g SET fired_at = clock_timestamp(), then_job = f.then_job
FROM unnest($1::text[], $2::bigint[]) AS f(name, then_job)
WHERE g.name = f.name;

-- name: job_group_prune
-- Among the next $3 groups after name $2 (keyset batches), delete those that no job belongs to
-- any more and that are not waiting to fire, whose last change (fired, else made) is older than
-- now() - $1 seconds; a locked row (an enqueue or a close in flight) is skipped. Returns the last
-- name read (NULL at the end) and how many were deleted.
WITH batch AS (
    SELECT name FROM {schema}.job_groups
    WHERE $2::text IS NULL OR name > $2
    ORDER BY name
    LIMIT $3
),
doomed AS (
    SELECT g.name FROM {schema}.job_groups AS g
    WHERE g.name = ANY(ARRAY(SELECT name FROM batch))
      AND (g.sealed_at IS NULL OR g.fired_at IS NOT NULL)
      AND coalesce(g.fired_at, g.created_at) < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT FROM {schema}.jobs AS j WHERE j.job_group = g.name)
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {schema}.job_groups AS g USING doomed AS d WHERE g.name = d.name
    RETURNING g.name
)
SELECT (SELECT max(name) FROM batch) AS last_name, (SELECT count(*) FROM deleted) AS deleted;
