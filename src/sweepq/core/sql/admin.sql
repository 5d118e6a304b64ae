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
-- counter must equal them), and its available jobs: due now, and scheduled for later.
-- Both counts read the partial indexes over available/running jobs, never the whole table.
SELECT k.key, k.max_running, k.running,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'running' AND j.concurrency_key = k.key) AS running_jobs,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key AND j.run_at <= now()) AS due,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key AND j.run_at > now())
           AS scheduled
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
