-- sweepq schema, version 2: what the worker runtime shares between processes.

-- One row per elected role (today: 'maintenance'). The holder renews it before it expires;
-- anyone may take it once it has expired, so a dead leader is replaced within one TTL.
CREATE TABLE {schema}.leaders (
    role        text        PRIMARY KEY,
    worker_id   text        NOT NULL,
    elected_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- One row per cron schedule: the next tick to enqueue. The leader locks the row, enqueues the
-- tick's job and moves next_run_at past now() in one transaction, so each tick enqueues once.
CREATE TABLE {schema}.cron_schedules (
    name         text        PRIMARY KEY,
    expression   text        NOT NULL,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    last_outcome text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- One row per rate-limit key: the theoretical arrival time of the next grant (GCRA). A grant is
-- one update; a caller that must wait sleeps until its reserved time and writes nothing more.
CREATE TABLE {schema}.rate_limits (
    key         text        PRIMARY KEY,
    tat         timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
