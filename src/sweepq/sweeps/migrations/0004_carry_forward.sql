-- sweepq sweeps, version 4: runs started before versions 2 and 3 get what those versions gave
-- only to runs started after them, so a run that was active across an upgrade ends exactly.
--
-- Both statements find those runs by the time the ledger says versions 2 and 3 were applied
-- (a run is older than a version when it started before it), and reach the core's jobs through
-- their indexes only: this migration may share its transaction, and so the locks of the core's
-- migrations before it, with the whole upgrade, and must not read the jobs table end to end.
-- An upgrade from a release that already had both versions finds no such run and writes nothing.

-- Version 2 made a run's leaves a job group of the core, but it left the leaves enqueued before
-- it without one: the core's counts missed them, so a run active across the upgrade stopped
-- waiting for them, ended with counters short of its leaves, and listed none of their failures.
-- Those leaves are the run's idempotency scope, 'sweep:<run id>', which is also the name of its
-- group (naming.leaf_group), each with its own key. Every state, ended leaves too: a run's
-- final counts and its failures are read from the group.
UPDATE {schema}.jobs AS j
SET job_group = j.idempotency_scope
-- = ANY(ARRAY(...)) makes the runs' scopes an index condition of the idempotency index: joined
-- to the runs instead, the planner may read the whole jobs table when it misjudges how few
-- leaves match.
WHERE j.idempotency_scope = ANY(ARRAY(
        SELECT 'sweep:' || r.id FROM {schema}.sweep_runs AS r
        WHERE r.started_at < (SELECT m.applied_at FROM {schema}.schema_migrations AS m
                              WHERE m.component = 'sweeps' AND m.version = 2)))
  AND j.idempotency_key IS NOT NULL
  AND j.job_group IS NULL
  AND j.task LIKE 'sweepq.sweep.%.leaf';

-- Version 3 recorded where a run's links run (queue, link_priority), for runs started after it;
-- older runs got the defaults, 'default' and 1, so a client that has not registered the sweep
-- (the CLI with a DSN alone) resumed them, or retried their failures, on the wrong queue. Their
-- jobs say where they ran: the run's current link, else one of its leaves (a sweep's leaves run
-- on its queue at its priority, its links one above), found by primary key and by group.
UPDATE {schema}.sweep_runs AS r
SET queue = found.queue, link_priority = found.priority
FROM (
    SELECT run.id,
           coalesce(link.queue, leaf.queue) AS queue,
           coalesce(link.priority, least(leaf.priority + 1, 32767))::smallint AS priority
    FROM {schema}.sweep_runs AS run
    LEFT JOIN {schema}.jobs AS link ON link.id = run.link_job
    LEFT JOIN LATERAL (
        SELECT j.queue, j.priority FROM {schema}.jobs AS j
        WHERE j.job_group = 'sweep:' || run.id
        LIMIT 1
    ) AS leaf ON true
    WHERE run.started_at < (SELECT m.applied_at FROM {schema}.schema_migrations AS m
                            WHERE m.component = 'sweeps' AND m.version = 3)
) AS found
WHERE r.id = found.id AND found.queue IS NOT NULL;
