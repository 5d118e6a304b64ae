-- Statements read by sweepq.contrib's metrics. Each is loaded once, with {schema} replaced by
-- the validated, quoted schema name, and called by exactly one typed wrapper.

-- name: queue_sample
-- Per queue with live jobs: jobs available and due, available and scheduled for later, running,
-- and the age in seconds of the oldest due job (0 if none), all at one instant of database time.
-- Each branch matches one partial index's predicate (jobs_claim_unkeyed, jobs_claim_keyed,
-- jobs_running_lease), so the statement reads live jobs only: its cost follows the backlog,
-- never the finished history retention keeps. The two available branches are index-only scans
-- (queue and run_at are in both claim indexes); a running job costs one heap fetch.
WITH live AS (
    SELECT queue, run_at, false AS running
    FROM {schema}.jobs
    WHERE state = 'available' AND concurrency_key IS NULL
    UNION ALL
    SELECT queue, run_at, false
    FROM {schema}.jobs
    WHERE state = 'available' AND concurrency_key IS NOT NULL
    UNION ALL
    SELECT queue, NULL, true
    FROM {schema}.jobs
    WHERE state = 'running'
)
SELECT queue,
       count(*) FILTER (WHERE NOT running AND run_at <= now()) AS due,
       count(*) FILTER (WHERE NOT running AND run_at > now()) AS scheduled,
       count(*) FILTER (WHERE running) AS running,
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now())), 0)::float8
           AS oldest_due_age
FROM live
GROUP BY queue
ORDER BY queue;
