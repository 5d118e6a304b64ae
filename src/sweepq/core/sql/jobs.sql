-- Statements over {schema}.jobs. Each is loaded once, with {schema} replaced by the validated,
-- quoted schema name, and called by exactly one typed wrapper in core/queries.py.

-- name: job_insert
-- Insert jobs from parallel arrays (ids $2, task $3, args $4, then one per job option, in the
-- order core/options declares them), skipping rows that hit a dedup index; one row out per
-- row in; leave a wake-up per concurrency key; notify channel $1 of the queues that got due
-- jobs. This is the path of jobs with keys (core/enqueue.py sends plain jobs by COPY).
WITH input AS MATERIALIZED (
    -- Each input row knows its id before the insert (reserved by job_reserve, or drawn here),
    -- so the final select can say which rows were created and which were deduplicated.
    SELECT coalesce(i.given_id, nextval('{schema}.jobs_id_seq')) AS id, i.*
    FROM unnest($2::bigint[], $3::text[], $4::text[], {job_option_arrays})
         WITH ORDINALITY AS i(given_id, task, args, {job_option_names}, ord)
),
inserted AS (
    -- The columns and their values come from core/options (`options.fragments`).
    INSERT INTO {schema}.jobs (id, task, args, {job_columns})
    SELECT id, task, args::json, {job_values}
    FROM input
    -- Key order, not input order: enqueuers of overlapping keys then wait on each other in one
    -- order and cannot deadlock (ids were drawn in input order above).
    ORDER BY idempotency_scope, idempotency_key, identity_key, ord
    -- No conflict target: the idempotency index and the active-identity index both dedup.
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at, concurrency_key
),
woken AS (
    -- A job with a concurrency key is claimed through its key's row. The enqueue leaves a
    -- wake-up for the next claim to fold into that row, instead of writing the row: so it never
    -- waits on (or makes wait) the workers that start and finish the key's jobs, however long
    -- the caller's transaction lasts, and the wake-up commits exactly when the jobs do.
    INSERT INTO {schema}.concurrency_wakeups (key, run_at)
    SELECT concurrency_key, min(run_at) FROM inserted
    WHERE concurrency_key IS NOT NULL
    GROUP BY concurrency_key
),
notified AS (
    -- Wake idle workers of each queue that got a due job; delivered at commit, and repeated
    -- notifications of one transaction are folded into one by the server.
    SELECT pg_notify($1, queue) FROM (SELECT DISTINCT queue FROM inserted
                                       WHERE run_at <= now()) AS due
)
SELECT input.id, (inserted.id IS NOT NULL) AS created
FROM input LEFT JOIN inserted ON inserted.id = input.id
CROSS JOIN (SELECT count(*) FROM notified) AS wake
ORDER BY input.ord;

-- name: job_insert_one
-- Insert one job without keys (nothing to deduplicate, no concurrency key to wake) from scalar
-- parameters: task $2, args $3, then from $4 each option of `options.SINGLE` (the sent options
-- but the keys, in declaration order; idempotency_scope is kept, as job_insert keeps it, even
-- without a key). Notifies channel $1 if it is due.
WITH inserted AS (
    INSERT INTO {schema}.jobs (task, args, {job_one_columns})
    VALUES ($2::text, $3::json, {job_one_values})
    RETURNING id, queue, run_at
),
notified AS (
    SELECT pg_notify($1, queue) FROM inserted WHERE run_at <= now()
)
SELECT id FROM inserted CROSS JOIN (SELECT count(*) FROM notified) AS wake;

-- name: job_reserve
-- Before a COPY of $2 jobs: their ids, in order, and the transaction's now() (what the column
-- defaults give the copied rows, so the caller computes run_at and deadline_at as the server
-- would); notifies channel $1 of queues $3, delivered when the transaction commits.
SELECT now() AS now,
       ARRAY(SELECT nextval('{schema}.jobs_id_seq') FROM generate_series(1, $2)) AS ids,
       (SELECT count(pg_notify($1, q)) FROM unnest($3::text[]) AS q) AS woke;

-- name: job_find_duplicates
-- For rows that did not insert: the job that holds their idempotency key or active identity.
SELECT i.ord, coalesce(by_key.id, by_identity.id) AS id,
       coalesce(by_key.state, by_identity.state)::text AS state
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY
     AS i(idempotency_scope, idempotency_key, identity_key, ord)
LEFT JOIN {schema}.jobs AS by_key
       ON by_key.idempotency_key = i.idempotency_key
      AND by_key.idempotency_scope = i.idempotency_scope
LEFT JOIN {schema}.jobs AS by_identity
       ON by_identity.identity_key = i.identity_key
      AND by_identity.state IN ('available', 'running')
ORDER BY i.ord;

-- name: job_identity_lock
-- Serialize enqueuers of the same identity for the rest of the transaction (unique_for): each
-- identity's row of identity_locks, inserted or locked (ON CONFLICT DO UPDATE locks the row it
-- meets even when its WHERE updates nothing). Sorted so that two transactions locking several
-- identities cannot deadlock.
INSERT INTO {schema}.identity_locks AS l (identity_key)
SELECT DISTINCT k FROM unnest($1::text[]) AS k ORDER BY k
ON CONFLICT (identity_key) DO UPDATE SET identity_key = EXCLUDED.identity_key WHERE false;

-- name: job_identity_recent
-- The newest job per identity created within its unique_for window (any state).
SELECT i.ord, recent.id, recent.state::text AS state
FROM unnest($1::text[], $2::float8[]) WITH ORDINALITY AS i(identity_key, window_seconds, ord)
CROSS JOIN LATERAL (
    SELECT j.id, j.state FROM {schema}.jobs AS j
    WHERE j.identity_key = i.identity_key
      AND j.created_at >= now() - make_interval(secs => i.window_seconds)
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT 1
) AS recent
ORDER BY i.ord;

-- name: job_get
-- One job by id (every column: Job takes the ones users read).
SELECT * FROM {schema}.jobs WHERE id = $1;

-- part: claim_unkeyed
-- The due unkeyed jobs of the queues in `asked` (a CTE of each claim: the queues asked for that
-- are not paused), locked, at most $2 per (queue, priority), without $5 none whose worker died
-- while running it.
levels(queue, priority) AS (
    -- The distinct priorities of each queue's unkeyed available jobs, one index probe each
    -- (a skip scan). Reading due jobs per (queue, priority) lets run_at <= now() end each
    -- index range scan: ordering by priority first would read past every job scheduled for
    -- later (all of them, when fewer jobs are due than the claim asks for).
    SELECT q.queue, (
        SELECT j.priority FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key IS NULL AND j.queue = q.queue
        ORDER BY j.priority DESC LIMIT 1)
    FROM asked AS q
    UNION ALL
    SELECT l.queue, (
        SELECT j.priority FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key IS NULL AND j.queue = l.queue
          AND j.priority < l.priority
        ORDER BY j.priority DESC LIMIT 1)
    FROM levels AS l WHERE l.priority IS NOT NULL
),
unkeyed AS (
    SELECT c.* FROM levels AS l
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.concurrency_key, j.deadline_at <= now() AS expired,
               j.crashes > 0 AS suspect
        FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key IS NULL
          AND j.queue = l.queue AND j.priority = l.priority AND j.run_at <= now()
          AND (j.crashes = 0 OR $5::boolean)
        ORDER BY j.run_at, j.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE l.priority IS NOT NULL
)

-- part: claim_write
-- The claim's writes and rows, from the CTEs `picked` (the jobs to claim) and `admitted` (the
-- keys whose jobs may start) of each claim. Every row is a claimed job, but the last when the
-- claim has advice for the next one (a CTE `advice(word)` of each claim): then the last row has
-- a NULL id and the word as its task.
claimed AS (
    UPDATE {schema}.jobs AS j SET
        state = CASE WHEN j.deadline_at <= now() THEN 'failed' ELSE 'running' END::{schema}.job_state,
        attempt = j.attempt + (j.deadline_at <= now() IS NOT TRUE)::integer,
        claims = j.claims + (j.deadline_at <= now() IS NOT TRUE)::integer,
        attempted_at = CASE WHEN j.deadline_at <= now() THEN j.attempted_at ELSE now() END,
        worker_id = CASE WHEN j.deadline_at <= now() THEN NULL ELSE $3 END,
        lease_expires_at = CASE WHEN j.deadline_at <= now() THEN NULL
                                ELSE now() + make_interval(secs => $4) END,
        finished_at = CASE WHEN j.deadline_at <= now() THEN now() END,
        failure_reason = CASE WHEN j.deadline_at <= now() THEN 'deadline_exceeded' END
    -- = ANY(ARRAY(...)) keeps this a primary-key lookup per picked row even in a generic plan,
    -- which cannot know how many rows LIMIT $2 lets through.
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
      AND (j.concurrency_key IS NULL OR j.deadline_at <= now()
           OR j.concurrency_key IN (SELECT key FROM admitted))
    RETURNING j.id, j.claims, j.task, j.args::text AS args, j.attempt, j.max_attempts,
              j.snoozes, j.queue, extract(epoch FROM j.deadline_at - now())::float8 AS deadline_in,
              j.job_group, extract(epoch FROM now() - j.run_at)::float8 AS waited,
              j.trace_context, j.timeout, j.crashes, j.handbacks, j.state
),
announced AS (
    -- Waiters of the jobs this failed past their deadline (as in job_finish_many). Read below
    -- by a condition on no row (run once, before any row is read), not joined to the running
    -- jobs: a join would never read it when this claim failed jobs and started none.
    SELECT {schema}.job_waiters_notify(array_agg(id) FILTER (WHERE state = 'failed'))
    FROM claimed
)
SELECT * FROM (
    SELECT id, claims, task, args, attempt, max_attempts, snoozes, queue, deadline_in, job_group,
           waited, trace_context, timeout, crashes, handbacks
    FROM claimed WHERE state = 'running'
    ORDER BY id
) AS jobs
WHERE (SELECT count(*) FROM announced) = 1
UNION ALL
SELECT NULL, NULL, a.word, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM advice AS a

-- name: job_claim
-- Claim up to $2 due jobs of queues $1 for worker $3 with a lease of $4 seconds; each claimed job
-- gets a new claim token (claims + 1). A due job past its deadline is failed instead of run.
-- Concurrency keys are admitted here, and the claim reads only keys that can run: a key at its
-- limit, with nothing waiting, or with only jobs scheduled later costs nothing, and nothing is
-- written for a job that waits. A key's row lock re-checks running < max_running against
-- concurrent claims (EvalPlanQual). A job whose worker died while running it (crashes > 0) is a
-- suspect: it is claimed only when $5 (the worker runs no suspect now), and at most one per
-- claim, so that a worker never runs two and the next death is the suspect's alone to answer
-- for (see job_rescue). A paused queue (a row of queue_pauses) is left out of $1, so its jobs
-- wait as they are, whatever is asked: one probe of the pauses per queue asked for, and one per
-- due keyed job counted. Its advice for the next claim (see claim_write): 'again' when it folded
-- wake-ups into keys (those keys are claimable from the next claim on) or folded as many as one
-- claim may (more may be left): claim again at once; 'light' when no key was in play (none
-- ready, no wake-up): the next claim may be job_claim_light.
WITH RECURSIVE asked(queue) AS (
    SELECT q.queue FROM unnest($1::text[]) AS q(queue)
    WHERE NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = q.queue)
),
{part:claim_unkeyed},
walk(key, next_run_at, version, free, found, total, idle, ordered) AS (
    -- Keys with room and a job due, earliest first, one index probe per key, until the keys
    -- read hold $2 jobs due in these queues (counted without locking, at most `free` per key).
    -- It starts before every key (a seed row, key '') and reads only keys in
    -- concurrency_keys_ready; the predicate repeats the index's WHERE for that. It reads at
    -- most 256 keys with nothing due in these queues (`idle`; the claim settles those due in
    -- none): however many such keys there are, one claim's cost stays bounded.
    SELECT ''::text, '-infinity'::timestamptz, 0::bigint, 0::bigint, 0, 0, 0, false
    UNION ALL
    SELECT k.key, k.next_run_at, k.version, k.free, f.n, w.total + f.n,
           w.idle + (f.n = 0)::integer, k.ordered
    FROM walk AS w
    CROSS JOIN LATERAL (
        -- Room: under the key's limit and under its rate in the current window (a key whose
        -- rate is spent is placed at its window's end, so it is not in this range).
        SELECT c.key, c.next_run_at, c.version, c.ordered,
               least($2, c.max_running - c.running,
                     c.rate_count - {schema}.concurrency_rate_used(c.rate_period, c.rate_window,
                                                                   c.rate_starts)) AS free
        FROM {schema}.concurrency_keys AS c
        WHERE (c.next_run_at, c.key) > (w.next_run_at, w.key)
          AND c.next_run_at <= now() AND (c.max_running IS NULL OR c.running < c.max_running)
          AND (c.rate_count IS NULL OR c.rate_count > {schema}.concurrency_rate_used(
                   c.rate_period, c.rate_window, c.rate_starts))
        ORDER BY c.next_run_at, c.key
        LIMIT 1
    ) AS k
    CROSS JOIN LATERAL (
        -- An ordered key counts its head alone, when it is due in these queues.
        SELECT count(*)::integer AS n FROM (
            SELECT 1 FROM {schema}.jobs AS j
            WHERE NOT k.ordered AND j.state = 'available' AND j.concurrency_key = k.key
              AND j.queue = ANY($1::text[]) AND j.run_at <= now()
              AND NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = j.queue)
            LIMIT k.free) AS due
    ) AS f0
    CROSS JOIN LATERAL (
        SELECT f0.n + count(*)::integer AS n FROM (
            SELECT j.queue, j.run_at FROM {schema}.jobs AS j
            WHERE k.ordered AND j.state = 'available' AND j.concurrency_key = k.key
            ORDER BY j.id
            LIMIT 1) AS head
        WHERE head.run_at <= now() AND head.queue = ANY($1::text[])
          AND NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = head.queue)
    ) AS f
    WHERE w.total < $2 AND w.idle < 256
),
keyed AS (
    SELECT c.* FROM walk AS w CROSS JOIN unnest($1::text[]) AS q(queue)
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.concurrency_key, j.deadline_at <= now() AS expired,
               j.crashes > 0 AS suspect
        FROM {schema}.jobs AS j
        WHERE j.state = 'available' AND j.concurrency_key = w.key
          AND j.queue = q.queue AND j.run_at <= now() AND (j.crashes = 0 OR $5::boolean)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT w.free
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE w.found > 0 AND NOT w.ordered
      AND NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = q.queue)
),
heads AS (
    -- An ordered key's head, the key's available job of the lowest id, and no other: a head
    -- another claim holds locked is skipped, never passed (the job behind it is not the head).
    SELECT c.* FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.concurrency_key, j.deadline_at <= now() AS expired,
               j.crashes > 0 AS suspect
        FROM {schema}.jobs AS j
        WHERE j.id = (SELECT h.id FROM {schema}.jobs AS h
                      WHERE h.state = 'available' AND h.concurrency_key = w.key
                      ORDER BY h.id LIMIT 1)
          AND j.state = 'available' AND j.run_at <= now() AND j.queue = ANY($1::text[])
          AND (j.crashes = 0 OR $5::boolean)
          AND NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = j.queue)
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE w.found > 0 AND w.ordered
),
picked AS MATERIALIZED (
    -- A keyed job's turn is its key's place in the walk, an unkeyed job's its run_at: the keys
    -- the walk read take their turns in its order, whatever the age of their jobs.
    SELECT c.id, c.concurrency_key, c.run_at, coalesce(c.expired, false) AS expired
    FROM (
        SELECT c.*, w.free, row_number() OVER (
                   PARTITION BY c.concurrency_key ORDER BY c.priority DESC, c.run_at, c.id) AS rank,
               count(*) FILTER (WHERE c.suspect) OVER (
                   ORDER BY c.priority DESC, coalesce(w.next_run_at, c.run_at), c.run_at, c.id)
                   AS suspects,
               coalesce(w.next_run_at, c.run_at) AS turn
        FROM (SELECT * FROM unkeyed UNION ALL SELECT * FROM keyed
              UNION ALL SELECT * FROM heads) AS c
        LEFT JOIN walk AS w ON w.key = c.concurrency_key
    ) AS c
    WHERE (c.concurrency_key IS NULL OR c.rank <= c.free) AND (NOT c.suspect OR c.suspects = 1)
    ORDER BY c.priority DESC, c.turn, c.run_at, c.id
    LIMIT $2
),
woken AS (
    -- Wake-ups left by enqueues (and retries). Each moves its key's version, whichever part of
    -- this statement writes the key (admitted, settled, awake): a claim whose snapshot is older
    -- than the wake-up's jobs may settle the key only if nothing moved it since, or it would
    -- move the key past jobs it did not see, with no wake-up left to bring it back.
    DELETE FROM {schema}.concurrency_wakeups AS u
    WHERE u.ctid = ANY(ARRAY(SELECT ctid FROM {schema}.concurrency_wakeups
                             LIMIT 1000 FOR UPDATE SKIP LOCKED))
    RETURNING u.key, u.run_at
),
keys AS MATERIALIZED (
    -- Every existing key row this claim writes, locked in key order before any is written (as
    -- every statement that writes several key rows does), so that claims, outcomes and rescues
    -- running at once never deadlock on them.
    SELECT key FROM {schema}.concurrency_keys
    WHERE key = ANY(ARRAY(
        SELECT concurrency_key FROM picked WHERE concurrency_key IS NOT NULL AND NOT expired
        UNION SELECT key FROM walk WHERE found = 0 AND key <> ''
        UNION SELECT key FROM woken))
    ORDER BY key
    FOR NO KEY UPDATE
),
admitted AS (
    UPDATE {schema}.concurrency_keys AS k
    SET running = k.running + p.n,
        -- The starts counted in the key's rate window (none without a rate).
        rate_window = {schema}.concurrency_rate_window(k.rate_period, k.rate_window),
        rate_starts = CASE WHEN k.rate_count IS NULL THEN 0
                           ELSE p.n + {schema}.concurrency_rate_used(
                               k.rate_period, k.rate_window, k.rate_starts) END,
        -- The key's place in the walk moves to now: behind every key placed before now, which
        -- the walk reads first. So keys take turns, one claim's share each, however long and
        -- however old a key's backlog (its jobs stay due: the walk reads keys placed up to now).
        -- A key of weight w keeps its place for w such turns in a row. A claim that spends
        -- the key's rate in its window places it at the window's end.
        next_run_at = {schema}.concurrency_place(
            CASE WHEN k.turns + 1 >= k.weight THEN greatest(k.next_run_at, now())
                 ELSE k.next_run_at END,
            k.rate_count, k.rate_period,
            {schema}.concurrency_rate_window(k.rate_period, k.rate_window),
            p.n + {schema}.concurrency_rate_used(k.rate_period, k.rate_window, k.rate_starts)),
        turns = CASE WHEN k.turns + 1 >= k.weight THEN 0 ELSE k.turns + 1 END,
        version = k.version + 1
    FROM (SELECT concurrency_key, count(*)::integer AS n, max(run_at) AS newest FROM picked
          WHERE concurrency_key IS NOT NULL AND NOT expired GROUP BY concurrency_key) AS p
    WHERE k.key = ANY(ARRAY(SELECT key FROM keys)) AND k.key = p.concurrency_key
      AND (k.max_running IS NULL OR k.running + p.n <= k.max_running)
      -- Re-checked under the key's row lock, as the limit is, against concurrent claims.
      AND (k.rate_count IS NULL OR p.n + {schema}.concurrency_rate_used(
               k.rate_period, k.rate_window, k.rate_starts) <= k.rate_count)
    RETURNING k.key
),
settled AS (
    -- A key the walk read with nothing due in these queues: if nothing of it is due in any
    -- queue, move it to its earliest scheduled job, or out of the walk when it has none. The
    -- version check drops the move when a job of the key became available after this
    -- statement's snapshot (that job is not counted in e.next_run_at): a release that made one
    -- available, and every claim that wrote the key since (one that took its wake-up among
    -- them), moved the version.
    UPDATE {schema}.concurrency_keys AS k
    SET next_run_at = e.next_run_at, version = k.version + 1
    -- An ordered key waits for its head: its place is the head's run_at.
    FROM (SELECT w.key, w.version,
                 CASE WHEN w.ordered
                      THEN (SELECT h.run_at FROM {schema}.jobs AS h
                            WHERE h.state = 'available' AND h.concurrency_key = w.key
                            ORDER BY h.id LIMIT 1)
                      ELSE {schema}.concurrency_key_next_run_at(w.key) END AS next_run_at
          FROM walk AS w WHERE w.found = 0 AND w.key <> '') AS e
    WHERE k.key = ANY(ARRAY(SELECT key FROM keys))
      AND k.key = e.key AND k.version = e.version
      AND (e.next_run_at IS NULL OR e.next_run_at > now())
    RETURNING k.key
),
awake AS (
    -- The woken keys that admitted and settled did not write (a row is written once per
    -- statement); keys without a row get one (in key order, as the locks above are taken). A
    -- wake-up whose key has no job waiting any more (claimed, cancelled) wakes nothing: at most
    -- one index probe each, and no key row for it, whoever wrote it.
    INSERT INTO {schema}.concurrency_keys AS k (key, next_run_at)
    SELECT u.key, min(u.run_at)
    FROM woken AS u CROSS JOIN (SELECT count(*) FROM keys) AS locked_first
    WHERE u.key NOT IN (SELECT key FROM admitted) AND u.key NOT IN (SELECT key FROM settled)
      AND EXISTS (SELECT FROM {schema}.jobs AS j
                  WHERE j.state = 'available' AND j.concurrency_key = u.key)
    GROUP BY u.key
    ORDER BY u.key
    ON CONFLICT (key) DO UPDATE
    SET next_run_at = {schema}.concurrency_place(
            least(k.next_run_at, EXCLUDED.next_run_at), k.rate_count, k.rate_period,
            k.rate_window, k.rate_starts),
        version = k.version + 1,
        updated_at = now()
    RETURNING k.key
),
advice(word) AS (
    -- Also when it folded as many wake-ups as it may: more may be left, for the next claim.
    SELECT 'again' WHERE EXISTS (SELECT FROM awake) OR (SELECT count(*) FROM woken) >= 1000
    UNION ALL
    SELECT 'light' WHERE NOT EXISTS (SELECT FROM walk WHERE key <> '')
                     AND NOT EXISTS (SELECT FROM woken)
),
{part:claim_write};

-- name: job_claim_light
-- The claim while no concurrency key is in play: job_claim's arguments, rows and guarantees,
-- without reading or writing keys. In play means a key with room whose place is due (the keys
-- job_claim's walk reads) or a wake-up not yet folded; then it claims nothing and advises
-- 'full': claim again at once with job_claim. Otherwise no keyed job can start, and job_claim
-- would take the same jobs: its statement reads the guard in the same snapshot as the jobs.
WITH RECURSIVE in_play(keyed) AS (
    SELECT EXISTS (SELECT FROM {schema}.concurrency_keys AS c
                   WHERE c.next_run_at <= now()
                     AND (c.max_running IS NULL OR c.running < c.max_running))
        OR EXISTS (SELECT FROM {schema}.concurrency_wakeups)
),
asked(queue) AS (
    SELECT q.queue FROM unnest($1::text[]) AS q(queue)
    WHERE NOT EXISTS (SELECT FROM {schema}.queue_pauses AS p WHERE p.queue = q.queue)
      AND NOT (SELECT keyed FROM in_play)
),
{part:claim_unkeyed},
picked AS MATERIALIZED (
    -- As in job_claim: at most one suspect per claim.
    SELECT c.id, c.concurrency_key, c.run_at, coalesce(c.expired, false) AS expired
    FROM (
        SELECT c.*, count(*) FILTER (WHERE c.suspect) OVER (
                   ORDER BY c.priority DESC, c.run_at, c.id) AS suspects
        FROM unkeyed AS c
    ) AS c
    WHERE NOT c.suspect OR c.suspects = 1
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $2
),
admitted(key) AS (SELECT NULL::text WHERE false),
advice(word) AS (SELECT 'full' WHERE (SELECT keyed FROM in_play)),
{part:claim_write};

-- name: job_finish_many
-- Record the outcomes of executions by worker $1, as decided (core/decision.py decides, this
-- records), each fenced by its claim token (id, claims) and the worker's id: an execution that
-- lost its lease (rescued, cancelled, retried, claimed again) matches nothing and changes
-- nothing. A completed job keeps its handler's result ($11, JSON text; NULL for None); waiters
-- of the jobs made terminal are notified (job_waiters_notify). Returns the tokens recorded, each
-- with its group's name when the job ended and its group is closed and waiting for its end
-- (App.close_group): the worker then runs the firing step for it (core/groups.py).
WITH input AS (
    -- In id order (the wrapper sorts them too): rows are locked in the order they are joined,
    -- so two writes of one worker's outcomes (a retried one, say) cannot deadlock.
    SELECT * FROM unnest($2::bigint[], $3::integer[], $4::text[], $5::float8[], $6::boolean[],
                         $7::boolean[], $8::text[], $9::text[], $10::text[], $11::text[])
        AS i(id, claims, state, delay, refund, snoozed, failure_reason, error_kind, error, result)
    ORDER BY id
),
finished AS (
    UPDATE {schema}.jobs AS j SET
        state = i.state::{schema}.job_state,
        failure_reason = i.failure_reason,
        finished_at = CASE WHEN i.state <> 'available' THEN now() END,
        -- Never past the deadline: the decision kept the delay within it (core/decision.py),
        -- but this write comes a batch later; a job due at its deadline fails at its claim.
        run_at = CASE WHEN i.state = 'available'
                      THEN least(now() + make_interval(secs => i.delay),
                                 coalesce(j.deadline_at, 'infinity'))
                      ELSE j.run_at END,
        attempt = j.attempt - i.refund::integer,
        snoozes = j.snoozes + i.snoozed::integer,
        errors = CASE WHEN i.error IS NULL THEN j.errors
                      ELSE {schema}.job_errors_append(j.errors, jsonb_build_object(
                          'attempt', j.attempt, 'at', now(), 'kind', i.error_kind,
                          'error', i.error)) END,
        worker_id = NULL,
        lease_expires_at = NULL,
        -- Its worker outlived this execution: whatever killed workers before, it was not this.
        crashes = 0,
        handbacks = CASE WHEN i.error_kind = 'unknown_task' THEN j.handbacks + 1 ELSE 0 END,
        -- Set by a completion only (the decision sends NULL otherwise).
        result = i.result::json
    FROM input AS i
    -- worker_id is set exactly while a job is running (a CHECK says so), and the token is
    -- the claim's: matching both fences out every execution but the one holding the lease.
    WHERE j.id = i.id AND j.claims = i.claims AND j.worker_id = $1
    RETURNING j.id, j.claims, j.concurrency_key, j.state, j.run_at, j.job_group
),
ended AS (
    -- Free the keys' slots; a job back to `available` puts its key back in the claim's walk.
    -- Then tell the waiters of the jobs that ended: after the aggregates have read every updated
    -- row, so the jobs are written when it runs (job_waiters_notify says why that matters).
    SELECT {schema}.concurrency_release(
               array_agg(concurrency_key) FILTER (WHERE concurrency_key IS NOT NULL),
               array_agg(CASE WHEN state = 'available' THEN run_at END)
                   FILTER (WHERE concurrency_key IS NOT NULL)),
           {schema}.job_waiters_notify(array_agg(id) FILTER (WHERE state <> 'available'))
    FROM finished
),
sealed AS (
    -- The closed groups still waiting for their end among those of the jobs this ended: one
    -- primary-key probe per distinct group, none when no job has a group. = ANY(ARRAY(...))
    -- keeps them probes in the worker's generic plan. Read, not locked: the firing step locks.
    SELECT g.name FROM {schema}.job_groups AS g
    WHERE g.name = ANY(ARRAY(SELECT DISTINCT f.job_group FROM finished AS f
                             WHERE f.job_group IS NOT NULL AND f.state <> 'available'))
      AND g.sealed_at IS NOT NULL AND g.fired_at IS NULL
)
SELECT f.id, f.claims, s.name AS sealed_group
FROM finished AS f CROSS JOIN ended
LEFT JOIN sealed AS s ON s.name = f.job_group AND f.state <> 'available';

-- name: job_heartbeat
-- Extend by $2 seconds the leases worker $1 still holds among its claims (ids $3, tokens $4);
-- returns the claims it still holds. A row locked by someone else right now (this worker's own
-- write of the job's outcome, say) is not waited for: its lease is renewed at the next beat,
-- and rescue skips locked rows too.
WITH held AS (
    SELECT j.id, j.claims FROM {schema}.jobs AS j
    JOIN unnest($3::bigint[], $4::integer[]) AS i(id, claims)
      ON j.id = i.id AND j.claims = i.claims
    WHERE j.worker_id = $1
),
free AS (
    SELECT id FROM {schema}.jobs
    WHERE id = ANY(ARRAY(SELECT id FROM held)) AND worker_id = $1
    FOR NO KEY UPDATE SKIP LOCKED
),
renewed AS (
    UPDATE {schema}.jobs SET lease_expires_at = now() + make_interval(secs => $2)
    WHERE id = ANY(ARRAY(SELECT id FROM free))
)
SELECT id, claims FROM held;

-- name: job_rescue
-- Return up to $1 running jobs whose lease lapsed to `available` (their attempt counts), or fail
-- them when that was their last attempt or their deadline has passed. Nothing is rescued in the
-- first $2 seconds after the server started: leases that lapsed while it was down say nothing
-- about their workers, which get that long to reconnect and renew them. A lease whose worker has
-- no connection open any more (its process died: killed, out of memory, a crash no `except`
-- catches) counts a crash against the job; a job whose worker died twice fails `worker_died`
-- instead of taking down more workers (job_claim runs a job that crashed once alone among a
-- worker's suspects, so the second death is its own). Waiters of the jobs it fails are notified.
-- Returns each job rescued with the worker that held it and whether that worker died.
WITH lapsed AS (
    SELECT id FROM {schema}.jobs
    WHERE state = 'running' AND lease_expires_at < now()
      AND pg_postmaster_start_time() < now() - make_interval(secs => $2)
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
holders AS MATERIALIZED (
    -- A worker's connections carry its id (application_name, cut at 63 bytes as the server cuts
    -- it), which every role may read in pg_stat_activity: none left means its process is gone.
    -- The server keeps what a transaction first read of it until the transaction ends: the
    -- snapshot is cleared first, for a rescue inside a longer transaction sees the present.
    SELECT h.worker_id, NOT EXISTS (
               SELECT FROM pg_stat_activity AS a
               WHERE a.application_name = left('sweepq worker ' || h.worker_id, 63)) AS died
    FROM (SELECT DISTINCT j.worker_id FROM {schema}.jobs AS j
          WHERE j.id = ANY(ARRAY(SELECT id FROM lapsed))) AS h
    CROSS JOIN LATERAL (SELECT pg_stat_clear_snapshot()) AS fresh
),
rescued AS (
    UPDATE {schema}.jobs AS j SET
        crashes = j.crashes + h.died::integer,
        state = CASE
            WHEN (h.died AND j.crashes >= 1) OR j.attempt >= j.max_attempts
                 OR j.deadline_at <= now() THEN 'failed'
            ELSE 'available' END::{schema}.job_state,
        failure_reason = CASE
            WHEN h.died AND j.crashes >= 1 THEN 'worker_died'
            WHEN j.attempt >= j.max_attempts THEN 'max_attempts_exceeded'
            WHEN j.deadline_at <= now() THEN 'deadline_exceeded' END,
        finished_at = CASE
            WHEN (h.died AND j.crashes >= 1) OR j.attempt >= j.max_attempts
                 OR j.deadline_at <= now() THEN now() END,
        run_at = now(),
        errors = {schema}.job_errors_append(j.errors, CASE
            WHEN h.died THEN jsonb_build_object(
                'attempt', j.attempt, 'at', now(), 'kind', 'worker_died',
                'error', 'worker ' || j.worker_id || ' died while running it (its lease lapsed '
                         || 'and none of its connections is open)')
            ELSE jsonb_build_object(
                'attempt', j.attempt, 'at', now(), 'kind', 'lease_expired',
                'error', 'lease held by worker ' || j.worker_id || ' expired') END),
        worker_id = NULL,
        lease_expires_at = NULL
    FROM lapsed, holders AS h
    WHERE j.id = lapsed.id AND h.worker_id = j.worker_id
    RETURNING j.id, j.concurrency_key, j.state, j.run_at, h.worker_id, h.died, j.failure_reason
),
released AS (
    SELECT {schema}.concurrency_release(
        array_agg(concurrency_key),
        array_agg(CASE WHEN state = 'available' THEN run_at END))
    FROM rescued WHERE concurrency_key IS NOT NULL
),
announced AS (
    -- Waiters of the jobs this failed (as in job_finish_many).
    SELECT {schema}.job_waiters_notify(array_agg(id) FILTER (WHERE state = 'failed'))
    FROM rescued
)
SELECT id, worker_id, died, state::text AS state, failure_reason
FROM rescued CROSS JOIN released CROSS JOIN announced
ORDER BY worker_id, id;

-- name: job_expire_deadlines
-- Fail up to $1 available jobs whose deadline passed, whether or not any worker serves them;
-- their waiters are notified.
WITH due AS (
    SELECT id FROM {schema}.jobs
    WHERE state = 'available' AND deadline_at <= now()
    ORDER BY deadline_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
expired AS (
    UPDATE {schema}.jobs AS j
    SET state = 'failed', failure_reason = 'deadline_exceeded', finished_at = now()
    FROM due WHERE j.id = due.id
    RETURNING j.id
),
announced AS (
    SELECT {schema}.job_waiters_notify(array_agg(id)) FROM expired
)
SELECT id FROM expired CROSS JOIN announced;

-- name: job_cancel
-- Cancel job $1, or the jobs of group $2: those available, and those running too when $3. A
-- running job loses its lease (its worker's writes are fenced out) and frees its key's slot.
-- Their waiters are notified. Returns how many were cancelled, and the closed groups waiting for
-- their end among those of the jobs cancelled (the caller runs the firing step for them).
WITH target AS (
    SELECT id, state AS was FROM {schema}.jobs
    WHERE (id = $1 OR job_group = $2)
      AND (state = 'available' OR (state = 'running' AND $3::boolean))
    ORDER BY id
    FOR UPDATE
),
cancelled AS (
    UPDATE {schema}.jobs AS j SET
        state = 'cancelled', finished_at = now(), worker_id = NULL, lease_expires_at = NULL,
        errors = {schema}.job_errors_append(j.errors, jsonb_build_object(
            'attempt', j.attempt, 'at', now(), 'kind', 'cancelled', 'error', $4::text))
    FROM target AS t WHERE j.id = t.id
    RETURNING j.id, j.concurrency_key, t.was, j.job_group
),
released AS (
    SELECT {schema}.concurrency_release(array_agg(concurrency_key), NULL)
    FROM cancelled WHERE was = 'running' AND concurrency_key IS NOT NULL
),
woken AS (
    -- An ordered key whose waiting head is cancelled may start the job behind it now, not at
    -- the time the head was due: a wake-up brings the key back into the claim's walk.
    INSERT INTO {schema}.concurrency_wakeups (key, run_at)
    SELECT DISTINCT c.concurrency_key, now() FROM cancelled AS c
    WHERE c.was = 'available' AND c.concurrency_key IS NOT NULL
      AND EXISTS (SELECT FROM {schema}.concurrency_keys AS k
                  WHERE k.key = c.concurrency_key AND k.ordered)
),
announced AS (
    SELECT {schema}.job_waiters_notify(array_agg(id)) FROM cancelled
)
SELECT count(*) AS cancelled,
       ARRAY(SELECT g.name FROM {schema}.job_groups AS g
             WHERE g.name = ANY(ARRAY(SELECT DISTINCT c.job_group FROM cancelled AS c
                                      WHERE c.job_group IS NOT NULL))
               AND g.sealed_at IS NOT NULL AND g.fired_at IS NULL
             ORDER BY g.name) AS sealed
FROM cancelled CROSS JOIN released CROSS JOIN announced;

-- name: job_retry
-- Make a terminal job available again now with a fresh attempt budget (max_attempts is never
-- changed) and its deadline re-armed for the same duration; an available job runs now. A job of
-- a concurrency key leaves a wake-up for it, as an enqueue does. A completed job's result goes:
-- the job will run again.
WITH retried AS (
    UPDATE {schema}.jobs SET
        state = 'available', run_at = now(),
        attempt = CASE WHEN state = 'available' THEN attempt ELSE 0 END,
        crashes = CASE WHEN state = 'available' THEN crashes ELSE 0 END,
        handbacks = CASE WHEN state = 'available' THEN handbacks ELSE 0 END,
        finished_at = NULL, failure_reason = NULL, result = NULL,
        deadline_at = CASE WHEN state = 'available' THEN deadline_at
                           ELSE now() + deadline_after END
    WHERE id = $1 AND state <> 'running'
    RETURNING id, concurrency_key, run_at
),
woken AS (
    INSERT INTO {schema}.concurrency_wakeups (key, run_at)
    SELECT concurrency_key, run_at FROM retried WHERE concurrency_key IS NOT NULL
)
SELECT id FROM retried;

-- name: identity_lock_prune
-- Delete up to $1 rows of identity_locks whose identity no job carries any more (a locked row is
-- an enqueue in progress: skipped).
DELETE FROM {schema}.identity_locks AS l
WHERE l.identity_key = ANY(ARRAY(
    SELECT i.identity_key FROM {schema}.identity_locks AS i
    WHERE NOT EXISTS (SELECT FROM {schema}.jobs AS j WHERE j.identity_key = i.identity_key)
    LIMIT $1
    FOR UPDATE SKIP LOCKED));

-- name: job_prune
-- Delete up to $2 terminal jobs that finished before now() - $1 seconds, oldest first.
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE state IN ('completed', 'failed', 'cancelled')
      AND finished_at < now() - make_interval(secs => $1)
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.jobs AS j USING doomed WHERE j.id = doomed.id;
