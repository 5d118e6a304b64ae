-- sweepq schema, version 11: closing a job group (App.close_group). A closed group takes no more
-- jobs, and one job (its `then`) is enqueued, once, when every job of the group has ended.

-- One row per group: made by the first enqueue into the group since this version (the trigger
-- below), or by App.close_group. Groups whose jobs were enqueued before it have no row until
-- their next enqueue or close, which is all a row is needed for.
--
-- Why nothing gets into a closed group: every insert into jobs locks the rows of its groups FOR
-- KEY SHARE (the trigger below), and reads them under that lock, before it can commit. A close
-- seals the row (job_group_seal, which waits for none of them), then locks it FOR UPDATE, which
-- conflicts with KEY SHARE: it waits for every enqueue that holds the row, and holds new ones back
-- until it commits. An enqueue that locked first is waited for, and its jobs are counted; one that
-- locks later reads the row as the close left it: sealed, refused. Once a seal has committed, new
-- enqueues are refused before they lock anything, so the enqueues a close waits for are those in
-- flight when it sealed: a steady stream of enqueues cannot hold it back (shared row locks let
-- new holders in ahead of a waiting FOR UPDATE).
--
-- Why `then` is enqueued once: the step that fires it (core/groups.py) locks the sealed rows FOR
-- UPDATE, counts the group's unfinished jobs in a new statement (whose snapshot sees every finish
-- committed before it held the lock), and enqueues `then` and sets fired_at in the same
-- transaction: a firer that waited for the row finds fired_at set and does nothing.
CREATE TABLE {schema}.job_groups (
    name        text        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- When close_group sealed the group (NULL: it takes jobs). reopen_group clears the row.
    sealed_at   timestamptz,
    -- The job to enqueue when the sealed group has ended, checked at close time against its task
    -- (core/groups.py encode_then: task, args as JSON text, every sent option by name), so that
    -- any process can enqueue it, one that does not know the task too. NULL: seal only.
    then_spec   jsonb,
    -- When the firing step found the sealed group ended (the clock at that write: after the count
    -- that found no job unfinished), and the job it enqueued (NULL without a `then`).
    fired_at    timestamptz,
    then_job    bigint,
    CHECK (fired_at IS NULL OR sealed_at IS NOT NULL),
    CHECK (then_spec IS NULL OR sealed_at IS NOT NULL),
    CHECK (then_job IS NULL OR fired_at IS NOT NULL)
);
-- The groups the firing step still has to look at (the maintenance leader reads them every
-- round): sealed, not fired. Few rows, whatever the number of groups.
CREATE INDEX job_groups_waiting ON {schema}.job_groups (name)
    WHERE sealed_at IS NOT NULL AND fired_at IS NULL;

-- The one place where a job joins a group: after each INSERT (or COPY) into jobs, once per
-- statement, over the rows it inserted. A group sealed in its snapshot refuses the statement at
-- once, without a lock. Otherwise it makes the rows of the groups that have none, locks them FOR
-- KEY SHARE in name order (so that enqueuers and closers of several groups cannot deadlock), and
-- refuses the statement if one is sealed now (the row as a close that held it left it). A refusal
-- writes nothing of the statement. Every path goes through it: App.enqueue, enqueue_many's INSERT
-- and COPY, the SQL enqueue function, and the statements of earlier versions still running during
-- a rolling deploy.
--
-- It runs as the schema's owner with a pinned search_path (as the enqueue function does), so that
-- a role that may only insert jobs, or only call the enqueue function, needs no grant on
-- job_groups. Its queries keep generic plans (index probes whatever the names): planning them
-- again at every call would cost an enqueue into a group more than the rest of the trigger.
CREATE FUNCTION {schema}.job_groups_admit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    names text[];
    found integer;
    closed text;
BEGIN
    -- The statement's groups, and how they stand in its snapshot, in one query.
    SELECT array_agg(n.name ORDER BY n.name), count(g.name),
           min(g.name) FILTER (WHERE g.sealed_at IS NOT NULL)
    INTO names, found, closed
    FROM (SELECT DISTINCT i.job_group AS name FROM inserted_jobs AS i
          WHERE i.job_group IS NOT NULL) AS n
    LEFT JOIN {schema}.job_groups AS g ON g.name = n.name;
    IF names IS NULL THEN
        RETURN NULL;  -- no job of the statement is in a group: nothing to lock
    END IF;
    WHILE closed IS NULL LOOP
        IF found < cardinality(names) THEN
            INSERT INTO {schema}.job_groups (name)
            SELECT g.name FROM unnest(names) AS g(name) ORDER BY g.name
            ON CONFLICT (name) DO NOTHING;
        END IF;
        -- A new statement: a row retention deleted since it was read is not locked here, and is
        -- made again by the next turn of the loop.
        SELECT count(*), min(l.name) FILTER (WHERE l.sealed_at IS NOT NULL) INTO found, closed
        FROM (SELECT g.name, g.sealed_at FROM {schema}.job_groups AS g
              WHERE g.name = ANY(names) ORDER BY g.name FOR KEY SHARE) AS l;
        EXIT WHEN found = cardinality(names);
    END LOOP;
    IF closed IS NOT NULL THEN
        -- The DETAIL is the group's name alone, for programs that read it (GroupClosedError).
        RAISE EXCEPTION 'sweepq: group % is closed: it takes no more jobs, and nothing of this '
            'statement was enqueued', quote_literal(closed)
            USING ERRCODE = '55SQ1', DETAIL = closed,
                  HINT = 'enqueue into another group, or reopen this one first '
                         '(App.reopen_group); closing it again enqueues its new `then` once more';
    END IF;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION {schema}.job_groups_admit() FROM PUBLIC;

CREATE TRIGGER jobs_group_admit AFTER INSERT ON {schema}.jobs
REFERENCING NEW TABLE AS inserted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.job_groups_admit();

-- Roles granted rows of the jobs table one by one, rather than by default privileges (see the ops
-- guide, "Roles"): those that may update jobs (workers: they fire closures, and prune) may write
-- job_groups, those that may read jobs may read it. The outcome statement of this version reads
-- job_groups: a worker role without it would stop recording outcomes.
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s.job_groups TO %I',
                       '{schema}', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = btrim('{schema}', '"') AND g.table_name = 'jobs'
          AND g.privilege_type = 'SELECT' AND g.grantee <> 'PUBLIC'
          AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT ON %s.job_groups TO %I', '{schema}', grantee);
    END LOOP;
END
$$;
