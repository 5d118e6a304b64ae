-- Statements of `sweepq demo` over its own table, {schema}.demo_rows, in the demo's schema.

-- name: demo_schema_state
-- Whether the demo's schema exists, and whether it holds the demo's table (so it is the demo's).
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS schema_exists,
       to_regclass('{schema}.demo_rows') IS NOT NULL AS is_demo;

-- name: demo_schema_drop
-- Drop the demo's schema with everything in it (called only once it is known to be the demo's).
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: demo_table_create
-- Create the demo table in the demo's freshly built schema.
CREATE TABLE {schema}.demo_rows (
    id       bigint PRIMARY KEY,
    body     text   NOT NULL,
    -- written by the demo's handler; the walk keys on id, never on a column it writes
    checksum text
);

-- name: demo_rows_fill
-- Insert rows 1..$1 with a hundred-odd bytes of text each.
INSERT INTO {schema}.demo_rows (id, body)
SELECT g, repeat(md5(g::text), (4 + g % 5)::integer) FROM generate_series(1, $1::bigint) AS g;

-- name: demo_table_analyze
-- Refresh the planner's figures of the demo table (the sweep's estimate reads them).
ANALYZE {schema}.demo_rows;

-- name: demo_row_set_checksum
-- Record the checksum $2 of row $1.
UPDATE {schema}.demo_rows SET checksum = $2 WHERE id = $1;

-- name: demo_rows_checked
-- Rows in the table, and rows that carry a checksum.
SELECT count(*) AS total, count(checksum) AS checked FROM {schema}.demo_rows;

-- name: demo_lock_try
-- Take the session lock that one demo holds on its schema while it runs (true if taken).
SELECT pg_try_advisory_lock(hashtext('sweepq demo'), hashtext($1));

-- name: demo_lock_wait
-- Wait for the demo running in this schema to end, and take its lock.
SELECT pg_advisory_lock(hashtext('sweepq demo'), hashtext($1));

-- name: demo_schema_size
-- Bytes of the schema's tables, with their indexes and TOAST.
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm');
