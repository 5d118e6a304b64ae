-- Statements of the migrator: the advisory lock that serializes migrating processes, and the
-- ledger of applied migrations ({schema}.schema_migrations).

-- name: schema_lock
-- Wait for the session lock that serializes migrations of schema key $1.
SELECT pg_advisory_lock(hashtextextended($1, 0));

-- name: schema_unlock
-- Release the migration lock of schema key $1.
SELECT pg_advisory_unlock(hashtextextended($1, 0));

-- name: schema_ledger_exists
-- Whether the migration ledger exists yet.
SELECT to_regclass('{schema}.schema_migrations') IS NOT NULL;

-- name: schema_ledger_list
-- Every applied migration.
SELECT component, version FROM {schema}.schema_migrations;

-- name: schema_create
-- The schema itself (before the first migration).
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: schema_ledger_create
-- The ledger of applied migrations; bounded by construction (one row per migration file).
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    component  text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
);

-- name: schema_ledger_record
-- Record migration ($1, $2, $3) as applied.
INSERT INTO {schema}.schema_migrations (component, version, name) VALUES ($1, $2, $3);
