-- Statements over {schema}.concurrency_keys.

-- name: concurrency_key_set_limit
-- Set (or, with NULL, remove) the most jobs of key $1 that may run at once.
INSERT INTO {schema}.concurrency_keys AS k (key, max_running) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now();

-- name: concurrency_key_list
-- Every key with its limit, running count and waiting (available) jobs.
SELECT k.key, k.max_running, k.running,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key) AS waiting
FROM {schema}.concurrency_keys AS k
ORDER BY k.key;

-- name: concurrency_key_prune
-- Delete up to $2 keys that carry no limit, run nothing, wait for nothing, and were last set
-- before now() - $1 seconds.
WITH doomed AS (
    SELECT key FROM {schema}.concurrency_keys AS k
    WHERE k.max_running IS NULL AND k.running = 0
      AND k.updated_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS j
                      WHERE j.state = 'available' AND j.concurrency_key = k.key)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.concurrency_keys AS k USING doomed WHERE k.key = doomed.key;

-- name: concurrency_key_repair
-- Recreate the row of any key that available jobs carry but that has none (an enqueue that
-- raced the key's pruning), so that no job is left unclaimable.
INSERT INTO {schema}.concurrency_keys (key)
SELECT DISTINCT concurrency_key FROM {schema}.jobs
WHERE state = 'available' AND concurrency_key IS NOT NULL
ON CONFLICT (key) DO NOTHING;
