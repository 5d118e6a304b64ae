-- Statements of App.wait_for (core/waiters.py) over {schema}.job_waiters, and its read of the job.
-- Each runs on the waiter's own connection, in autocommit: each commits before the next starts.

-- name: job_waiter_add
-- Register a waiter for job $1; returns the waiter's id (its row is deleted by id).
INSERT INTO {schema}.job_waiters (job_id) VALUES ($1) RETURNING id;

-- name: job_waiter_renew
-- Keep waiter $1's row out of retention's reach while it still waits.
UPDATE {schema}.job_waiters SET renewed_at = now() WHERE id = $1;

-- name: job_waiter_remove
-- Unregister waiter $1.
DELETE FROM {schema}.job_waiters WHERE id = $1;

-- name: job_waiter_prune
-- Delete up to $2 waiters not renewed for $1 seconds (their waiter died without unregistering).
DELETE FROM {schema}.job_waiters
WHERE id = ANY(ARRAY(SELECT id FROM {schema}.job_waiters
                     WHERE renewed_at < now() - make_interval(secs => $1)
                     ORDER BY renewed_at
                     LIMIT $2));

-- name: job_get_settled
-- Job $1 once no transaction that is ending it is still open (job_settled reads it FOR SHARE,
-- and lets the lock go at once).
SELECT * FROM {schema}.job_settled($1);
