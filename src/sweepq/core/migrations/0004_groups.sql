-- sweepq schema, version 4: job groups, and the pieces several statements share.

-- A job group: jobs enqueued under one name, counted, cancelled and retried together. One index
-- serves all of it: a group's outstanding jobs are two short ranges of it, its counts per state
-- an index-only scan of the group's entries, never of the rest of the table.
ALTER TABLE {schema}.jobs ADD COLUMN job_group text;
CREATE INDEX jobs_group ON {schema}.jobs (job_group, state) WHERE job_group IS NOT NULL;

-- Append one error to a job's history, keeping the newest ten: history per job is bounded by
-- construction, whatever the number of executions.
CREATE FUNCTION {schema}.job_errors_append(errors jsonb, entry jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(e.value ORDER BY e.n), '[]'::jsonb)
    FROM jsonb_array_elements(errors || jsonb_build_array(entry)) WITH ORDINALITY AS e(value, n)
    WHERE e.n > jsonb_array_length(errors) + 1 - 10
$$;

-- Give back the slots of jobs that left `running`: one entry per job in `keys`, and in `due`
-- its new run_at if it went back to `available` (its key then has a job waiting), else NULL.
-- Rows are locked in key order, as every statement writing several key rows does, so that
-- claims, outcomes, rescues and cancels never deadlock on them.
CREATE FUNCTION {schema}.concurrency_release(keys text[], due timestamptz[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    released integer;
BEGIN
    PERFORM 1 FROM {schema}.concurrency_keys WHERE key = ANY(keys) ORDER BY key
    FOR NO KEY UPDATE;
    UPDATE {schema}.concurrency_keys AS k
    SET running = k.running - f.n,
        next_run_at = least(k.next_run_at, f.due),
        version = k.version + (f.due IS NOT NULL)::integer
    FROM (SELECT r.key, count(*)::integer AS n, min(r.due) AS due
          FROM unnest(keys, due) AS r(key, due)
          WHERE r.key IS NOT NULL
          GROUP BY r.key) AS f
    WHERE k.key = f.key;
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;
