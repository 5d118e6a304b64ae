-- sweepq schema, version 10: jobs that kill their workers, jobs for tasks a worker does not know,
-- and no lock or function an outside role can use against the queue (the ops guide's "Roles"
-- says which role may do what).

-- How many workers died while running the job (their leases lapsed with none of their
-- connections open), since it last ran to an end under a live worker: job_rescue counts them,
-- job_claim runs a job that has one alone among a worker's suspects, and a second death fails
-- it `worker_died` instead of taking down more workers. Existing jobs start at 0.
ALTER TABLE {schema}.jobs ADD COLUMN crashes integer NOT NULL DEFAULT 0;
-- How many times in a row a worker with no handler for the job's task handed it back (a rolling
-- deploy: an older worker met a task the newer code added); the tenth fails it `unknown_task`.
ALTER TABLE {schema}.jobs ADD COLUMN handbacks integer NOT NULL DEFAULT 0;

-- As in versions 6 and 7: the new check only widens the old one, so NOT VALID skips a scan.
ALTER TABLE {schema}.jobs
    DROP CONSTRAINT jobs_failure_reason_check,
    ADD CONSTRAINT jobs_failure_reason_check CHECK (
        failure_reason IN ('max_attempts_exceeded', 'deadline_exceeded', 'error', 'invalid_args',
                           'timeout', 'worker_died', 'unknown_task')
    ) NOT VALID;

-- Names a layer keeps for its own jobs: `kind` is 'group' or 'idempotency_scope', and a job whose
-- group or scope begins with `prefix` can only come from that layer (the sweeps keep 'sweep:'
-- and 'sweep-link:' for the leaves and links of their runs). Written by the layers' migrations;
-- bounded by construction. The enqueue function refuses them; so does App.enqueue, from each
-- layer's own declaration (a test holds the two together).
CREATE TABLE {schema}.reserved_names (
    kind      text NOT NULL CHECK (kind IN ('group', 'idempotency_scope')),
    prefix    text NOT NULL CHECK (prefix <> ''),
    component text NOT NULL,
    PRIMARY KEY (kind, prefix)
);

-- One row per identity enqueued with unique_for, locked by its enqueuers for the rest of their
-- transaction (job_identity_lock), so that two of them cannot both find no recent job and both
-- insert one. A row lock, not an advisory lock: only roles that may write this table can take
-- it. Retention removes the rows of identities no job carries any more.
CREATE TABLE {schema}.identity_locks (
    identity_key text PRIMARY KEY
);

-- Waiting for a job (App.wait_for) without a lock anyone could take: the advisory lock that
-- ordered a waiter's read against the statements ending jobs goes. The waiter's read now takes a
-- share lock on the job's own row for an instant instead (job_settled), which a statement ending
-- the job conflicts with by the UPDATE it makes anyway.
--
-- Why no waiter is missed (the waiter's side is core/waiters.py): a waiter LISTENs, inserts its
-- row into job_waiters (committed), then reads the job FOR SHARE. A statement ending the job
-- updates its row, then (in READ COMMITTED) reads job_waiters with a fresh snapshot here.
-- If the update came first, the waiter's read waits for that statement's transaction to end
-- and reads the job as it left it: terminal. If the waiter's read came first, the update waits
-- for the read's lock to go, so the fresh snapshot taken after the update sees the waiter's
-- row, committed before the read: it is notified, and the waiter has been listening since
-- before it inserted the row. Outside READ COMMITTED the snapshot is the transaction's, older
-- than the update, so every id is notified instead.
CREATE OR REPLACE FUNCTION {schema}.job_waiters_notify(ids bigint[]) RETURNS integer
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

-- The job as a waiter reads it, once no transaction that is ending it is still open (see above).
-- The share lock is taken in a subtransaction that is rolled back at once: the lock goes with it,
-- so a caller that keeps its own transaction open holds nothing that could stall a worker.
CREATE OR REPLACE FUNCTION {schema}.job_settled(job_id bigint) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found {schema}.jobs;
BEGIN
    BEGIN
        SELECT * INTO found FROM {schema}.jobs AS j WHERE j.id = job_settled.job_id FOR SHARE;
        RAISE EXCEPTION 'release the lock' USING ERRCODE = 'SQ000';
    EXCEPTION WHEN SQLSTATE 'SQ000' THEN
        NULL;  -- the variable keeps what was read; the row lock is gone
    END;
    IF found.id IS NOT NULL THEN
        RETURN NEXT found;
    END IF;
END
$$;

DROP FUNCTION {schema}.job_waiters_lock_key();

-- The enqueue function of version 5, now: run as the schema's owner with a pinned search_path;
-- refusing JSON nested past 64 levels, args over 1 MiB measured as App.enqueue measures them
-- (compact JSON), task names over 512 characters or in sweepq's own 'sweepq.' namespace, and
-- the names layers keep (reserved_names); serializing unique_for enqueuers on identity_locks.
CREATE OR REPLACE FUNCTION {schema}.enqueue(
    task text, args jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql
-- It runs as the schema's owner, so that a role allowed only to EXECUTE it (see the ops guide,
-- "Roles") enqueues through its checks alone, with no access to the tables; the search_path is
-- pinned, as for every SECURITY DEFINER function, so that no caller's schema can stand in for
-- pg_catalog's functions and operators.
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- JobOptions, in declaration order (the message for an unknown option lists them).
    known CONSTANT text[] := ARRAY[
        'queue', 'priority', 'delay', 'run_at', 'max_attempts', 'idempotency_key',
        'idempotency_scope', 'identity_key', 'unique_for', 'deadline', 'concurrency_key',
        'group', 'timeout', 'trace_context'];
    -- The bounds are Python's, each checked against it by tests/test_sql_enqueue.py:
    -- checks.MAX_SPAN (here in seconds), MAX_KEY_LENGTH (512), MAX_IDEMPOTENCY_BYTES (2,048),
    -- checks.MAX_JSON_DEPTH (64), tasks.MAX_ARGS_BYTES (1 MiB), tasks.MAX_TASK_NAME_LENGTH
    -- (512), PRIORITY_RANGE, MAX_ATTEMPTS_RANGE, ident.queue_name.
    max_span CONSTANT numeric := 3155760000;
    -- notify_channel() of core/queries.py: the schema's name, hashed when it would be too long.
    schema_name CONSTANT text := btrim('{schema}', '"');
    channel CONSTANT text := CASE
        WHEN octet_length('sweepq_' || schema_name) <= 63 THEN 'sweepq_' || schema_name
        ELSE 'sweepq_' || left(encode(sha256(convert_to(schema_name, 'UTF8')), 'hex'), 32) END;
    -- NULL or JSON null means the default, as None does in Python.
    new_args jsonb := CASE WHEN enqueue.args IS NULL OR enqueue.args = 'null' THEN '{}'
                           ELSE enqueue.args END;
    opts jsonb := CASE WHEN enqueue.options IS NULL OR enqueue.options = 'null' THEN '{}'
                       ELSE enqueue.options END;
    given jsonb;        -- the options given, those set to null left out
    unknown text;
    opt text;
    val jsonb;
    bad text;           -- the option refused ...
    must text;          -- ... and what it must be
    run_at_value jsonb;
    -- The new job's values: @app.task's defaults unless given.
    new_queue text := 'default';
    new_priority smallint := 0;
    new_delay float8;
    new_run_at timestamptz;
    new_max_attempts integer := 5;
    new_key text;
    new_scope text := '';
    new_identity text;
    new_unique_for float8;
    new_deadline float8;
    new_timeout float8;
    new_concurrency_key text;
    new_group text;
    new_trace_context text;
    created bigint;
    holder bigint;
    holder_state text;
    found_by text;
    args_bytes integer;
    reserved text;
BEGIN
    -- Checks ---------------------------------------------------------------------------------
    IF enqueue.task IS NULL OR enqueue.task = '' OR length(enqueue.task) > 512 THEN
        RAISE EXCEPTION 'sweepq: task must be the name of a registered task, 1 to 512 '
            'characters, got %', CASE
                WHEN enqueue.task IS NULL THEN 'NULL'
                WHEN length(enqueue.task) <= 80 THEN quote_literal(enqueue.task)
                ELSE quote_literal(left(enqueue.task, 60)) || '...('
                     || length(enqueue.task) || ' characters)' END
            USING ERRCODE = '22SQ1';
    END IF;
    IF starts_with(enqueue.task, 'sweepq.') THEN
        -- sweepq's own tasks (a sweep's links, leaves and starts) are enqueued by sweepq alone.
        RAISE EXCEPTION 'sweepq: task %: names beginning with ''sweepq.'' are sweepq''s own '
            'tasks, which only sweepq enqueues (start a sweep with app.start_sweep or '
            '`sweepq sweep start`)', quote_literal(left(enqueue.task, 80))
            USING ERRCODE = '22SQ1';
    END IF;
    IF jsonb_typeof(new_args) <> 'object' THEN
        RAISE EXCEPTION 'sweepq: args must be a JSON object of the handler''s arguments '
            '(e.g. {"to": "a@example.com"}), got a JSON %', jsonb_typeof(new_args)
            USING ERRCODE = '22SQ1';
    END IF;
    -- The limits of App.enqueue, on the same measure: JSON nested at most 64 deep (the args
    -- object is the first level), and at most 1 MiB of compact JSON. jsonb's text has a space
    -- after each ':' and ','; only args that long with them are measured without them.
    IF jsonb_path_exists(
            new_args, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'sweepq: the args: JSON nested more than 64 levels deep (the most sweepq '
            'stores); flatten the value, or store it elsewhere and pass a reference'
            USING ERRCODE = '22SQ1';
    END IF;
    args_bytes := octet_length(new_args::text);
    IF args_bytes > 1048576 THEN
        args_bytes := octet_length(regexp_replace(
            new_args::text, '("(?:[^"\\]|\\.)*")| ', '\1', 'g'));
    END IF;
    IF args_bytes > 1048576 THEN
        RAISE EXCEPTION 'sweepq: args are % bytes of JSON, over the 1,048,576-byte limit; store '
            'large payloads elsewhere and pass a reference', args_bytes
            USING ERRCODE = '22SQ1';
    END IF;
    IF jsonb_typeof(opts) <> 'object' THEN
        RAISE EXCEPTION 'sweepq: options must be a JSON object of job options, got a JSON %',
            jsonb_typeof(opts)
            USING ERRCODE = '22SQ1', HINT = 'the options are: ' || array_to_string(known, ', ');
    END IF;
    SELECT coalesce(jsonb_object_agg(o.key, o.value) FILTER (WHERE o.value <> 'null'), '{}'),
           string_agg(quote_literal(o.key), ', ' ORDER BY o.key)
               FILTER (WHERE o.key <> ALL (known))
    INTO given, unknown
    FROM jsonb_each(opts) AS o;
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: unknown job option(s) %; the options are: %',
            unknown, array_to_string(known, ', ')
            USING ERRCODE = '22SQ1';
    END IF;

    <<checks>>
    BEGIN
        -- Each option alone (options.Option.check); the first bad one is reported.
        val := given -> 'queue';
        IF val IS NOT NULL AND NOT coalesce(
                jsonb_typeof(val) = 'string'
                AND (val #>> '{}') ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$', false) THEN
            bad := 'queue';
            must := 'a queue name: 1-128 letters, digits and ''_ . : -'', not starting with a sign';
            EXIT checks;
        END IF;
        FOREACH opt IN ARRAY ARRAY['priority', 'max_attempts'] LOOP
            val := given -> opt;
            IF val IS NOT NULL AND NOT (CASE
                    WHEN jsonb_typeof(val) = 'number' AND val::text ~ '^-?[0-9]+$'
                    THEN (val::text)::numeric BETWEEN
                         CASE opt WHEN 'priority' THEN -32768 ELSE 1 END
                         AND CASE opt WHEN 'priority' THEN 32767 ELSE 1000000 END
                    ELSE false END) THEN
                bad := opt;
                must := CASE opt WHEN 'priority' THEN 'an integer in -32768..32767'
                                 ELSE 'an integer in 1..1000000' END;
                EXIT checks;
            END IF;
        END LOOP;
        FOREACH opt IN ARRAY ARRAY['delay', 'unique_for', 'deadline', 'timeout'] LOOP
            val := given -> opt;
            -- A duration is a number of seconds (JSON has no NaN or infinity); only a delay
            -- may be zero.
            IF val IS NOT NULL AND NOT (CASE
                    WHEN jsonb_typeof(val) = 'number'
                    THEN (val::text)::numeric <= max_span
                         AND ((val::text)::numeric > 0
                              OR (opt = 'delay' AND (val::text)::numeric = 0))
                    ELSE false END) THEN
                bad := opt;
                must := CASE opt WHEN 'delay' THEN 'a number of seconds between 0 and 100 years'
                                 ELSE 'a number of seconds above 0 and at most 100 years' END;
                EXIT checks;
            END IF;
        END LOOP;
        val := given -> 'run_at';
        IF val IS NOT NULL THEN
            -- An ISO 8601 time with its UTC offset. PostgreSQL 15's jsonpath datetime() checks
            -- every field without raising; it does not take 'Z', which means +00:00.
            IF jsonb_typeof(val) = 'string'
               AND (val #>> '{}') ~ ('^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}'
                                     '([.][0-9]{1,6})?([Zz]|[+-][0-9]{2}(:[0-9]{2})?)$')
            THEN
                run_at_value := jsonb_path_query_first(
                    to_jsonb(regexp_replace(val #>> '{}', '[Zz]$', '+00:00')),
                    '$.datetime() ? (@.type() == "timestamp with time zone")', silent => true);
                new_run_at := (run_at_value #>> '{}')::timestamptz;
            END IF;
            IF new_run_at IS NULL OR NOT new_run_at BETWEEN now() - make_interval(secs => max_span)
                                                          AND now() + make_interval(secs => max_span)
            THEN
                bad := 'run_at';
                must := 'an ISO 8601 time with a UTC offset within 100 years of now '
                        '(e.g. "2030-01-01T09:00:00+00:00" or "2030-01-01T09:00:00Z")';
                EXIT checks;
            END IF;
        END IF;
        FOREACH opt IN ARRAY ARRAY['idempotency_key', 'idempotency_scope', 'identity_key',
                                   'concurrency_key', 'group', 'trace_context'] LOOP
            val := given -> opt;
            -- PostgreSQL text (and so jsonb) cannot hold NUL or lone surrogates at all.
            IF val IS NOT NULL AND NOT (CASE
                    WHEN jsonb_typeof(val) = 'string'
                    THEN length(val #>> '{}') BETWEEN
                         CASE opt WHEN 'idempotency_scope' THEN 0 ELSE 1 END AND 512
                    ELSE false END) THEN
                bad := opt;
                must := CASE opt WHEN 'idempotency_scope' THEN 'a string'
                                 ELSE 'a non-empty string' END || ' of at most 512 characters';
                EXIT checks;
            END IF;
        END LOOP;
    END checks;
    IF bad IS NOT NULL THEN
        val := coalesce(given -> bad, 'null');
        RAISE EXCEPTION 'sweepq: % must be %, got %', bad, must,
            CASE WHEN length(val::text) <= 80 THEN val::text
                 ELSE left(val::text, 60) || '...(' || length(val::text) || ' characters)' END
            USING ERRCODE = '22SQ1';
    END IF;

    new_queue := coalesce(given ->> 'queue', new_queue);
    new_priority := coalesce((given ->> 'priority')::smallint, new_priority);
    new_max_attempts := coalesce((given ->> 'max_attempts')::integer, new_max_attempts);
    -- Rounded first: a float8 cannot hold 1e-400, and intervals keep microseconds anyway.
    new_delay := round((given ->> 'delay')::numeric, 9)::float8;
    new_unique_for := round((given ->> 'unique_for')::numeric, 9)::float8;
    new_deadline := round((given ->> 'deadline')::numeric, 9)::float8;
    new_timeout := round((given ->> 'timeout')::numeric, 9)::float8;
    new_key := given ->> 'idempotency_key';
    new_scope := coalesce(given ->> 'idempotency_scope', new_scope);
    new_identity := given ->> 'identity_key';
    new_concurrency_key := given ->> 'concurrency_key';
    new_group := given ->> 'group';
    new_trace_context := given ->> 'trace_context';

    -- Names a layer keeps for its own jobs (a sweep's leaf groups and idempotency scopes): a
    -- job from outside cannot join them (options.resolve refuses them in Python too).
    SELECT r.prefix INTO reserved FROM {schema}.reserved_names AS r
    WHERE (r.kind = 'group' AND starts_with(new_group, r.prefix))
       OR (r.kind = 'idempotency_scope' AND starts_with(new_scope, r.prefix))
    LIMIT 1;
    IF reserved IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: group and idempotency_scope names beginning with % are kept '
            'for sweepq''s own jobs; use another name', quote_literal(reserved)
            USING ERRCODE = '22SQ1';
    END IF;

    -- Rules between options (options.resolve).
    IF new_delay IS NOT NULL AND new_run_at IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: pass delay or run_at, not both' USING ERRCODE = '22SQ1';
    END IF;
    IF new_unique_for IS NOT NULL AND new_identity IS NULL THEN
        RAISE EXCEPTION 'sweepq: unique_for needs identity_key: it widens ''one active job per '
            'identity'' to ''one job per identity within the window''; pass identity_key as well'
            USING ERRCODE = '22SQ1';
    END IF;
    IF new_key IS NOT NULL AND octet_length(new_scope) + octet_length(new_key) > 2048 THEN
        RAISE EXCEPTION 'sweepq: idempotency_scope and idempotency_key together must be at most '
            '2,048 bytes of UTF-8 (one index entry holds both), got %; use a shorter scope or '
            'key (e.g. a hash of a long one)', octet_length(new_scope) + octet_length(new_key)
            USING ERRCODE = '22SQ1';
    END IF;

    -- Dedup and insert (enqueue.insert) ----------------------------------------------------
    IF new_unique_for IS NOT NULL THEN
        -- job_identity_lock: the same row lock as Python enqueuers of this identity take.
        INSERT INTO {schema}.identity_locks AS l (identity_key) VALUES (new_identity)
        ON CONFLICT (identity_key) DO UPDATE SET identity_key = EXCLUDED.identity_key
        WHERE false;
        -- job_identity_recent, in a new statement: its snapshot sees every job committed
        -- before we held the lock.
        SELECT j.id, j.state::text INTO holder, holder_state
        FROM {schema}.jobs AS j
        WHERE j.identity_key = new_identity
          AND j.created_at >= now() - make_interval(secs => new_unique_for)
        ORDER BY j.created_at DESC, j.id DESC
        LIMIT 1;
        found_by := 'identity';
    END IF;
    FOR round IN 1..5 LOOP  -- enqueue._DEDUP_ROUNDS
        EXIT WHEN holder IS NOT NULL;
        -- job_insert for one row: a wake-up for its concurrency key, and a notification of its
        -- queue if it is due (both delivered at commit).
        WITH inserted AS (
            INSERT INTO {schema}.jobs AS j (
                task, queue, priority, args, max_attempts, run_at, deadline_at, deadline_after,
                idempotency_scope, idempotency_key, identity_key, concurrency_key, job_group,
                trace_context, timeout)
            VALUES (enqueue.task, new_queue, new_priority, new_args::json, new_max_attempts,
                    coalesce(new_run_at, now() + make_interval(secs => coalesce(new_delay, 0))),
                    now() + make_interval(secs => new_deadline),
                    make_interval(secs => new_deadline),
                    new_scope, new_key, new_identity, new_concurrency_key, new_group,
                    new_trace_context, new_timeout)
            -- No conflict target: the idempotency index and the active-identity index both dedup.
            ON CONFLICT DO NOTHING
            RETURNING j.id, j.queue, j.run_at, j.concurrency_key
        ),
        woken AS (
            INSERT INTO {schema}.concurrency_wakeups (key, run_at)
            SELECT i.concurrency_key, i.run_at FROM inserted AS i
            WHERE i.concurrency_key IS NOT NULL
        ),
        notified AS (
            SELECT pg_notify(channel, i.queue) FROM inserted AS i WHERE i.run_at <= now()
        )
        SELECT i.id INTO created
        FROM inserted AS i CROSS JOIN (SELECT count(*) FROM notified) AS wake;
        IF created IS NOT NULL THEN
            job_id := created;
            outcome := 'created';
            RETURN NEXT;
            RETURN;
        END IF;
        -- job_find_duplicates, in a new statement: it sees the committed job we collided with.
        -- None found means the active job it collided with has finished: try again.
        SELECT coalesce(by_key.id, by_identity.id), coalesce(by_key.state, by_identity.state)::text
        INTO holder, holder_state
        FROM (VALUES (1)) AS one(n)
        LEFT JOIN {schema}.jobs AS by_key
               ON by_key.idempotency_key = new_key AND by_key.idempotency_scope = new_scope
        LEFT JOIN {schema}.jobs AS by_identity
               ON by_identity.identity_key = new_identity
              AND by_identity.state IN ('available', 'running');
        found_by := 'key';
    END LOOP;
    IF holder IS NULL THEN
        RAISE EXCEPTION 'sweepq: could not settle dedup for 1 job(s) after 5 rounds of racing '
            'enqueuers (each round found the job it collided with already gone); retry the '
            'enqueue' USING ERRCODE = 'serialization_failure';
    END IF;
    job_id := holder;
    outcome := CASE WHEN holder_state IN ('available', 'running') THEN 'existing_active'
                    ELSE 'existing_terminal' END;
    IF outcome = 'existing_terminal' THEN
        -- As enqueue._existing logs it: nothing will run for this call.
        RAISE WARNING 'enqueue deduplicated against terminal job % (state %, task %, %); no new '
            'job was created', holder, holder_state, enqueue.task,
            CASE WHEN found_by = 'key' AND new_key IS NOT NULL
                 THEN 'idempotency_key=' || quote_literal(new_key)
                 ELSE 'identity_key=' || quote_literal(new_identity) END;
    END IF;
    RETURN NEXT;
END
$$;

-- No function of the schema is PUBLIC's to call: each role is granted what it is meant to call
-- (the ops guide, "Roles"). A migration that creates a function revokes it the same way; a test
-- fails for any function PUBLIC may execute. Roles that write the jobs table today (workers of
-- the version before, running as a role of their own during a rolling deploy) called these
-- functions through PUBLIC: they are granted them first, so that they go on working.
DO $$
DECLARE
    writer text;
BEGIN
    FOR writer IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = btrim('{schema}', '"') AND g.table_name = 'jobs'
          AND g.privilege_type IN ('INSERT', 'UPDATE') AND g.grantee <> 'PUBLIC'
          AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA %s TO %I', '{schema}', writer);
    END LOOP;
END
$$;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC;
