-- sweepq sweeps, version 4: runs started before versions 2 and 3 get what those versions gave
-- only to runs started after them, so a run that was active across an upgrade ends exactly.

-- Version 2 made a run's leaves a job group of the core, but it left the leaves enqueued before
-- it without one: the core's counts missed them, so a run active across the upgrade stopped
-- waiting for them, ended with counters short of its leaves, and listed none of their failures.
-- Those leaves are known by their idempotency scope, 'sweep:<run id>', which is the name of the
-- group too (naming.leaf_group), and by their task, 'sweepq.sweep.<sweep>.leaf'. Every state,
-- ended leaves included: the run's final counts and its failures are read from the group.
-- One statement in this migration's transaction: batches would hold the same locks until the
-- same commit. It reads the jobs table once (a scope prefix cannot use the idempotency index
-- under every collation) and writes only leaves that lack their group; those of runs started
-- since version 2 have it, so an upgrade from a release that had groups writes nothing here.
UPDATE {schema}.jobs
SET job_group = idempotency_scope
WHERE job_group IS NULL
  AND idempotency_key IS NOT NULL
  AND idempotency_scope ~ '^sweep:[0-9]+$'
  AND task LIKE 'sweepq.sweep.%.leaf';

-- Version 3 recorded where a run's links run (queue, link_priority), for runs started after it;
-- older runs got the defaults, 'default' and 1, so a client that has not registered the sweep
-- (the CLI with a DSN alone) resumed them, or retried their failures, on the wrong queue. Their
-- jobs say where they ran: the run's current link, else one of its leaves (a sweep's leaves run
-- on its queue at its priority, its links one above). Only runs started before version 3 was
-- applied: later ones recorded it themselves.
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
