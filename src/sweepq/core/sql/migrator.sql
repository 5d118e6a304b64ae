-- Statements of the migrator: the ledger of applied migrations ({schema}.schema_migrations) and
-- the lock on it that serializes migrating processes.

-- name: schema_lock
-- Serialize migrating processes until the end of the transaction: only roles that may change the
-- ledger can take this lock (no advisory lock, which any role could hold to stall a deploy), and
-- readers of the ledger (a worker checking the schema at start) are not blocked by it.
LOCK TABLE {schema}.schema_migrations IN SHARE ROW EXCLUSIVE MODE;

-- name: schema_ledger_exists
-- Whether the migration ledger exists yet.
SELECT to_regclass('{schema}.schema_migrations') IS NOT NULL;

-- name: schema_ledger_list
-- Every applied migration.
SELECT component, version FROM {schema}.schema_migrations;

-- name: schema_exists
-- Whether schema $1 (its name, unquoted) exists: creating it, even IF NOT EXISTS, needs the
-- CREATE privilege on the database, which the owner of a schema made for it may not have.
SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1);

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
