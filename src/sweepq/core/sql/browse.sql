-- Read-only statements for browsing jobs page by page (the web dashboard): listings by any
-- filter, the per-minute series of finished jobs, concurrency keys a page at a time. Each page
-- costs the same on a jobs table of millions as on an empty one: it walks an index from a
-- keyset cursor and stops after a bounded number of entries; nothing counts the whole table.
--
-- A filter given as NULL matches any job.

-- name: job_browse
-- Up to $10 jobs below id $1, newest first, that match the filters (state in $3, queue $4, task
-- $5, concurrency key $6, group $7, created_at from $8 and before $9), among the $2 newest jobs
-- below $1: the walk of the primary key stops there, whatever matched, so a filter that
-- matches nothing (or only old jobs) costs $2 index entries, not the table. The caller pages on
-- from the last id shown or, on a short page, from where the walk stopped (job_browse_reach).
-- The CTE fences the walk: without it the planner may push the filters into it and read on
-- past $2 jobs looking for matches.
WITH scanned AS MATERIALIZED (
    SELECT id, state, queue, task, concurrency_key, job_group, created_at
    FROM {schema}.jobs
    WHERE id < coalesce($1::bigint, 9223372036854775807)
    ORDER BY id DESC
    LIMIT $2
),
picked AS (
    SELECT id FROM scanned
    WHERE ($3::text[] IS NULL OR state::text = ANY($3::text[]))
      AND ($4::text IS NULL OR queue = $4::text)
      AND ($5::text IS NULL OR task = $5::text)
      AND ($6::text IS NULL OR concurrency_key = $6::text)
      AND ($7::text IS NULL OR job_group = $7::text)
      AND ($8::timestamptz IS NULL OR created_at >= $8::timestamptz)
      AND ($9::timestamptz IS NULL OR created_at < $9::timestamptz)
    ORDER BY id DESC
    LIMIT $10
)
SELECT j.id, j.task, j.queue, j.priority, j.state::text AS state, j.attempt, j.max_attempts,
       j.snoozes, j.run_at, j.created_at, j.finished_at, j.failure_reason, j.concurrency_key,
       j.job_group, j.errors -> -1 ->> 'error' AS last_error
FROM picked AS p
JOIN {schema}.jobs AS j ON j.id = p.id
ORDER BY j.id DESC;

-- name: job_browse_reach
-- How far job_browse's walk of $2 jobs below id $1 went: the jobs it passed and the lowest id
-- (the next page's cursor). An index-only walk of the primary key.
SELECT count(*) AS scanned, min(id) AS lowest
FROM (SELECT id FROM {schema}.jobs
      WHERE id < coalesce($1::bigint, 9223372036854775807)
      ORDER BY id DESC
      LIMIT $2) AS s;

-- name: job_browse_available
-- Up to $8 available jobs below id $1, newest first, that match the filters (here queue $2,
-- task $3, concurrency key $4, group $5, created_at from $6 and before $7). They are read from
-- the claim's two partial indexes, one branch each (`state = 'available'` alone implies neither
-- index's predicate): a page costs the available jobs that match, never the finished ones.
-- `id + 0` keeps the planner off the primary key: walking it newest first looks cheap for a
-- LIMIT, and reads every finished job when the available ones are few and old (300,000 rows
-- for none, measured).
WITH picked AS (
    (SELECT id FROM {schema}.jobs
     WHERE state = 'available' AND concurrency_key IS NULL AND $4::text IS NULL
       AND id + 0 < coalesce($1::bigint, 9223372036854775807)
       AND ($2::text IS NULL OR queue = $2::text)
       AND ($3::text IS NULL OR task = $3::text)
       AND ($5::text IS NULL OR job_group = $5::text)
       AND ($6::timestamptz IS NULL OR created_at >= $6::timestamptz)
       AND ($7::timestamptz IS NULL OR created_at < $7::timestamptz)
     ORDER BY id + 0 DESC
     LIMIT $8)
    UNION ALL
    (SELECT id FROM {schema}.jobs
     WHERE state = 'available' AND concurrency_key IS NOT NULL
       AND ($4::text IS NULL OR concurrency_key = $4::text)
       AND id + 0 < coalesce($1::bigint, 9223372036854775807)
       AND ($2::text IS NULL OR queue = $2::text)
       AND ($3::text IS NULL OR task = $3::text)
       AND ($5::text IS NULL OR job_group = $5::text)
       AND ($6::timestamptz IS NULL OR created_at >= $6::timestamptz)
       AND ($7::timestamptz IS NULL OR created_at < $7::timestamptz)
     ORDER BY id + 0 DESC
     LIMIT $8)
)
SELECT j.id, j.task, j.queue, j.priority, j.state::text AS state, j.attempt, j.max_attempts,
       j.snoozes, j.run_at, j.created_at, j.finished_at, j.failure_reason, j.concurrency_key,
       j.job_group, j.errors -> -1 ->> 'error' AS last_error
FROM (SELECT id FROM picked ORDER BY id DESC LIMIT $8) AS p
JOIN {schema}.jobs AS j ON j.id = p.id
ORDER BY j.id DESC;

-- name: job_browse_running
-- Up to $8 running jobs below id $1, newest first, that match the filters (as in
-- job_browse_available), read from the partial index over running jobs (`id + 0`, as there).
SELECT id, task, queue, priority, state::text AS state, attempt, max_attempts, snoozes, run_at,
       created_at, finished_at, failure_reason, concurrency_key, job_group,
       errors -> -1 ->> 'error' AS last_error
FROM {schema}.jobs
WHERE state = 'running'
  AND id + 0 < coalesce($1::bigint, 9223372036854775807)
  AND ($2::text IS NULL OR queue = $2::text)
  AND ($3::text IS NULL OR task = $3::text)
  AND ($4::text IS NULL OR concurrency_key = $4::text)
  AND ($5::text IS NULL OR job_group = $5::text)
  AND ($6::timestamptz IS NULL OR created_at >= $6::timestamptz)
  AND ($7::timestamptz IS NULL OR created_at < $7::timestamptz)
ORDER BY id + 0 DESC
LIMIT $8;

-- name: job_browse_group
-- Up to $9 jobs of group $1 in any of states $2 (failed or cancelled: a group's few undone
-- jobs) below id $3, newest first, that match the other filters (queue $4, task $5,
-- concurrency key $6, created_at from $7 and before $8): the group index's entries of those
-- states, however old, and nothing else (`id + 0`, as in job_browse_available).
SELECT id, task, queue, priority, state::text AS state, attempt, max_attempts, snoozes, run_at,
       created_at, finished_at, failure_reason, concurrency_key, job_group,
       errors -> -1 ->> 'error' AS last_error
FROM {schema}.jobs
WHERE job_group = $1::text
  AND state = ANY($2::text[]::{schema}.job_state[])
  AND id + 0 < coalesce($3::bigint, 9223372036854775807)
  AND ($4::text IS NULL OR queue = $4::text)
  AND ($5::text IS NULL OR task = $5::text)
  AND ($6::text IS NULL OR concurrency_key = $6::text)
  AND ($7::timestamptz IS NULL OR created_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR created_at < $8::timestamptz)
ORDER BY id + 0 DESC
LIMIT $9;

-- name: job_finished_per_minute
-- Jobs completed and failed per minute over the last hour, oldest minute first, from the newest
-- $1 finished jobs of that hour (the index over finished jobs, walked newest first, stops
-- there), each row with how many were read in all, the oldest finished_at read, and the first
-- finished_at of the hour (one probe of the same index from its other end): when the cap was
-- reached and the first job of the hour was not read, the minutes before the oldest read are
-- unknown, not empty. The window's start is a sub-select so that the plan walks the index from
-- its newest end, as top_job_finished explains.
WITH recent AS MATERIALIZED (
    SELECT state, finished_at
    FROM {schema}.jobs
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND finished_at >= (SELECT now() - interval '1 hour')
    ORDER BY finished_at DESC
    LIMIT $1
)
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       sum(count(*)) OVER ()::bigint AS read,
       min(min(finished_at)) OVER () AS oldest,
       (SELECT min(finished_at) FROM {schema}.jobs
        WHERE state IN ('completed', 'failed', 'cancelled')
          AND finished_at >= (SELECT now() - interval '1 hour')) AS first_in_hour
FROM recent
GROUP BY 1
ORDER BY 1;

-- name: concurrency_key_page
-- Up to $2 concurrency keys after key $1 (NULL: from the first), by name, each with its limit,
-- its running counter, and its available jobs (due now, and scheduled later) counted up to $3
-- each: a key with a million waiting jobs costs $3 entries of the claim's keyed index, not a
-- million. Keyset paging over the primary key; never OFFSET.
SELECT k.key, k.max_running, k.running,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j
                              WHERE j.state = 'available' AND j.concurrency_key = k.key
                                AND j.run_at <= now()
                              LIMIT $3) AS d) AS due,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs AS j
                              WHERE j.state = 'available' AND j.concurrency_key = k.key
                                AND j.run_at > now()
                              LIMIT $3) AS s) AS scheduled
FROM {schema}.concurrency_keys AS k
WHERE $1::text IS NULL OR k.key > $1::text
ORDER BY k.key
LIMIT $2;

-- name: job_list_by_scope
-- The $2 newest jobs of idempotency scope $1 (a sweep run's links, say), newest first, from the
-- dedup index's entries of that scope: one job per key of the scope, never the rest of the table.
SELECT id, task, queue, priority, state::text AS state, attempt, max_attempts, snoozes, run_at,
       created_at, finished_at, failure_reason, concurrency_key, job_group,
       errors -> -1 ->> 'error' AS last_error
FROM {schema}.jobs
WHERE idempotency_scope = $1::text AND idempotency_key IS NOT NULL
ORDER BY id DESC
LIMIT $2;
