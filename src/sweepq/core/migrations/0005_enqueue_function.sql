-- sweepq schema, version 5: enqueue from SQL, so any driver, language or trigger can enqueue;
-- and two options each job carries: the enqueuer's trace context and an execution timeout.

-- The W3C traceparent of the enqueuer (the `trace_context` option), which tracing integrations
-- read when the job runs, so that its span continues the trace that enqueued it.
ALTER TABLE {schema}.jobs ADD COLUMN trace_context text;
-- The most seconds one execution may run (the `timeout` option, else the task's): past it an
-- async handler is cancelled and the execution fails `timeout` (core/decision.py).
ALTER TABLE {schema}.jobs ADD COLUMN timeout float8;

-- {schema}.enqueue(task, args, options) inserts one job exactly as App.enqueue does: the same
-- checks and bounds (core/checks.py, core/ident.py, core/options.py), the same dedup
-- (idempotency key, active identity, unique_for under the same advisory lock), the same
-- concurrency wake-up row and NOTIFY as job_insert (core/sql/jobs.sql), and the same outcomes.
-- It returns one row: the job the call points at, and 'created', 'existing_active' or
-- 'existing_terminal'.
--
-- options is a JSON object keyed by the names of JobOptions (core/options.py); a null value is
-- the default, as None is in Python. The function cannot see the Python tasks, so a left-out
-- queue, priority or max_attempts is @app.task's default ('default', 0, 5), not the task's own.
-- Bad input raises SQLSTATE 22SQ1 (class 22, data exception) with a message starting 'sweepq:'
-- and writes nothing; no sequence value is drawn and no lock is taken before the checks pass.
--
-- Static: a new job option needs a migration that replaces this function (a test fails until
-- it does). No SQL is built from input: every value is a variable.
CREATE FUNCTION {schema}.enqueue(task text, args jsonb DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    -- JobOptions, in declaration order (the message for an unknown option lists them).
    known CONSTANT text[] := ARRAY[
        'queue', 'priority', 'delay', 'run_at', 'max_attempts', 'idempotency_key',
        'idempotency_scope', 'identity_key', 'unique_for', 'deadline', 'concurrency_key',
        'group', 'timeout', 'trace_context'];
    -- The bounds are Python's, each checked against it by tests/test_sql_enqueue.py:
    -- checks.MAX_SPAN (here in seconds), MAX_KEY_LENGTH (512), MAX_IDEMPOTENCY_BYTES (2,048),
    -- tasks.MAX_ARGS_BYTES (1 MiB), PRIORITY_RANGE, MAX_ATTEMPTS_RANGE, ident.queue_name.
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
BEGIN
    -- Checks ---------------------------------------------------------------------------------
    IF enqueue.task IS NULL OR enqueue.task = '' THEN
        RAISE EXCEPTION 'sweepq: task must be the non-empty name of a registered task, got %',
            coalesce(quote_literal(enqueue.task), 'NULL')
            USING ERRCODE = '22SQ1';
    END IF;
    IF jsonb_typeof(new_args) <> 'object' THEN
        RAISE EXCEPTION 'sweepq: args must be a JSON object of the handler''s arguments '
            '(e.g. {"to": "a@example.com"}), got a JSON %', jsonb_typeof(new_args)
            USING ERRCODE = '22SQ1';
    END IF;
    IF octet_length(new_args::text) > 1048576 THEN
        RAISE EXCEPTION 'sweepq: args are % bytes of JSON, over the 1,048,576-byte limit; store '
            'large payloads elsewhere and pass a reference', octet_length(new_args::text)
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
        -- job_identity_lock: the same lock as Python enqueuers of this identity take.
        PERFORM pg_advisory_xact_lock(hashtextextended('sweepq:identity:' || new_identity, 0));
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
