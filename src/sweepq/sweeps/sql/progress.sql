-- Statements over {schema}.sweep_progress: the failures and cancellations of active runs'
-- leaves, sharded so that leaves of one run, in many processes, never queue on one hot row.
-- (Completions are not counted here: they are the leaves enqueued and no longer outstanding.)

-- name: sweep_progress_add
-- Add leaf failures and cancellations counted in one process to its shard $2 of each run, for runs still active
-- (an ended run's counters are exact on its row and its shards are gone). Rows go in run order,
-- so that two processes adding to the same shards cannot deadlock.
INSERT INTO {schema}.sweep_progress AS p (run_id, shard, failed, cancelled)
SELECT i.run_id, $2, i.failed, i.cancelled
FROM unnest($1::bigint[], $3::bigint[], $4::bigint[]) AS i(run_id, failed, cancelled)
WHERE EXISTS (SELECT 1 FROM {schema}.sweep_runs AS r
              WHERE r.id = i.run_id AND r.state IN ('running', 'paused'))
ORDER BY i.run_id
ON CONFLICT (run_id, shard) DO UPDATE SET
    failed = p.failed + excluded.failed,
    cancelled = p.cancelled + excluded.cancelled;

-- name: sweep_progress_sum
-- The live counters of run $1 (failed, cancelled).
SELECT coalesce(sum(failed), 0)::bigint AS failed,
       coalesce(sum(cancelled), 0)::bigint AS cancelled
FROM {schema}.sweep_progress WHERE run_id = $1;

-- name: sweep_progress_clear
-- Drop the shards of a run that has ended (its row now holds the exact counters).
DELETE FROM {schema}.sweep_progress WHERE run_id = $1;
