-- sweepq schema, version 1: jobs, concurrency keys, and the migration ledger.
-- {schema} is replaced by the validated, quoted schema name before this runs.

CREATE TYPE {schema}.job_state AS ENUM ('available', 'running', 'completed', 'failed', 'cancelled');

-- Ids are drawn by the insert statement itself (nextval in its input), so a bulk insert can
-- report, per input row, whether that row was created or deduplicated.
CREATE SEQUENCE {schema}.jobs_id_seq AS bigint;

CREATE TABLE {schema}.jobs (
    id                bigint      PRIMARY KEY DEFAULT nextval('{schema}.jobs_id_seq'),
    task              text        NOT NULL,
    queue             text        NOT NULL,
    priority          smallint    NOT NULL DEFAULT 0,
    state             {schema}.job_state NOT NULL DEFAULT 'available',
    -- json, not jsonb: the handler gets back exactly the text enqueue wrote (jsonb would turn
    -- 1.5e16 into an integer), and nothing here queries inside args.
    args              json        NOT NULL DEFAULT '{}',
    attempt           integer     NOT NULL DEFAULT 0,
    max_attempts      integer     NOT NULL CHECK (max_attempts >= 1),
    snoozes           integer     NOT NULL DEFAULT 0,
    run_at            timestamptz NOT NULL DEFAULT now(),
    created_at        timestamptz NOT NULL DEFAULT now(),
    attempted_at      timestamptz,
    finished_at       timestamptz,
    deadline_at       timestamptz,
    -- The deadline as a duration, so a manual retry can re-arm it for the same length of time.
    deadline_after    interval,
    failure_reason    text CHECK (failure_reason IN ('max_attempts_exceeded', 'deadline_exceeded', 'error')),
    -- The last few errors only (bounded in the finishing statement), never one row per attempt.
    errors            jsonb       NOT NULL DEFAULT '[]',
    worker_id         text,
    lease_expires_at  timestamptz,
    idempotency_scope text        NOT NULL DEFAULT '',
    idempotency_key   text,
    identity_key      text,
    concurrency_key   text,
    CHECK ((state = 'running') = (worker_id IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CHECK ((state IN ('completed', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CHECK ((state = 'failed') = (failure_reason IS NOT NULL))
);

-- The claim's two heads. Unkeyed jobs are read per queue in claim order; keyed jobs are read
-- per (key, queue) only for keys with free capacity, so jobs behind a full key cost nothing.
CREATE INDEX jobs_claim_unkeyed ON {schema}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'available' AND concurrency_key IS NULL;
CREATE INDEX jobs_claim_keyed ON {schema}.jobs (concurrency_key, queue, priority DESC, run_at, id)
    WHERE state = 'available' AND concurrency_key IS NOT NULL;

-- Dedup is enforced by the database. Idempotency is forever (until pruned); identity holds
-- while a job is active, so "start if not already running" is race-free.
CREATE UNIQUE INDEX jobs_idempotency ON {schema}.jobs (idempotency_scope, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX jobs_identity_active ON {schema}.jobs (identity_key)
    WHERE identity_key IS NOT NULL AND state IN ('available', 'running');
CREATE INDEX jobs_identity_recent ON {schema}.jobs (identity_key, created_at)
    WHERE identity_key IS NOT NULL;

-- Rescue of lapsed leases and a worker's own running jobs.
CREATE INDEX jobs_running_lease ON {schema}.jobs (lease_expires_at) WHERE state = 'running';
-- Deadline enforcement for jobs nobody claims.
CREATE INDEX jobs_available_deadline ON {schema}.jobs (deadline_at)
    WHERE state = 'available' AND deadline_at IS NOT NULL;
-- Retention walks terminal jobs oldest first.
CREATE INDEX jobs_finished ON {schema}.jobs (finished_at)
    WHERE state IN ('completed', 'failed', 'cancelled');

-- One row per concurrency key ever used. `running` is kept exact by the statements that move a
-- job into or out of `running`: the claim admits a key only while running < max_running, and
-- the row lock on the key makes that check race-free between concurrent claims.
CREATE TABLE {schema}.concurrency_keys (
    key          text PRIMARY KEY,
    max_running  integer CHECK (max_running IS NULL OR max_running >= 0),
    running      integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

ALTER SEQUENCE {schema}.jobs_id_seq OWNED BY {schema}.jobs.id;
