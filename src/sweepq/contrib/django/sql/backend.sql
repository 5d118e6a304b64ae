-- Statements SweepqBackend runs on Django's own database connection (psycopg, through Django's
-- cursor), inside whatever transaction the caller is in. Their parameters are written `%s`
-- (Django's cursor style), so a statement's text, comments included, holds no other percent
-- sign. Each is called from exactly one place in contrib/django/backend.py. Jobs are written by
-- the core's SQL function and read by the core's statements (job_get_json), never here.

-- name: django_task_enqueue
-- Enqueue one job through the schema's SQL enqueue function (core migration 0005): the task (a
-- Django task's module path), its args (a JSON object: {"args": [...], "kwargs": {...}}) and its
-- options (a JSON object of job options). Returns the job's id and 'created', 'existing_active'
-- or 'existing_terminal'.
SELECT job_id, outcome FROM {schema}.enqueue(%s, %s::jsonb, %s::jsonb);
