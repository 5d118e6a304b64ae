-- Read-only statements for operators: listing jobs and migrations, and the figures `sweepq doctor`
-- reports. None of them writes; each is called by exactly one wrapper in core/admin.py.

-- name: migration_list
-- The migrations recorded in the schema's ledger, oldest first.
SELECT component, version, name, applied_at
FROM {schema}.schema_migrations
ORDER BY applied_at, component, version;

-- name: job_list
-- Up to $5 jobs, newest first, filtered by state $1, task $2, queue $3 and group $6 when given,
-- each with its last error. Keyset paging: only ids below $4 (the last id of the previous
-- page). The coalesce keeps `id < ...` an index condition of the primary key even when no page
-- boundary is given; never OFFSET.
SELECT id, task, queue, priority, state::text AS state, attempt, max_attempts, snoozes,
       run_at, created_at, finished_at, failure_reason, concurrency_key, job_group,
       errors -> -1 ->> 'error' AS last_error
FROM {schema}.jobs
WHERE id < coalesce($4::bigint, 9223372036854775807)
  AND ($1::text IS NULL OR state = $1::text::{schema}.job_state)
  AND ($2::text IS NULL OR task = $2::text)
  AND ($3::text IS NULL OR queue = $3::text)
  AND ($6::text IS NULL OR job_group = $6::text)
ORDER BY id DESC
LIMIT $5;

-- name: doctor_concurrency_keys
-- Every concurrency key with its limit, its running counter, the running jobs that carry it (the
-- counter must equal them), and its available jobs: due now, and scheduled for later; then its
-- rate (starts per window, the window in seconds, the starts of the current window) and the
-- seconds since its oldest due job became due. The counts read the partial indexes over
-- available/running jobs, never the whole table.
SELECT k.key, k.max_running, k.running,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'running' AND j.concurrency_key = k.key) AS running_jobs,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key AND j.run_at <= now()) AS due,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key AND j.run_at > now())
           AS scheduled,
       k.rate_count, extract(epoch FROM k.rate_period)::float8 AS rate_seconds,
       -- concurrency_rate_used, inlined: an observer role executes no function of the schema.
       CASE WHEN k.rate_window + k.rate_period > now() THEN k.rate_starts ELSE 0 END
           AS rate_used,
       (SELECT extract(epoch FROM now() - min(j.run_at))::float8 FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key AND j.run_at <= now())
           AS oldest_due_seconds
FROM {schema}.concurrency_keys AS k
ORDER BY k.key;

-- name: doctor_table_sizes
-- Size on disk of each table of schema $1 (total, of which indexes), its estimated live rows
-- (the statistics collector's count, else the planner's), and the dead rows vacuum has not
-- reclaimed yet.
SELECT c.relname::text AS name,
       pg_total_relation_size(c.oid) AS total_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       coalesce(s.n_live_tup, greatest(c.reltuples, 0)::bigint) AS estimated_rows,
       coalesce(s.n_dead_tup, 0) AS dead_rows,
       s.last_autovacuum
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY total_bytes DESC, name;

-- name: doctor_job_states
-- Jobs per state with the age in seconds of the oldest created and the oldest finished one.
-- A full count: doctor is run by hand, not on a hot path.
SELECT state::text AS state, count(*) AS jobs,
       extract(epoch FROM now() - min(created_at))::float8 AS oldest_created_seconds,
       extract(epoch FROM now() - min(finished_at))::float8 AS oldest_finished_seconds
FROM {schema}.jobs
GROUP BY state
ORDER BY state;

-- name: doctor_lapsed_leases
-- Running jobs whose lease has lapsed: how many, how long ago the oldest lapsed (seconds), and a
-- few of their ids, oldest first.
SELECT count(*) AS jobs,
       coalesce(extract(epoch FROM now() - min(lease_expires_at))::float8, 0) AS oldest_seconds,
       coalesce((array_agg(id ORDER BY lease_expires_at, id))[1:5], '{}') AS sample_ids
FROM {schema}.jobs
WHERE state = 'running' AND lease_expires_at < now();

-- name: doctor_server_settings
-- The server settings that matter to a queue, as the connection running this sees them.
SELECT name, setting, coalesce(unit, '') AS unit
FROM pg_settings
WHERE name IN ('jit', 'max_connections', 'autovacuum', 'server_version', 'track_counts')
ORDER BY name;

-- name: doctor_connections
-- Client connections open on the server now, and how many are sweepq's (apps and workers).
SELECT count(*) AS total,
       count(*) FILTER (WHERE application_name LIKE 'sweepq%') AS sweepq
FROM pg_stat_activity
WHERE backend_type = 'client backend';

-- `sweepq top` reads one frame every few seconds, so each of its statements must cost the same
-- on a jobs table of millions of finished jobs as on an empty one: live jobs are read from the
-- partial indexes over available and running jobs, finished jobs only within a time window and
-- at most a bounded number of them (counted newest first, then sampled in bounded ranges), and
-- totals are the planner's estimates.

-- name: top_jobs_estimate
-- The database's now() (the frame's time: every statement of a frame shares its transaction),
-- and the planner's estimate of the rows of schema $1's jobs table (NULL until it was analysed
-- or vacuumed). An exact count would read the whole table.
SELECT now() AS at,
       (SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END
        FROM pg_class AS c
        JOIN pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = 'jobs') AS jobs;

-- name: top_job_live
-- Per queue, its live jobs: available and due now, available and scheduled later, running, and
-- the age in seconds of the oldest due one (since its run_at).
-- One branch per partial index (the claim's two heads, the running leases): `state =
-- 'available'` alone implies neither head's predicate, and the heads hold queue and run_at, so
-- the available jobs are index-only reads. Finished jobs are never visited.
SELECT queue,
       count(*) FILTER (WHERE NOT running AND run_at <= now()) AS due,
       count(*) FILTER (WHERE NOT running AND run_at > now()) AS scheduled,
       count(*) FILTER (WHERE running) AS running,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE NOT running AND run_at <= now()))
           ::float8 AS oldest_due_seconds
FROM (SELECT queue, run_at, false AS running FROM {schema}.jobs
      WHERE state = 'available' AND concurrency_key IS NULL
      UNION ALL
      SELECT queue, run_at, false FROM {schema}.jobs
      WHERE state = 'available' AND concurrency_key IS NOT NULL
      UNION ALL
      SELECT queue, run_at, true FROM {schema}.jobs
      WHERE state = 'running') AS live
GROUP BY queue
ORDER BY queue;

-- name: top_job_finished
-- Per queue, the jobs finished in the windows of a frame, counted exactly from the newest back:
-- failed in the last hour, completed in the last minute, and finished in any way after $1 (the
-- previous frame's now(); NULL on the first), each window open at its start (`finished_at >
-- now() - interval '1 hour'`). The index over finished jobs is walked from the newest back to
-- the oldest window's start and stops after $2 jobs (it reads one more, which tells whether
-- there were more): a busy hour cannot make a frame slow, and jobs finished before the windows
-- are never read, however many there are. When it stopped short, `cut` is the finished_at where
-- it stopped, and the counts are those of the jobs finished after `cut` (all of which were
-- read; of those finished at `cut` itself maybe not all); the rest of each window is estimated
-- by the caller from top_job_finished_sample. `read` is the jobs of the queue read.
-- The window's start is a sub-select, which the planner cannot see into: given the value, it
-- trusts the statistics' estimate of the window, which stale statistics put far below the truth
-- after a busy hour (7,453 estimated, 303,736 read), and then reads the whole window to sort it.
-- Blind, it walks the index newest first and the LIMIT stops it.
WITH recent AS MATERIALIZED (
    SELECT queue, state, finished_at
    FROM {schema}.jobs
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND finished_at > (SELECT least(now() - interval '1 hour', $1::timestamptz))
    ORDER BY finished_at DESC
    LIMIT $2 + 1
),
stop AS (
    SELECT CASE WHEN count(*) > $2 THEN min(finished_at) END AS cut FROM recent
)
SELECT r.queue,
       count(*) FILTER (WHERE r.state = 'failed' AND r.finished_at > now() - interval '1 hour'
                          AND r.finished_at > coalesce(s.cut, '-infinity')) AS failed_last_hour,
       count(*) FILTER (WHERE r.state = 'completed'
                          AND r.finished_at > now() - interval '1 minute'
                          AND r.finished_at > coalesce(s.cut, '-infinity'))
           AS completed_last_minute,
       count(*) FILTER (WHERE r.finished_at > $1::timestamptz
                          AND r.finished_at > coalesce(s.cut, '-infinity')) AS finished_since,
       count(*) AS read,
       s.cut
FROM recent AS r
CROSS JOIN stop AS s
GROUP BY r.queue, s.cut
ORDER BY r.queue;

-- name: top_job_finished_sample
-- Per range [$1[i], $2[i]) (i from 1), per queue and state, the finished jobs in it, oldest
-- first and at most $3 of them per range, with the newest finished_at read: the sample from
-- which a frame estimates the part of a window top_job_finished did not count. Each range is
-- one descent of the index over finished jobs and a walk of at most $3 entries, so a sample
-- costs at most (ranges x $3) rows, however many jobs finished in the window.
SELECT r.i::int AS range, s.queue, s.state::text AS state, count(*) AS jobs,
       max(s.finished_at) AS newest
FROM unnest($1::timestamptz[], $2::timestamptz[]) WITH ORDINALITY AS r (lo, hi, i)
CROSS JOIN LATERAL (
    SELECT j.queue, j.state, j.finished_at
    FROM {schema}.jobs AS j
    WHERE j.state IN ('completed', 'failed', 'cancelled')
      AND j.finished_at >= r.lo AND j.finished_at < r.hi
    ORDER BY j.finished_at
    LIMIT $3
) AS s
GROUP BY r.i, s.queue, s.state
ORDER BY r.i, s.queue, s.state;

-- name: top_concurrency_key_busiest
-- The $1 concurrency keys with the most due jobs waiting (then the most running), each with its
-- limit, its running counter, its running jobs, its due and scheduled jobs, its rate and the age
-- of its oldest due job, in the columns of doctor_concurrency_keys. Only keys with live jobs are read, from the partial indexes over
-- keyed available jobs and running jobs; a key's row is one primary-key probe. Keys with nothing
-- live, however many, cost nothing.
WITH waiting AS (
    SELECT concurrency_key AS key,
           count(*) FILTER (WHERE run_at <= now()) AS due,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due
    FROM {schema}.jobs
    WHERE state = 'available' AND concurrency_key IS NOT NULL
    GROUP BY concurrency_key
),
running AS (
    SELECT concurrency_key AS key, count(*) AS running_jobs
    FROM {schema}.jobs
    WHERE state = 'running' AND concurrency_key IS NOT NULL
    GROUP BY concurrency_key
),
busiest AS (
    SELECT key, coalesce(w.due, 0) AS due, coalesce(w.scheduled, 0) AS scheduled,
           coalesce(r.running_jobs, 0) AS running_jobs, w.oldest_due
    FROM waiting AS w
    FULL JOIN running AS r USING (key)
    ORDER BY due DESC, running_jobs DESC, key
    LIMIT $1
)
SELECT b.key, k.max_running, coalesce(k.running, 0) AS running, b.running_jobs, b.due,
       b.scheduled, k.rate_count, extract(epoch FROM k.rate_period)::float8 AS rate_seconds,
       -- concurrency_rate_used, inlined: an observer role executes no function of the schema.
       CASE WHEN k.rate_window + k.rate_period > now() THEN k.rate_starts ELSE 0 END
           AS rate_used,
       extract(epoch FROM now() - b.oldest_due)::float8 AS oldest_due_seconds
FROM busiest AS b
LEFT JOIN {schema}.concurrency_keys AS k ON k.key = b.key
ORDER BY b.due DESC, b.running_jobs DESC, b.key;

-- name: top_worker_list
-- The workers connected to this database now, one row per worker: its id (from its
-- connections' application_name, `sweepq worker <id>`, cut at 63 characters like the name),
-- its connections, the seconds since the oldest of them started (NULL where this role may not
-- see it), and the running jobs of this schema it holds (which tells this schema's workers from
-- those of other schemas on the same database). Running jobs are read from their partial index.
WITH connected AS (
    SELECT substr(application_name, 15) AS worker_id, count(*) AS connections,
           extract(epoch FROM now() - min(backend_start))::float8 AS connected_seconds
    FROM pg_stat_activity
    WHERE application_name LIKE 'sweepq worker %' AND datname = current_database()
    GROUP BY application_name
),
holding AS (
    SELECT left(worker_id, 49) AS worker_id, count(*) AS running
    FROM {schema}.jobs
    WHERE state = 'running'
    GROUP BY 1
)
SELECT c.worker_id, c.connections, c.connected_seconds, coalesce(h.running, 0) AS running
FROM connected AS c
LEFT JOIN holding AS h USING (worker_id)
ORDER BY c.connected_seconds DESC NULLS LAST, c.worker_id;

-- name: top_leader
-- The maintenance leader: its worker, the seconds since it was elected, and the seconds left in
-- its term (negative once the term has lapsed and no worker has taken over).
SELECT worker_id,
       extract(epoch FROM now() - elected_at)::float8 AS elected_seconds,
       extract(epoch FROM expires_at - now())::float8 AS term_left_seconds
FROM {schema}.leaders
WHERE role = 'maintenance';

-- name: job_waits
-- Why each job of $1 waits, if it does: its state and queue, the seconds it has been due
-- without a worker claiming it (available and due), the seconds until it is due (available,
-- later), the newest entry of its history, whether any job of its queue runs now (whether a
-- worker serves that queue), and whether its queue is paused. Running jobs are read from their
-- partial index.
SELECT j.id, j.state::text AS state, j.queue,
       CASE WHEN j.state = 'available' AND j.run_at <= now()
            THEN extract(epoch FROM now() - j.run_at)::float8 END AS due_seconds,
       CASE WHEN j.state = 'available' AND j.run_at > now()
            THEN extract(epoch FROM j.run_at - now())::float8 END AS wait_seconds,
       j.errors -> -1 ->> 'kind' AS last_kind,
       j.errors -> -1 ->> 'error' AS last_error,
       EXISTS (SELECT FROM {schema}.jobs AS r
               WHERE r.state = 'running' AND r.queue = j.queue) AS queue_running,
       EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = j.queue) AS queue_paused
FROM {schema}.jobs AS j
WHERE j.id = ANY($1::bigint[]);

-- name: job_get_json
-- One job by id as one JSON object that decodes into Job (its json columns nested as JSON,
-- its timestamps in ISO 8601 with their offset); no row if there is none. For a driver other
-- than asyncpg: its one caller is the Django backend (SweepqBackend._read), on Django's own
-- connection, in the caller's transaction.
SELECT row_to_json(j)::text FROM {schema}.jobs AS j WHERE j.id = $1;
