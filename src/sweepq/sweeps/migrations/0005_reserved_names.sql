-- sweepq sweeps, version 5: the names of a run's jobs are the sweeps' own.

-- A run's leaves are the group and the idempotency scope 'sweep:<run>', its links the scope
-- 'sweep-link:<run>' (sweeps/naming.py). A job from outside the sweeps that used them would
-- count, fail or cancel with a run it is not part of, or collide with its leaves' keys: the
-- SQL enqueue function refuses them (core migration 0010), as App.enqueue does from
-- SweepsLayer.reserved, which a test holds equal to these rows.
INSERT INTO {schema}.reserved_names (kind, prefix, component) VALUES
    ('group', 'sweep:', 'sweeps'),
    ('idempotency_scope', 'sweep:', 'sweeps'),
    ('idempotency_scope', 'sweep-link:', 'sweeps');
