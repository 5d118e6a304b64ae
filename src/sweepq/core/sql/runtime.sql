-- Statements over the runtime's shared tables: leaders, cron_schedules, rate_limits.

-- name: leader_elect
-- Become or stay the holder of role $1 for $3 seconds; returns the holder after the attempt.
INSERT INTO {schema}.leaders AS l (role, worker_id, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
ON CONFLICT (role) DO UPDATE
SET worker_id = EXCLUDED.worker_id,
    expires_at = EXCLUDED.expires_at,
    elected_at = CASE WHEN l.worker_id = EXCLUDED.worker_id THEN l.elected_at ELSE now() END
WHERE l.worker_id = EXCLUDED.worker_id OR l.expires_at < now()
RETURNING worker_id;

-- name: leader_resign
-- Give up role $1 if worker $2 holds it, so another worker takes over at once.
DELETE FROM {schema}.leaders WHERE role = $1 AND worker_id = $2;

-- name: clock_now
-- The database's time: the only clock that decides ticks, leases and deadlines.
SELECT now();

-- name: cron_upsert
-- Register schedule $1 with expression $2 in time zone $3; a new schedule, or a changed expression
-- or zone, takes next tick $4.
INSERT INTO {schema}.cron_schedules AS c (name, expression, tz, next_run_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE
SET expression = EXCLUDED.expression,
    tz = EXCLUDED.tz,
    -- The old next tick was computed from the old expression and zone: keep it only if both hold.
    next_run_at = CASE WHEN (c.expression, c.tz) = (EXCLUDED.expression, EXCLUDED.tz)
                       THEN c.next_run_at ELSE EXCLUDED.next_run_at END,
    updated_at = now()
WHERE (c.expression, c.tz) <> (EXCLUDED.expression, EXCLUDED.tz)
   OR c.updated_at < now() - interval '1 hour';

-- name: cron_lock_due
-- Lock schedule $1 if its tick is due by $2 (NULL: the database's now()); returns the tick and
-- that time.
SELECT next_run_at, coalesce($2::timestamptz, now()) AS now FROM {schema}.cron_schedules
WHERE name = $1 AND next_run_at <= coalesce($2::timestamptz, now())
FOR UPDATE SKIP LOCKED;

-- name: cron_advance
-- Record tick $2's enqueue outcome ($4 for job $3) and move schedule $1 to its next tick $5.
UPDATE {schema}.cron_schedules
SET last_run_at = $2, last_job_id = $3, last_outcome = $4, next_run_at = $5, updated_at = now()
WHERE name = $1;

-- name: cron_list
-- Every schedule with its next tick and last outcome.
SELECT name, expression, tz, next_run_at, last_run_at, last_job_id, last_outcome
FROM {schema}.cron_schedules ORDER BY name;

-- name: cron_count_waiting
-- Jobs of concurrency key $1 that have not started (a buffered cron tick).
SELECT count(*) FROM {schema}.jobs WHERE state = 'available' AND concurrency_key = $1;

-- name: cron_prune
-- Delete schedules that no worker has registered since now() - $1 seconds.
DELETE FROM {schema}.cron_schedules WHERE updated_at < now() - make_interval(secs => $1);

-- name: rate_limit_reserve
-- Reserve the next grant of key $1 spaced $2 seconds apart with a burst of $3; returns how many
-- seconds the caller must wait (0 if it may go now). One write per grant, none per wait.
INSERT INTO {schema}.rate_limits AS r (key, tat)
VALUES ($1, now() + make_interval(secs => $2))
ON CONFLICT (key) DO UPDATE
SET tat = greatest(r.tat, now()) + make_interval(secs => $2),
    updated_at = now()
RETURNING greatest(
    extract(epoch FROM (r.tat - make_interval(secs => $2 * $3)) - now()), 0
)::float8 AS wait_seconds;

-- name: rate_limit_prune
-- Delete rate-limit keys idle since before now() - $1 seconds among the next $3 keys after key $2
-- (keyset batches: each statement reads at most $3 rows); returns the last key read, NULL at the
-- end, and how many were deleted.
WITH batch AS (
    SELECT key, tat FROM {schema}.rate_limits
    WHERE key > coalesce($2::text, '')
    ORDER BY key
    LIMIT $3
),
doomed AS (
    DELETE FROM {schema}.rate_limits AS r
    USING batch AS b
    WHERE r.key = b.key AND b.tat < now() - make_interval(secs => $1)
      AND r.tat < now() - make_interval(secs => $1)
    RETURNING r.key
)
SELECT (SELECT max(key) FROM batch) AS last_key, (SELECT count(*) FROM doomed) AS deleted;
