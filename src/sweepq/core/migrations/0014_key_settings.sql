-- sweepq schema, version 14: rate limits per concurrency key, admitted inside the claim
-- (App.set_rate_limit), weights for the keys' turns and keys whose jobs start in enqueue order
-- (set_concurrency_limit(weight=, ordered=)).
-- At most rate_count jobs of the key start per window of rate_period; the windows are aligned
-- on multiples of rate_period since the Unix epoch (a minute's window starts on the minute). A
-- job over the rate stays `available`, holds no slot, and nothing is written while it waits:
-- the claim that fills a window moves the key's place in the walk (next_run_at) to the
-- window's end, so the walk reads the key again once per window.
--
-- Retention: these columns live on the key's row; a key with a rate, a weight or an order is
-- never pruned (they are settings, as a limit is); removing them makes it prunable again.
ALTER TABLE {schema}.concurrency_keys
    ADD COLUMN rate_count integer CHECK (rate_count >= 1),
    ADD COLUMN rate_period interval CHECK (rate_period > interval '0'),
    -- The window the last admission counted in, and the jobs it started in it.
    ADD COLUMN rate_window timestamptz,
    ADD COLUMN rate_starts integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT concurrency_keys_rate CHECK ((rate_count IS NULL) = (rate_period IS NULL)),
    -- Turns in a row: a key of weight 3 keeps its place in the claim's walk for 3 claims that
    -- start its jobs before it goes behind the keys waiting since (`turns`: those it took at
    -- its place). A weight other than 1 is a setting: such a key is never pruned.
    ADD COLUMN weight integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    ADD COLUMN turns integer NOT NULL DEFAULT 0,
    -- Ordered: the key's jobs start one at a time, strictly in enqueue order (by id): only its
    -- head (its available job of the lowest id) may start, and a head that waits (a retry's
    -- backoff, a snooze, a job scheduled later) holds the others back until it ends.
    ADD COLUMN ordered boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT concurrency_keys_ordered CHECK (NOT ordered OR max_running = 1);

-- An ordered key's head: its available job of the lowest id, one index probe. It holds the
-- queue and run_at too, so a read of keyed available jobs that the planner sends here (it is
-- narrower than the claim's index) stays index-only.
CREATE INDEX jobs_key_order ON {schema}.jobs (concurrency_key, id) INCLUDE (queue, run_at)
    WHERE state = 'available' AND concurrency_key IS NOT NULL;

-- The start of the rate window that now() falls in, for a key of rate_period `period`: its last
-- window while that lasts, else the aligned window of now(). NULL without a rate.
CREATE FUNCTION {schema}.concurrency_rate_window(period interval, last_window timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN period IS NULL THEN NULL
                WHEN last_window + period > now() THEN last_window
                ELSE to_timestamp(floor(extract(epoch FROM now()) / extract(epoch FROM period))
                                  * extract(epoch FROM period)) END
$$;

-- The jobs of the key started in the window that now() falls in (0 without a rate).
CREATE FUNCTION {schema}.concurrency_rate_used(period interval, last_window timestamptz,
                                               starts integer)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN last_window + period > now() THEN starts ELSE 0 END
$$;

-- A key's place in the claim's walk, `place`, moved to the end of its window when its rate is
-- spent in it: every write that sets a key's place goes through this, so that no wake-up,
-- release or retry brings a key whose rate is spent back into the walk before its window ends.
-- NULL stays NULL (nothing waits).
CREATE FUNCTION {schema}.concurrency_place(place timestamptz, count integer, period interval,
                                           last_window timestamptz, starts integer)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN place IS NULL THEN NULL
                WHEN count IS NOT NULL AND starts >= count AND last_window + period > now()
                THEN greatest(place, last_window + period)
                ELSE place END
$$;

-- The release of keys' slots (outcomes, rescues, cancels), as in version 4, its place kept at or
-- after the end of a spent rate window.
CREATE OR REPLACE FUNCTION {schema}.concurrency_release(keys text[], due timestamptz[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    released integer;
BEGIN
    PERFORM 1 FROM {schema}.concurrency_keys WHERE key = ANY(keys) ORDER BY key
    FOR NO KEY UPDATE;
    UPDATE {schema}.concurrency_keys AS k
    SET running = k.running - f.n,
        next_run_at = {schema}.concurrency_place(least(k.next_run_at, f.due), k.rate_count,
                                                 k.rate_period, k.rate_window, k.rate_starts),
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

-- As every function of the schema: not PUBLIC's to call (see version 10). The claim calls them:
-- roles granted the jobs table one by one that may update jobs (workers) get them, as roles of
-- the default privileges do.
REVOKE EXECUTE ON FUNCTION {schema}.concurrency_rate_window(interval, timestamptz),
    {schema}.concurrency_rate_used(interval, timestamptz, integer),
    {schema}.concurrency_place(timestamptz, integer, interval, timestamptz, integer)
    FROM PUBLIC;
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = btrim('{schema}', '"') AND g.table_name = 'jobs'
          AND g.privilege_type = 'UPDATE' AND g.grantee <> 'PUBLIC'
          AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %1$s.concurrency_rate_window(interval, '
                       'timestamptz), %1$s.concurrency_rate_used(interval, timestamptz, integer), '
                       '%1$s.concurrency_place(timestamptz, integer, interval, timestamptz, '
                       'integer) TO %2$I', '{schema}', grantee);
    END LOOP;
END
$$;
