-- sweepq sweeps, version 6: runs that end honestly, a failure budget by rate, runs that resume
-- after they ended, and the job that tells of each end.

ALTER TABLE {schema}.sweep_runs
    -- The walk reached the end of the population (a short page was committed). `draining`
    -- says the same while the run is active; this stays once it has ended or runs again, so
    -- that an end can tell "every item was served" from "the walk stopped".
    ADD COLUMN walked boolean NOT NULL DEFAULT false,
    -- How and why the walk stopped before the end (failed or cancelled), kept while a stopped
    -- run runs again for its failed and cancelled items only (retry-failed), so that it ends
    -- as it was; cleared when it resumes its walk.
    ADD COLUMN stopped_as {schema}.sweep_run_state,
    ADD COLUMN stop_reason text,
    -- The failure budget by rate: two samples of (items done, items failed) taken by links as
    -- they commit, the older at least `failure_sample` items before the newer, so that the
    -- failures over the recent items are the live count less the older sample's.
    ADD COLUMN fail_from_done bigint,
    ADD COLUMN fail_from_failed bigint,
    ADD COLUMN fail_to_done bigint,
    ADD COLUMN fail_to_failed bigint,
    -- Failures that do not count against the absolute max_failures: those there were when the
    -- run last resumed (a fresh budget).
    ADD COLUMN failed_base bigint NOT NULL DEFAULT 0,
    -- How many times the run has ended: the key of the job that tells of each end
    -- (Sweep.on_complete), one per end, whatever the crashes.
    ADD COLUMN ends integer NOT NULL DEFAULT 0,
    -- The sweep has an on_complete: each end of the run enqueues the job that calls it, from
    -- any process (one that ends the run with a DSN alone too).
    ADD COLUMN on_complete boolean NOT NULL DEFAULT false;

-- Runs that ended before this version: those that had read their last page walked to the end.
UPDATE {schema}.sweep_runs SET walked = draining WHERE draining;
UPDATE {schema}.sweep_runs SET ends = 1 WHERE finished_at IS NOT NULL;
