-- sweepq schema, version 12: the SQL function enqueue, now rendered from the job options'
-- declaration (core/options, core/render_enqueue.py) instead of written by hand. It is the
-- function of version 10 (SECURITY DEFINER with a pinned search_path, refusing what App.enqueue
-- refuses, serializing unique_for enqueuers on identity_locks), with each refusal worded as
-- App.enqueue words it. CREATE OR REPLACE keeps its owner and its grants.

-- enqueue function, rendered by `python -m sweepq.core.render_enqueue` (do not edit):
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
        'idempotency_scope', 'identity_key', 'unique_for', 'deadline', 'concurrency_key', 'group',
        'timeout', 'trace_context'];
    -- checks.MAX_SPAN, in seconds.
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
    val jsonb;
    bad text;           -- the option refused ...
    must text;          -- ... and what it must be
    -- The new job's values: @app.task's defaults unless given.
    new_queue text := 'default';
    new_priority smallint := 0;
    new_delay float8;
    new_run_at timestamptz;
    new_max_attempts integer := 5;
    new_idempotency_key text;
    new_idempotency_scope text := '';
    new_identity_key text;
    new_unique_for float8;
    new_deadline float8;
    new_concurrency_key text;
    new_group text;
    new_timeout float8;
    new_trace_context text;
    created bigint;
    holder bigint;
    holder_state text;
    found_by text;
    args_bytes integer;
    reserved_kind text;
    reserved_prefix text;
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
    -- The limits of App.enqueue, on the same measure: JSON nested at most 64 deep (the
    -- args object is the first level), and at most 1048576 bytes of compact JSON
    -- (tasks.MAX_ARGS_BYTES). jsonb's text has a space after each ':' and ','; only args that
    -- long with them are measured without them.
    IF jsonb_path_exists(new_args, 'strict $.**{64} '
                                   '? (@.type() == "object" || @.type() == "array")') THEN
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
        RAISE EXCEPTION 'sweepq: args are % bytes of JSON, over the 1,048,576-byte limit; '
            'store large payloads elsewhere and pass a reference', args_bytes
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
        -- Each option alone (its Kind, core/options/kinds.py); the first bad one is reported.
        val := given -> 'queue';
        IF val IS NOT NULL AND NOT (
                coalesce(jsonb_typeof(val) = 'string'
                         AND (val #>> '{}') ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$', false)) THEN
            bad := 'queue';
            must := 'a queue name: 1-128 letters, digits and ''_ . : -'', not starting with a '
                    'sign';
            EXIT checks;
        END IF;
        val := given -> 'priority';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number' AND val::text ~ '^-?[0-9]+$'
                     THEN (val::text)::numeric BETWEEN -32768 AND 32767 ELSE false END) THEN
            bad := 'priority';
            must := 'an integer in -32768..32767';
            EXIT checks;
        END IF;
        val := given -> 'delay';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number'
                     THEN (val::text)::numeric <= max_span
                          AND (val::text)::numeric >= 0 ELSE false END) THEN
            bad := 'delay';
            must := 'a number of seconds between 0 and 100 years';
            EXIT checks;
        END IF;
        val := given -> 'run_at';
        IF val IS NOT NULL THEN
            IF jsonb_typeof(val) = 'string'
               AND (val #>> '{}') ~ ('^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}'
                                  '([.][0-9]{1,6})?([Zz]|[+-][0-9]{2}(:[0-9]{2})?)$')
            THEN
                new_run_at := (jsonb_path_query_first(
                    to_jsonb(regexp_replace(val #>> '{}', '[Zz]$', '+00:00')),
                    '$.datetime() ? (@.type() == "timestamp with time zone")',
                    silent => true) #>> '{}')::timestamptz;
            END IF;
            IF new_run_at IS NULL OR NOT new_run_at BETWEEN
                    now() - make_interval(secs => max_span)
                    AND now() + make_interval(secs => max_span) THEN
                bad := 'run_at';
                must := 'an ISO 8601 time with a UTC offset within 100 years of now (e.g. '
                        '"2030-01-01T09:00:00+00:00" or "2030-01-01T09:00:00Z")';
                EXIT checks;
            END IF;
        END IF;
        val := given -> 'max_attempts';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number' AND val::text ~ '^-?[0-9]+$'
                     THEN (val::text)::numeric BETWEEN 1 AND 1000000 ELSE false END) THEN
            bad := 'max_attempts';
            must := 'an integer in 1..1000000';
            EXIT checks;
        END IF;
        val := given -> 'idempotency_key';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 1 AND 512
                     ELSE false END) THEN
            bad := 'idempotency_key';
            must := 'a non-empty string of at most 512 characters';
            EXIT checks;
        END IF;
        val := given -> 'idempotency_scope';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 0 AND 512
                     ELSE false END) THEN
            bad := 'idempotency_scope';
            must := 'a string of at most 512 characters';
            EXIT checks;
        END IF;
        val := given -> 'identity_key';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 1 AND 512
                     ELSE false END) THEN
            bad := 'identity_key';
            must := 'a non-empty string of at most 512 characters';
            EXIT checks;
        END IF;
        val := given -> 'unique_for';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number'
                     THEN (val::text)::numeric <= max_span
                          AND (val::text)::numeric > 0 ELSE false END) THEN
            bad := 'unique_for';
            must := 'a number of seconds above 0 and at most 100 years';
            EXIT checks;
        END IF;
        val := given -> 'deadline';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number'
                     THEN (val::text)::numeric <= max_span
                          AND (val::text)::numeric > 0 ELSE false END) THEN
            bad := 'deadline';
            must := 'a number of seconds above 0 and at most 100 years';
            EXIT checks;
        END IF;
        val := given -> 'concurrency_key';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 1 AND 512
                     ELSE false END) THEN
            bad := 'concurrency_key';
            must := 'a non-empty string of at most 512 characters';
            EXIT checks;
        END IF;
        val := given -> 'group';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 1 AND 512
                     ELSE false END) THEN
            bad := 'group';
            must := 'a non-empty string of at most 512 characters';
            EXIT checks;
        END IF;
        val := given -> 'timeout';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'number'
                     THEN (val::text)::numeric <= max_span
                          AND (val::text)::numeric > 0 ELSE false END) THEN
            bad := 'timeout';
            must := 'a number of seconds above 0 and at most 100 years';
            EXIT checks;
        END IF;
        val := given -> 'trace_context';
        IF val IS NOT NULL AND NOT (
                CASE WHEN jsonb_typeof(val) = 'string'
                     THEN length(val #>> '{}') BETWEEN 1 AND 512
                     ELSE false END) THEN
            bad := 'trace_context';
            must := 'a non-empty string of at most 512 characters';
            EXIT checks;
        END IF;
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
    new_delay := round((given ->> 'delay')::numeric, 9)::float8;
    new_max_attempts := coalesce((given ->> 'max_attempts')::integer, new_max_attempts);
    new_idempotency_key := given ->> 'idempotency_key';
    new_idempotency_scope := coalesce(given ->> 'idempotency_scope', new_idempotency_scope);
    new_identity_key := given ->> 'identity_key';
    new_unique_for := round((given ->> 'unique_for')::numeric, 9)::float8;
    new_deadline := round((given ->> 'deadline')::numeric, 9)::float8;
    new_concurrency_key := given ->> 'concurrency_key';
    new_group := given ->> 'group';
    new_timeout := round((given ->> 'timeout')::numeric, 9)::float8;
    new_trace_context := given ->> 'trace_context';

    -- Rules between options (core/options/rules.py).
    IF new_delay IS NOT NULL AND new_run_at IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: pass delay or run_at, not both'
            USING ERRCODE = '22SQ1';
    END IF;
    IF new_unique_for IS NOT NULL AND new_identity_key IS NULL THEN
        RAISE EXCEPTION 'sweepq: unique_for needs identity_key: it widens ''one active job per '
            'identity'' to ''one job per identity within the window''; pass identity_key'
            ' as well'
            USING ERRCODE = '22SQ1';
    END IF;
    IF new_idempotency_key IS NOT NULL AND (
            octet_length(coalesce(new_idempotency_scope, ''))
            + octet_length(coalesce(new_idempotency_key, ''))) > 2048 THEN
        RAISE EXCEPTION 'sweepq: idempotency_scope and idempotency_key together must be at most '
            '2,048 bytes of UTF-8 (one index entry holds both), got %; use a shorter '
            'scope or key (e.g. a hash of a long one)',
            to_char(
            octet_length(coalesce(new_idempotency_scope, ''))
            + octet_length(coalesce(new_idempotency_key, '')), 'FM999,999,990')
            USING ERRCODE = '22SQ1';
    END IF;

    -- Names a layer keeps for its own jobs (a sweep's leaf groups and idempotency scopes): a
    -- job from outside cannot join them (options.check_reserved refuses them in Python too).
    SELECT r.kind, r.prefix INTO reserved_kind, reserved_prefix FROM {schema}.reserved_names AS r
    WHERE (r.kind = 'group' AND starts_with(new_group, r.prefix))
       OR (r.kind = 'idempotency_scope' AND starts_with(new_idempotency_scope, r.prefix))
    ORDER BY r.kind, r.prefix
    LIMIT 1;
    IF reserved_prefix IS NOT NULL THEN
        RAISE EXCEPTION 'sweepq: % %: names beginning with % are kept for sweepq''s own jobs (a '
            'sweep''s runs); use another name', reserved_kind,
            quote_literal(CASE reserved_kind WHEN 'group' THEN new_group
                          ELSE new_idempotency_scope END),
            quote_literal(reserved_prefix)
            USING ERRCODE = '22SQ1';
    END IF;

    -- Dedup and insert (enqueue.insert) ----------------------------------------------------
    IF new_unique_for IS NOT NULL THEN
        -- job_identity_lock: the same row lock as Python enqueuers of this identity take.
        INSERT INTO {schema}.identity_locks AS l (identity_key) VALUES (new_identity_key)
        ON CONFLICT (identity_key) DO UPDATE SET identity_key = EXCLUDED.identity_key
        WHERE false;
        -- job_identity_recent, in a new statement: its snapshot sees every job committed
        -- before we held the lock.
        SELECT j.id, j.state::text INTO holder, holder_state
        FROM {schema}.jobs AS j
        WHERE j.identity_key = new_identity_key
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
                task, args,
                queue,
                priority,
                run_at,
                max_attempts,
                idempotency_key,
                idempotency_scope,
                identity_key,
                deadline_at,
                deadline_after,
                concurrency_key,
                job_group,
                timeout,
                trace_context)
            VALUES (
                enqueue.task, new_args::json,
                new_queue,
                new_priority,
                coalesce(new_run_at, now() + make_interval(secs => coalesce(new_delay, 0))),
                new_max_attempts,
                new_idempotency_key,
                new_idempotency_scope,
                new_identity_key,
                now() + make_interval(secs => new_deadline),
                make_interval(secs => new_deadline),
                new_concurrency_key,
                new_group,
                new_timeout,
                new_trace_context)
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
               ON by_key.idempotency_key = new_idempotency_key
              AND by_key.idempotency_scope = new_idempotency_scope
        LEFT JOIN {schema}.jobs AS by_identity
               ON by_identity.identity_key = new_identity_key
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
            CASE WHEN found_by = 'key' AND new_idempotency_key IS NOT NULL
                 THEN 'idempotency_key=' || quote_literal(new_idempotency_key)
                 ELSE 'identity_key=' || quote_literal(new_identity_key) END;
    END IF;
    RETURN NEXT;
END
$$;
-- enqueue function: end.
