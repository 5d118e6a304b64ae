-- Statements over the core's {schema}.jobs that concern one run's leaves: the jobs of
-- idempotency scope 'sweep:<run id>'.

-- name: sweep_leaf_counts
-- A run's leaves per state, through the idempotency index (every leaf carries a key). Read
-- once, when the run ends, to make its counters exact.
SELECT state::text AS state, count(*) AS n
FROM {schema}.jobs
WHERE idempotency_scope = $1 AND idempotency_key IS NOT NULL
GROUP BY state;

-- name: sweep_leaf_cancel
-- Cancel a run's outstanding leaves (through jobs_sweep_outstanding), the running ones too when
-- $3. A running leaf loses its lease, so its worker's outcome is fenced out and the run's final
-- counters stay exact. Leaves never carry a concurrency key (a sweep does not set one), so no
-- key's count is released.
WITH target AS (
    SELECT id FROM {schema}.jobs
    WHERE idempotency_scope = $1
      AND state IN ('available', 'running')
      AND idempotency_scope LIKE 'sweep:%'
      AND (state = 'available' OR $3::boolean)
    ORDER BY id
    FOR UPDATE
)
UPDATE {schema}.jobs AS j SET
    state = 'cancelled', finished_at = now(), worker_id = NULL, lease_expires_at = NULL,
    errors = (
        -- keep the newest ten, as every statement that appends an error does
        SELECT coalesce(jsonb_agg(e.value ORDER BY e.n), '[]'::jsonb)
        FROM jsonb_array_elements(j.errors || jsonb_build_array(jsonb_build_object(
                 'attempt', j.attempt, 'at', now(), 'kind', 'cancelled', 'error', $2::text)))
             WITH ORDINALITY AS e(value, n)
        WHERE e.n > jsonb_array_length(j.errors) + 1 - 10
    )
FROM target AS t
WHERE j.id = t.id;
