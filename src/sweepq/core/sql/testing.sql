-- name: job_make_due
-- For tests: make the available jobs of queues $1 (all queues when NULL) due now, skipping their
-- delays, backoffs and snoozes; their concurrency keys get a wake-up, as from an enqueue.
WITH due AS (
    UPDATE {schema}.jobs SET run_at = now()
    WHERE state = 'available' AND run_at > now()
      AND ($1::text[] IS NULL OR queue = ANY($1::text[]))
    RETURNING concurrency_key
),
woken AS (
    INSERT INTO {schema}.concurrency_wakeups (key, run_at)
    SELECT DISTINCT concurrency_key, now() FROM due WHERE concurrency_key IS NOT NULL
)
SELECT count(*) FROM due;

-- name: job_list_enqueued
-- For tests: up to $3 available jobs (due or scheduled) of task $1 whose args contain $2 (a JSON
-- object: each of its keys with that value), oldest first.
SELECT * FROM {schema}.jobs
WHERE state = 'available' AND task = $1 AND args::jsonb @> $2::jsonb
ORDER BY id
LIMIT $3;

-- name: job_queues_waiting
-- For tests: the queues that have available jobs, due or not.
SELECT DISTINCT queue FROM {schema}.jobs WHERE state = 'available' ORDER BY queue;
