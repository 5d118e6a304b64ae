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
-- skipping a job whose identity_key another active job holds. Returns the jobs retried.
WITH target AS (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.job_group = $1 AND j.state = ANY($3::text[]::{schema}.job_state[])
      AND (j.identity_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM {schema}.jobs AS a
          WHERE a.identity_key = j.identity_key AND a.state IN ('available', 'running')))
    ORDER BY j.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
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
