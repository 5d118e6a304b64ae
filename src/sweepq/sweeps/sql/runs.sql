-- Statements over {schema}.sweep_runs. Each is loaded once, with {schema} replaced by the
-- validated, quoted schema name, and called by exactly one typed wrapper in sweeps/queries.py.

-- name: sweep_run_insert
-- Start a run unless one of this sweep and params is active (then nothing is inserted). $5 is
-- the population's count ($6) or estimate, $7 and $8 where its links run, $9 whether its sweep
-- has an on_complete.
INSERT INTO {schema}.sweep_runs (sweep, params, params_hash, max_links, estimated_total,
                                 total_counted, queue, link_priority, on_complete)
VALUES ($1, $2::text::jsonb, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (sweep, params_hash) WHERE state IN ('running', 'paused') DO NOTHING
RETURNING id;

-- name: sweep_run_find_active
-- The active run of a sweep and params, if any.
SELECT id FROM {schema}.sweep_runs
WHERE sweep = $1 AND params_hash = $2 AND state IN ('running', 'paused');

-- name: sweep_run_set_link
-- Hand the run to link job $2 (the root link of a new run).
UPDATE {schema}.sweep_runs SET link_job = $2, updated_at = now() WHERE id = $1;

-- name: sweep_run_head
-- What a link or a leaf needs: the sweep and its params, and where the walk stands.
SELECT id, sweep, params::text AS params, state::text AS state, draining,
       cursor::text AS cursor, link_job, links, max_links, enqueued, queue, link_priority,
       walked, stopped_as::text AS stopped_as, stop_reason, failed_base, ends, on_complete
FROM {schema}.sweep_runs WHERE id = $1;

-- name: sweep_run_lock
-- The same, locking the row: a link's commit, pause, resume and the end of a run serialize on
-- it. NO KEY UPDATE, so that the foreign-key checks of progress inserts do not wait on it.
SELECT id, sweep, params::text AS params, state::text AS state, draining,
       cursor::text AS cursor, link_job, links, max_links, enqueued, queue, link_priority,
       walked, stopped_as::text AS stopped_as, stop_reason, failed_base, ends, on_complete
FROM {schema}.sweep_runs WHERE id = $1
FOR NO KEY UPDATE;

-- name: sweep_run_poll
-- What a waiting link looks at (with its leaves' counts, from the core's job group): whether it
-- is still the run's link, and what its failure budget is measured against.
SELECT state::text AS state, link_job, enqueued, failed_base, fail_from_done, fail_from_failed
FROM {schema}.sweep_runs WHERE id = $1;

-- name: sweep_run_advance
-- Record a committed link: the new cursor, the leaves it enqueued, whether the run now drains
-- (the walk has reached the end), and the link job that acts next (its successor, or itself
-- when draining). $6, $7 and $9 are how many leaves were done (terminal), failed and
-- completed, counted last in this transaction. The percentage is of items completed: once the
-- walk has found more items than estimated, it counts no more than done_cap, the count of the
-- last link to commit, and a link that grows the total raises the floor to the most any
-- reader can have been shown over the old total: done_cap once capped; at the first link past
-- the estimate, every leaf not failed or cancelled when counted ($9 plus those not yet
-- terminal, enqueued - $6), since readers counted uncapped until this commit and leaves go on
-- completing after the count (see migration 0003). $6 feeds the rate's
-- samples (the older moves up once the newer is a minute old), $6 and $7 the failure budget's
-- (the older moves up once the newer is $8 items old). Every expression reads the row as it
-- was before this update.
UPDATE {schema}.sweep_runs SET
    cursor = coalesce($2::text::jsonb, cursor),
    links = links + 1,
    enqueued = enqueued + $3,
    draining = $4,
    walked = walked OR $4,
    link_job = $5,
    done_floor = CASE
        WHEN estimated_total IS NULL THEN done_floor  -- no percentage was shown until now
        WHEN enqueued + $3 > estimated_total THEN greatest(done_floor, least(
            (CASE WHEN enqueued > estimated_total THEN least(coalesce(done_cap, 0), $9::bigint)
                  ELSE $9::bigint + enqueued - $6::bigint END)::float8
                / greatest(estimated_total, enqueued, 1), 1))
        ELSE done_floor
    END,
    done_cap = CASE WHEN $4 THEN NULL ELSE greatest(done_cap, $9::bigint) END,
    rate_from_at = CASE WHEN rate_to_at IS NULL THEN now()
                        WHEN rate_to_at < now() - interval '1 minute' THEN rate_to_at
                        ELSE rate_from_at END,
    rate_from_done = CASE WHEN rate_to_at IS NULL THEN $6
                          WHEN rate_to_at < now() - interval '1 minute' THEN rate_to_done
                          ELSE rate_from_done END,
    rate_to_at = CASE WHEN rate_to_at IS NULL OR rate_to_at < now() - interval '1 minute'
                      THEN now() ELSE rate_to_at END,
    rate_to_done = CASE WHEN rate_to_at IS NULL OR rate_to_at < now() - interval '1 minute'
                        THEN $6 ELSE rate_to_done END,
    fail_from_done = CASE WHEN fail_to_done IS NULL THEN $6
                          WHEN $6 - fail_to_done >= $8 THEN fail_to_done
                          ELSE fail_from_done END,
    fail_from_failed = CASE WHEN fail_to_done IS NULL THEN $7
                            WHEN $6 - fail_to_done >= $8 THEN fail_to_failed
                            ELSE fail_from_failed END,
    fail_to_done = CASE WHEN fail_to_done IS NULL OR $6 - fail_to_done >= $8
                        THEN $6 ELSE fail_to_done END,
    fail_to_failed = CASE WHEN fail_to_done IS NULL OR $6 - fail_to_done >= $8
                          THEN $7 ELSE fail_to_failed END,
    updated_at = now()
WHERE id = $1;

-- name: sweep_run_end
-- End an active run as $2 with its exact counters, recording how its walk stopped ($7, $8:
-- NULL once it walked to the end) and counting the end; nothing happens to a run that has
-- ended. Returns the number of this end.
UPDATE {schema}.sweep_runs SET
    state = $2::text::{schema}.sweep_run_state,
    failure = $3,
    completed = $4,
    failed = $5,
    cancelled = $6,
    stopped_as = $7::text::{schema}.sweep_run_state,
    stop_reason = $8,
    ends = ends + 1,
    finished_at = now(),
    updated_at = now()
WHERE id = $1 AND state IN ('running', 'paused')
RETURNING ends;

-- name: sweep_run_pause
-- Stop linking: the current link ends when it next looks at the run.
UPDATE {schema}.sweep_runs SET state = 'paused', updated_at = now()
WHERE id = $1 AND state = 'running'
RETURNING id;

-- name: sweep_run_resume
-- Hand a paused run to the new link job $2.
UPDATE {schema}.sweep_runs SET state = 'running', link_job = $2, updated_at = now()
WHERE id = $1 AND state = 'paused'
RETURNING id;

-- name: sweep_run_reopen
-- Make an ended run running again with link job $2 and a fresh failure budget ($4 and $5: the
-- items failed and done now). With $3 (resume) the walk goes on from the cursor, unless it had
-- reached the end; without, the run only drains: it ends once the items run again are done,
-- as it was if its walk had stopped. Nothing happens to a run that is active.
UPDATE {schema}.sweep_runs SET
    state = 'running',
    draining = CASE WHEN $3 THEN walked ELSE true END,
    link_job = $2,
    stopped_as = CASE WHEN $3 THEN NULL ELSE stopped_as END,
    stop_reason = CASE WHEN $3 THEN NULL ELSE stop_reason END,
    failed_base = $4,
    fail_from_done = $5, fail_from_failed = $4, fail_to_done = $5, fail_to_failed = $4,
    finished_at = NULL, failure = NULL, updated_at = now()
WHERE id = $1 AND state IN ('completed', 'failed', 'cancelled')
RETURNING id;

-- name: sweep_run_list
-- The newest $1 runs (only active ones when $2; only of sweep $3 unless NULL; only run $4
-- unless NULL), and the age of each in seconds. The live counters of active runs come from the
-- core's job groups (their leaves outstanding, failed and cancelled); completed leaves are the
-- rest of those enqueued: they cost no write at all.
SELECT r.id, r.sweep, r.params::text AS params, r.state::text AS state, r.draining,
       r.cursor::text AS cursor, r.links, r.max_links, r.enqueued,
       r.completed, r.failed, r.cancelled, r.walked, r.stop_reason, r.ends, r.link_job, r.queue,
       r.estimated_total, r.total_counted, r.done_floor, r.done_cap, r.started_at, r.finished_at,
       r.updated_at, r.failure,
       extract(epoch FROM coalesce(r.finished_at, now()) - r.started_at)::float8 AS elapsed,
       r.rate_from_done,
       extract(epoch FROM coalesce(r.finished_at, now()) - r.rate_from_at)::float8 AS rate_seconds
FROM {schema}.sweep_runs AS r
WHERE (NOT $2::boolean OR r.state IN ('running', 'paused'))
  AND ($3::text IS NULL OR r.sweep = $3::text)
  AND ($4::bigint IS NULL OR r.id = $4::bigint)
ORDER BY r.id DESC
LIMIT $1;

-- name: sweep_run_prune
-- Delete up to $2 runs that ended before now() - $1 seconds, with any progress rows left.
WITH doomed AS (
    SELECT id FROM {schema}.sweep_runs
    WHERE finished_at < now() - make_interval(secs => $1)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
progress AS (
    DELETE FROM {schema}.sweep_progress AS p USING doomed WHERE p.run_id = doomed.id
    RETURNING 1
),
runs AS (
    DELETE FROM {schema}.sweep_runs AS r USING doomed WHERE r.id = doomed.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM progress) AS progress;

-- name: sweep_run_links_running
-- The running runs and the link job each waits on (for the maintenance leader's check that a
-- link did not end without handing its run on); active runs are few, and indexed.
SELECT id, sweep, link_job FROM {schema}.sweep_runs
WHERE state = 'running' AND link_job IS NOT NULL
ORDER BY id
LIMIT $1;
