-- sweepq schema, version 3: a token per claim, and admission that reads only keys that can run.

-- How many times the job was claimed; never reset (not by retry, cancel or rescue). With the id
-- it is the token of the claim that holds the job: heartbeats and outcomes present it, so an
-- execution that lost its lease can never touch a later one, even after retry() resets attempt.
ALTER TABLE {schema}.jobs ADD COLUMN claims integer NOT NULL DEFAULT 0;

-- next_run_at: no later than the earliest run_at of the key's available jobs; NULL when it has
-- none. Enqueues never write it (they leave a wake-up instead, below), so enqueuers and workers
-- never wait on each other's lock of a key's row. Claims, outcomes and rescues lower it while
-- they hold the row; a claim that finds nothing due on a key raises it, only if `version` shows
-- that no job became available for the key since the claim's snapshot.
ALTER TABLE {schema}.concurrency_keys
    ADD COLUMN next_run_at timestamptz,
    ADD COLUMN version bigint NOT NULL DEFAULT 0;

-- The keys a claim reads: those with room and a job waiting, earliest first. A key at its limit,
-- a key with nothing waiting, and a key whose jobs are all scheduled later are not in the range a
-- claim scans, however many there are.
CREATE INDEX concurrency_keys_ready ON {schema}.concurrency_keys (next_run_at, key)
    WHERE next_run_at IS NOT NULL AND (max_running IS NULL OR running < max_running);

-- One row per enqueue (or retry) that made jobs of a key available: the earliest run_at among
-- them. Written in the enqueuer's transaction, so it exists exactly when its jobs do; the next
-- claim folds it into the key's next_run_at (creating the key's row if it has none) and deletes
-- it. A key row that pruning removed under an enqueue in flight is thereby put back.
CREATE TABLE {schema}.concurrency_wakeups (
    key    text        NOT NULL,
    run_at timestamptz NOT NULL
);

-- The earliest run_at of key k's available jobs, or NULL: one index probe per (queue, priority)
-- the key's jobs use, so the jobs behind each head are never read.
CREATE FUNCTION {schema}.concurrency_key_next_run_at(k text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    q text;
    p smallint;
    next_q text;
    next_p smallint;
    head timestamptz;
    earliest timestamptz;
BEGIN
    SELECT j.queue, j.priority INTO q, p FROM {schema}.jobs AS j
    WHERE j.state = 'available' AND j.concurrency_key = k
    ORDER BY j.queue, j.priority DESC LIMIT 1;
    WHILE q IS NOT NULL LOOP
        SELECT j.run_at INTO head FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k AND j.queue = q AND j.priority = p
        ORDER BY j.run_at LIMIT 1;
        earliest := least(earliest, head);
        -- The next (queue, priority): a lower priority of this queue, else the next queue.
        SELECT j.queue, j.priority INTO next_q, next_p FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = k AND j.queue = q AND j.priority < p
        ORDER BY j.priority DESC LIMIT 1;
        IF next_q IS NULL THEN
            SELECT j.queue, j.priority INTO next_q, next_p FROM {schema}.jobs AS j
            WHERE j.state = 'available' AND j.concurrency_key = k AND j.queue > q
            ORDER BY j.queue, j.priority DESC LIMIT 1;
        END IF;
        q := next_q;
        p := next_p;
    END LOOP;
    RETURN earliest;
END
$$;

-- Keys of jobs enqueued before this version: put each where a claim finds it.
INSERT INTO {schema}.concurrency_keys AS k (key, next_run_at)
SELECT concurrency_key, min(run_at) FROM {schema}.jobs
WHERE state = 'available' AND concurrency_key IS NOT NULL
GROUP BY concurrency_key
ON CONFLICT (key) DO UPDATE SET next_run_at = EXCLUDED.next_run_at;
