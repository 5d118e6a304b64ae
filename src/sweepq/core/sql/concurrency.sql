-- Statements over {schema}.concurrency_keys.

-- name: concurrency_key_set_limit
-- Set (or, with NULL, remove) the most jobs of key $1 that may run at once, its weight $3
-- (turns in a row) and whether its jobs start in enqueue order ($4); NULL leaves either as it
-- is. An ordered key's limit is 1 (a CHECK says so).
INSERT INTO {schema}.concurrency_keys AS k (key, max_running, weight, ordered)
VALUES ($1, $2, coalesce($3, 1), coalesce($4, false))
ON CONFLICT (key) DO UPDATE
SET max_running = EXCLUDED.max_running,
    weight = coalesce($3, k.weight),
    turns = CASE WHEN $3 IS NULL THEN k.turns ELSE 0 END,
    ordered = coalesce($4, k.ordered),
    updated_at = now();

-- name: concurrency_key_set_rate
-- Set (or, with a NULL count, remove) the rate of key $1: at most $2 starts per window of $3
-- seconds. Removing it puts the key back in the walk at once if its place waited for a window.
INSERT INTO {schema}.concurrency_keys AS k (key, rate_count, rate_period)
VALUES ($1, $2, make_interval(secs => $3))
ON CONFLICT (key) DO UPDATE
SET rate_count = EXCLUDED.rate_count,
    rate_period = EXCLUDED.rate_period,
    next_run_at = CASE WHEN EXCLUDED.rate_count IS NULL AND k.next_run_at > now() THEN now()
                       ELSE k.next_run_at END,
    version = k.version + 1,
    updated_at = now();

-- name: concurrency_key_list
-- Every key with its limit, running count and waiting (available) jobs, its rate (starts per
-- window, the window in seconds), the starts counted in the current window, its weight and
-- whether its jobs start in enqueue order.
SELECT k.key, k.max_running, k.running,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k.key) AS waiting,
       k.rate_count, extract(epoch FROM k.rate_period)::float8 AS rate_seconds,
       -- concurrency_rate_used, inlined: an observer role executes no function of the schema.
       CASE WHEN k.rate_window + k.rate_period > now() THEN k.rate_starts ELSE 0 END AS rate_used,
       k.weight, k.ordered
FROM {schema}.concurrency_keys AS k
ORDER BY k.key;

-- name: concurrency_key_prune
-- Delete up to $2 keys that carry no limit, run nothing, have nothing waiting, and were last set
-- or woken before now() - $1 seconds. An enqueue of the key still in flight is safe: its wake-up
-- commits with its jobs, and the claim that reads it creates the key's row again.
WITH doomed AS (
    SELECT key FROM {schema}.concurrency_keys AS k
    WHERE k.max_running IS NULL AND k.rate_count IS NULL AND k.weight = 1 AND NOT k.ordered
      AND k.running = 0
      AND k.next_run_at IS NULL
      AND k.updated_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS j
                      WHERE j.state = 'available' AND j.concurrency_key = k.key)
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.concurrency_keys AS k USING doomed WHERE k.key = doomed.key;

-- name: concurrency_wakeup_apply
-- Fold up to $1 wake-ups into their keys' rows (as a claim does), for when no worker claims.
WITH woken AS (
    DELETE FROM {schema}.concurrency_wakeups AS u
    WHERE u.ctid = ANY(ARRAY(SELECT ctid FROM {schema}.concurrency_wakeups
                             LIMIT $1 FOR UPDATE SKIP LOCKED))
    RETURNING u.key, u.run_at
),
locked AS MATERIALIZED (
    -- The keys' existing rows, locked in key order before any is written, as claims, outcomes,
    -- rescues and cancels lock them: upserted in the aggregate's order instead, two of them
    -- deadlocked with an outcome write freeing the same two keys.
    SELECT key FROM {schema}.concurrency_keys
    WHERE key = ANY(ARRAY(SELECT key FROM woken))
    ORDER BY key
    FOR NO KEY UPDATE
),
awake AS (
    -- As in job_claim: a wake-up of a key with no job waiting wakes nothing. Keys without a row
    -- get one, in key order too.
    INSERT INTO {schema}.concurrency_keys AS k (key, next_run_at)
    SELECT u.key, min(u.run_at)
    FROM woken AS u CROSS JOIN (SELECT count(*) FROM locked) AS locked_first
    WHERE EXISTS (SELECT FROM {schema}.jobs AS j
                  WHERE j.state = 'available' AND j.concurrency_key = u.key)
    GROUP BY u.key
    ORDER BY u.key
    ON CONFLICT (key) DO UPDATE
    SET next_run_at = {schema}.concurrency_place(
            least(k.next_run_at, EXCLUDED.next_run_at), k.rate_count, k.rate_period,
            k.rate_window, k.rate_starts),
        version = k.version + 1,
        updated_at = now()
)
SELECT count(*) FROM woken;
