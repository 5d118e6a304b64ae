-- sweepq sweeps, version 1: runs, their sharded progress, and the index that counts a run's
-- outstanding leaves. Applied after the core's migrations; {schema} is the validated schema.

CREATE TYPE {schema}.sweep_run_state AS ENUM ('running', 'paused', 'completed', 'failed', 'cancelled');

-- One row per run: the single-flight guard and the source of `sweep status`. Only the current
-- link (link_job) moves the cursor, and only in the transaction that enqueues its page's leaves.
CREATE TABLE {schema}.sweep_runs (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sweep           text        NOT NULL,
    params          jsonb       NOT NULL DEFAULT '{}',
    params_hash     text        NOT NULL,
    state           {schema}.sweep_run_state NOT NULL DEFAULT 'running',
    -- The last page was short: no successor, the run ends when its last leaf is terminal.
    draining        boolean     NOT NULL DEFAULT false,
    -- key(item) of the last item fanned out, as a JSON array; NULL before the first page.
    cursor          jsonb,
    -- The link job allowed to act for this run; a stale or superseded link sees another id.
    link_job        bigint,
    links           integer     NOT NULL DEFAULT 0,
    max_links       integer     NOT NULL CHECK (max_links >= 1),
    enqueued        bigint      NOT NULL DEFAULT 0,
    -- Exact once the run has ended (counted from the jobs table); while it runs, status derives
    -- them from sweep_progress and the outstanding leaves.
    completed       bigint      NOT NULL DEFAULT 0,
    failed          bigint      NOT NULL DEFAULT 0,
    cancelled       bigint      NOT NULL DEFAULT 0,
    estimated_total bigint,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    failure         text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((state IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
);

-- Single flight: at most one active run per sweep and params.
CREATE UNIQUE INDEX sweep_runs_active ON {schema}.sweep_runs (sweep, params_hash)
    WHERE state IN ('running', 'paused');
-- Retention walks ended runs oldest first.
CREATE INDEX sweep_runs_finished ON {schema}.sweep_runs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Live failure counts of active runs, sharded by worker process (one of 16 rows per run), so
-- that leaves failing in many processes never queue on one hot row; status sums the shards.
-- Completed leaves write nothing here: they are the leaves enqueued and no longer outstanding.
CREATE TABLE {schema}.sweep_progress (
    run_id    bigint   NOT NULL REFERENCES {schema}.sweep_runs (id) ON DELETE CASCADE,
    shard     smallint NOT NULL CHECK (shard >= 0),
    failed    bigint   NOT NULL DEFAULT 0,
    cancelled bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, shard)
);

-- A run's outstanding leaves (available or running), counted by every waiting link: the index
-- holds only active leaves, so the count costs at most `window` entries however large the
-- jobs table is. Statements must repeat both predicates for the planner to use it.
CREATE INDEX jobs_sweep_outstanding ON {schema}.jobs (idempotency_scope)
    WHERE state IN ('available', 'running') AND idempotency_scope LIKE 'sweep:%';
