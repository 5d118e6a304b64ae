-- Statements over the system catalog: what a TableSweep checks before it walks a table.

-- name: sweep_table_find
-- The table named by $1 (quoted, optionally qualified, else found through the search_path).
SELECT c.oid::bigint AS oid, n.nspname::text AS schema, c.relname::text AS name,
       c.relkind::text AS kind
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1);

-- name: sweep_table_columns
-- Its columns in order, with their SQL type as format_type spells it and NOT NULL.
SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null
FROM pg_catalog.pg_attribute AS a
WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- name: sweep_table_unique_keys
-- The column lists of its unique indexes that guarantee uniqueness of every row: valid, not
-- partial, plain columns only (INCLUDE columns left out). The primary key first.
SELECT i.indisprimary AS is_primary, array_agg(a.attname::text ORDER BY k.ord) AS columns
FROM pg_catalog.pg_index AS i
CROSS JOIN LATERAL unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::bigint::oid AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid, i.indisprimary
ORDER BY i.indisprimary DESC, i.indexrelid;
