-- Statements over {schema}.queue_pauses: pausing and resuming queues for every worker.

-- name: queue_pause
-- Pause queue $1 (why: $2), telling listening workers on channel $3; true if it was not paused.
-- A second pause keeps the first one's time and reason. The claim reads the row: from this
-- commit on, no worker claims the queue's jobs.
WITH paused AS (
    INSERT INTO {schema}.queue_pauses (queue, reason) VALUES ($1, $2)
    ON CONFLICT (queue) DO NOTHING
    RETURNING queue
)
SELECT count(*) = 1 FROM paused CROSS JOIN LATERAL pg_notify($3, '!paused:' || paused.queue);

-- name: queue_resume
-- Resume queue $1, waking the workers listening on channel $2 at commit; true if it was paused.
WITH resumed AS (
    DELETE FROM {schema}.queue_pauses WHERE queue = $1
    RETURNING queue
)
SELECT count(*) = 1 FROM resumed CROSS JOIN LATERAL pg_notify($2, '!resumed:' || resumed.queue);

-- name: queue_pause_list
-- Every paused queue, with when and why, oldest pause first.
SELECT queue, paused_at, reason FROM {schema}.queue_pauses ORDER BY paused_at, queue;
