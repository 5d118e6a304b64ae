-- sweepq schema, version 9: job results, and waiting for a job to finish.

-- What the handler returned (JSON), set when the job completes; NULL when it returned None, and
-- for every other state (a retry clears it). json, not jsonb, as for args: it reads back exactly
-- as the handler's value was encoded (jsonb would turn 1.5e16 into an integer, reorder keys and
-- refuse "\u0000"), writing it costs a syntax check rather than a conversion, and nothing here
-- queries inside it. Its size is bounded by the worker (App(result_max_bytes=...)). It goes with
-- the job's row, so retention removes it with the job.
ALTER TABLE {schema}.jobs ADD COLUMN result json;

-- Who waits for which job (App.wait_for): a waiter LISTENs on the schema's "finished" channel,
-- then inserts its row here, then reads the job. A statement that makes jobs terminal then calls
-- job_waiters_notify with their ids, which notifies only the jobs found here: no NOTIFY is sent
-- for a job nobody waits for. A waiter deletes its row when it stops waiting and renews it while
-- it waits; rows of waiters that died are pruned by age (core/retention.py).
CREATE TABLE {schema}.job_waiters (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    renewed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_waiters_job ON {schema}.job_waiters (job_id);
CREATE INDEX job_waiters_renewed ON {schema}.job_waiters (renewed_at);

-- The lock that orders a waiter's first read of its job against the statements making jobs
-- terminal (see job_waiters_notify): one per schema, taken shared by them, exclusive by a reader.
CREATE FUNCTION {schema}.job_waiters_lock_key() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('sweepq:job_waiters:' || btrim('{schema}', '"'), 0)
$$;

-- Notify the schema's "finished" channel of the jobs among `ids` (jobs just made terminal by the
-- calling statement) that someone waits for: one notification per statement, their ids
-- comma-separated (split in several below the 8,000-byte payload limit), delivered at commit.
--
-- Why no waiter is missed (the waiter's side is core/waiters.py): the caller runs this after its
-- UPDATE (it aggregates the UPDATE's rows first). This takes the schema's waiter lock shared, and
-- only then reads job_waiters, with a fresh snapshot (VOLATILE). A waiter inserts its row, then
-- reads the job in job_settled, which takes the same lock exclusive before it reads. Whichever
-- got the lock first: if this did, the waiter's read waits for this transaction to commit and
-- sees the job terminal; if the waiter did, this waits for its read to end, and its row,
-- committed before that read, is in the snapshot here, so it is notified (it LISTENs since
-- before it inserted the row). Outside READ COMMITTED the snapshot is the transaction's, older
-- than the lock, so every id is notified instead.
CREATE FUNCTION {schema}.job_waiters_notify(ids bigint[]) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- finished_channel() of core/queries.py: the schema's name, hashed when it would be too long.
    schema_name CONSTANT text := btrim('{schema}', '"');
    channel CONSTANT text := CASE
        WHEN octet_length('sweepq_done_' || schema_name) <= 63 THEN 'sweepq_done_' || schema_name
        ELSE 'sweepq_done_' || left(encode(sha256(convert_to(schema_name, 'UTF8')), 'hex'), 32)
        END;
    waited text[];
    payload text := '';
    one text;
BEGIN
    IF ids IS NULL OR cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    IF current_setting('transaction_isolation') = 'read committed' THEN
        PERFORM pg_advisory_xact_lock_shared({schema}.job_waiters_lock_key());
        -- Nobody waits, most of the time: one probe of an empty table, and nothing more.
        IF NOT EXISTS (SELECT FROM {schema}.job_waiters) THEN
            RETURN 0;
        END IF;
        SELECT array_agg(DISTINCT w.job_id::text) INTO waited
        FROM {schema}.job_waiters AS w WHERE w.job_id = ANY(ids);
    ELSE
        SELECT array_agg(DISTINCT i::text) INTO waited FROM unnest(ids) AS i;
    END IF;
    IF waited IS NULL THEN
        RETURN 0;
    END IF;
    FOREACH one IN ARRAY waited LOOP
        IF octet_length(payload) + octet_length(one) >= 7900 THEN
            PERFORM pg_notify(channel, payload);
            payload := '';
        END IF;
        payload := CASE WHEN payload = '' THEN one ELSE payload || ',' || one END;
    END LOOP;
    PERFORM pg_notify(channel, payload);
    RETURN cardinality(waited);
END
$$;

-- The job as a waiter reads it: after the statements making jobs terminal that hold the
-- schema's waiter lock have committed (see job_waiters_notify). The lock is held to the end of
-- the caller's transaction (a single statement, for a waiter), and the row is read with a
-- snapshot taken after it. No row lock: claims and rescues never skip a job because it is read.
CREATE FUNCTION {schema}.job_settled(job_id bigint) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({schema}.job_waiters_lock_key());
    RETURN QUERY SELECT * FROM {schema}.jobs AS j WHERE j.id = job_settled.job_id;
END
$$;
