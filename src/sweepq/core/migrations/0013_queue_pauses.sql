-- sweepq schema, version 13: pausing a queue (App.pause_queue, `sweepq queues pause`). A paused
-- queue's jobs stay `available` and no worker claims them until it is resumed; nothing is
-- written while they wait. The claim reads this table (one primary-key probe per queue it asks
-- for), so a pause holds for every worker from the moment it commits.
--
-- Retention: a row lives from its pause to its resume; there is one per paused queue at most.
CREATE TABLE {schema}.queue_pauses (
    queue      text        PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    -- Why, in the words of whoever paused it (shown by `sweepq queues list`, top, the dashboard).
    reason     text        CHECK (length(reason) <= 512)
);

-- Roles granted rows of the jobs table one by one, rather than by default privileges (see the ops
-- guide, "Roles"): those that may update jobs (workers) may pause and resume queues, those that
-- may read jobs may read the pauses. The claim of this version reads queue_pauses: a worker role
-- without it would stop claiming.
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %s.queue_pauses TO %I',
                       '{schema}', grantee);
    END LOOP;
    FOR grantee IN
        SELECT DISTINCT g.grantee FROM information_schema.role_table_grants AS g
        WHERE g.table_schema = btrim('{schema}', '"') AND g.table_name = 'jobs'
          AND g.privilege_type = 'SELECT' AND g.grantee <> 'PUBLIC'
          AND g.grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT ON %s.queue_pauses TO %I', '{schema}', grantee);
    END LOOP;
END
$$;
