-- sweepq sweeps, version 3: progress you can trust, and runs steered with a DSN alone.

ALTER TABLE {schema}.sweep_runs
    -- The population was counted at the start (estimated_total is exact then), not estimated.
    ADD COLUMN total_counted boolean NOT NULL DEFAULT false,
    -- The percentage never goes backwards, though the total may grow as links commit (when
    -- the walk finds more items than the estimate). Until the run drains, the items done that
    -- a percentage counts stop at done_cap, the count taken by the last link to commit; a link
    -- that grows the total raises the floor to done_cap over the old total, the most any
    -- reader can have been shown. The percentage is never shown below the floor.
    ADD COLUMN done_floor float8 NOT NULL DEFAULT 0,
    ADD COLUMN done_cap bigint,
    -- Two samples of (time, items done), the older at least a minute before the newer, written
    -- by links as they commit: the rate is taken over that recent window, not since the start.
    ADD COLUMN rate_from_at timestamptz,
    ADD COLUMN rate_from_done bigint,
    ADD COLUMN rate_to_at timestamptz,
    ADD COLUMN rate_to_done bigint,
    -- Where the sweep's links run, so that a run can be resumed (or its failures retried) by a
    -- client that has not registered the sweep (the CLI with a DSN alone).
    ADD COLUMN queue text NOT NULL DEFAULT 'default',
    ADD COLUMN link_priority smallint NOT NULL DEFAULT 1;
